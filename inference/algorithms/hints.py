"""The coreference pipeline's hints for EntityNLM's proposal, placed on the token streams EntityNLM reads.

The pipeline reads a document as written (case, punctuation: what its detector was trained on); EntityNLM reads
it preprocessed (lowercased, punctuation outside mentions dropped, ``</s>`` after each sentence). A hint's spans
are carried over by :func:`coref.corpora.preprocess.kept_tokens`, the alignment of the two, and then onto stream
positions; a span left empty (all punctuation) is dropped, and its share as an antecedent goes to "new".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

import torch

from coref.corpora.preprocess import PreprocessConfig, kept_tokens
from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.resolution.hints import CorefHint, pipeline_hints
from coref.resolution.pipeline import CorefPipeline
from generative.entitynlm.hints import CorefHints, StreamHint
from generative.layers.batch import DocumentBatch, stream_positions
from inference.algorithms.config import ProposalConfig


def hint_pipeline(config: ProposalConfig) -> CorefPipeline:
    """The pipeline ``config``'s hints read the texts with (its detector and resolver; None: the bundled ones),
    loaded: a bad file fails here, before any data is read."""
    return CorefPipeline.load(config.hint_detector, config.hint_resolver)


def preprocessed_hint(hint: CorefHint, original: Document, preprocessed: Document, config: PreprocessConfig
                      ) -> CorefHint:
    """``hint`` of ``original`` (the text as written) carried onto the tokens of its ``preprocessed`` version."""
    kept = kept_tokens(original, config)
    if len(kept) != len(preprocessed.tokens):
        raise ValueError(f"document {original.id!r} part {original.part}: its preprocessed version has "
                         f"{len(preprocessed.tokens)} tokens, but preprocessing keeps {len(kept)} of it")
    indices, spans = [], []
    for index, (start, end) in enumerate(hint.spans):
        first, stop = bisect_left(kept, start), bisect_left(kept, end)
        if stop > first:
            indices.append(index)
            spans.append((first, stop))
    return hint.restricted(indices, spans)


def stream_hint(hint: CorefHint, document: Document) -> StreamHint:
    """``hint`` of ``document`` (its tokens) as tensors on the document's token stream."""
    positions = stream_positions(document)
    return StreamHint(start=torch.tensor([positions[start] for start, _ in hint.spans], dtype=torch.long),
                      length=torch.tensor([end - start for start, end in hint.spans], dtype=torch.long),
                      linked=torch.from_numpy(hint.linked.copy()),
                      antecedents=torch.from_numpy(hint.antecedents.copy()),
                      probabilities=torch.from_numpy(hint.probabilities.copy()))


def document_hints(settings: ProposalConfig, pipeline: CorefPipeline, originals: Sequence[Document],
                   preprocessed: Sequence[Document], config: PreprocessConfig) -> list[CorefHint]:
    """``pipeline``'s hints of each document, on its preprocessed tokens (``originals[i]`` is what
    ``preprocessed[i]`` was made from by ``config``), at the settings' hint temperature."""
    hints = pipeline_hints(pipeline, originals, settings.hint_temperature)
    return [preprocessed_hint(hint, original, document, config)
            for hint, original, document in zip(hints, originals, preprocessed)]


def corpus_hints(settings: ProposalConfig, pipeline: CorefPipeline, corpus: str, split: str, data_dir: str | None,
                 preprocessed: Sequence[Document], config: PreprocessConfig) -> dict[tuple[str, int], CorefHint]:
    """:func:`document_hints` of a corpus split's ``preprocessed`` documents (read again as written), by
    document key."""
    originals = {(document.id, document.part): document for document in load_corpus(corpus, split, data_dir).documents}
    keyed = [originals[document.id, document.part] for document in preprocessed]
    hints = document_hints(settings, pipeline, keyed, preprocessed, config)
    return {(document.id, document.part): hint for document, hint in zip(preprocessed, hints)}


def batch_hints(settings: ProposalConfig, batch: DocumentBatch, hints: dict[tuple[str, int], CorefHint],
                documents: dict[tuple[str, int], Document]) -> CorefHints | None:
    """The proposal's hints for ``batch`` (None when the settings use none)."""
    if not settings.hinted:
        return None
    stream = [stream_hint(hints[key], documents[key]) for key in batch.keys]
    return CorefHints.of(batch, stream, settings.hint_weight, settings.hint_epsilon)
