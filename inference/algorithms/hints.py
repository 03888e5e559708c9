"""The coreference pipeline's hints for EntityNLM's proposal, placed on the token streams EntityNLM reads.

The pipeline reads a document as written (case, punctuation: what its detector was trained on); EntityNLM reads
it preprocessed (lowercased, punctuation outside mentions dropped, ``</s>`` after each sentence). A hint's spans
are carried over by :func:`coref.corpora.preprocess.kept_tokens`, the alignment of the two, and then onto stream
positions; a span left empty (all punctuation) is dropped, and its share as an antecedent goes to "new".
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from coref.corpora.preprocess import PreprocessConfig, kept_tokens
from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.resolution.hints import CorefHint, pipeline_hints
from coref.resolution.pipeline import CorefPipeline
from generative.entitynlm.hints import CorefHints, StreamHint
from generative.layers.batch import DocumentBatch, stream_positions


@dataclass(frozen=True)
class HintSettings:
    """How the proposal follows the pipeline: the mixture's ``weight`` (0: not at all, the paper's proposal),
    the ranker's softmax ``temperature``, the hint's smoothing ``epsilon``, and the pipeline's ``detector`` and
    ``resolver`` files (None: the bundled ones). ``lookahead``: the share of R's, E's and L's proposal that is the
    model's own choice given the word (:mod:`generative.entitynlm.lookahead`; 0: none, needs no pipeline)."""

    weight: float = 0.0
    temperature: float = 1.0
    epsilon: float = 0.02
    detector: str | None = None
    resolver: str | None = None
    lookahead: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight < 1.0:
            raise ValueError(f"the hint weight must be in [0, 1), got {self.weight}")
        if not 0.0 <= self.lookahead < 1.0:
            raise ValueError(f"the lookahead must be in [0, 1), got {self.lookahead}")
        if self.temperature <= 0:
            raise ValueError(f"the hint temperature must be positive, got {self.temperature}")

    @property
    def used(self) -> bool:
        return self.weight > 0

    def pipeline(self) -> CorefPipeline:
        """The pipeline these settings name, loaded (a bad file fails here, before any data is read)."""
        return CorefPipeline.load(self.detector, self.resolver)


@dataclass(frozen=True)
class HintOptions:
    """The proposal options of a command's config (``--hint-weight``, ``--hint-temperature``, ``--hint-detector``,
    ``--hint-resolver``, ``--lookahead``): a base of the configs that sample with EntityNLM's proposal."""

    hint_weight: float = 0.0
    hint_temperature: float = 1.0
    hint_detector: str | None = None
    hint_resolver: str | None = None
    lookahead: float = 0.0

    def hints(self) -> HintSettings:
        """How the proposal follows the coreference pipeline (weight 0: not at all) and the model's choice given
        the word (lookahead 0: not at all)."""
        return HintSettings(self.hint_weight, self.hint_temperature, detector=self.hint_detector,
                            resolver=self.hint_resolver, lookahead=self.lookahead)


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


def document_hints(settings: HintSettings, pipeline: CorefPipeline, originals: Sequence[Document],
                   preprocessed: Sequence[Document], config: PreprocessConfig) -> list[CorefHint]:
    """``pipeline``'s hints of each document, on its preprocessed tokens (``originals[i]`` is what
    ``preprocessed[i]`` was made from by ``config``), at the settings' temperature."""
    hints = pipeline_hints(pipeline, originals, settings.temperature)
    return [preprocessed_hint(hint, original, document, config)
            for hint, original, document in zip(hints, originals, preprocessed)]


def corpus_hints(settings: HintSettings, pipeline: CorefPipeline, corpus: str, split: str, data_dir: str | None,
                 preprocessed: Sequence[Document], config: PreprocessConfig) -> dict[tuple[str, int], CorefHint]:
    """:func:`document_hints` of a corpus split's ``preprocessed`` documents (read again as written), by
    document key."""
    originals = {(document.id, document.part): document for document in load_corpus(corpus, split, data_dir).documents}
    keyed = [originals[document.id, document.part] for document in preprocessed]
    hints = document_hints(settings, pipeline, keyed, preprocessed, config)
    return {(document.id, document.part): hint for document, hint in zip(preprocessed, hints)}


def batch_hints(settings: HintSettings, batch: DocumentBatch, hints: dict[tuple[str, int], CorefHint],
                documents: dict[tuple[str, int], Document]) -> CorefHints | None:
    """The proposal's hints for ``batch`` (None when the settings use none)."""
    if not settings.used:
        return None
    stream = [stream_hint(hints[key], documents[key]) for key in batch.keys]
    return CorefHints.of(batch, stream, settings.weight, settings.epsilon)
