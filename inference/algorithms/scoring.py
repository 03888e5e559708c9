"""EntityNLM's exact log p(R, E, L, X) (eq. 12) of given coreference structures of a document: what reranking
k-best lists (paper §5.2), the posterior's local link conditionals and the API's ``rerank`` score candidates by.
Each candidate is a partition of the document's mentions, scored in one run of the known-annotation path with the
new-entity embeddings at their mean (:func:`noise_free`), so scores are deterministic."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from coref.corpora.preprocess import preprocess_document
from coref.document import Document
from coref.resolution.kbest import Partition, document_with_clusters
from coref.resolution.ranker import RESOLVER_PREPROCESSING, MentionRanker, Syntax
from coref.resolution.rerank import GENERATORS, CandidateList, document_candidates
from generative.entitynlm.model import EntityNLM
from generative.entitynlm.state import Annotation
from generative.layers.batch import make_batch
from inference.training.checkpoint import Checkpoint


def noise_free(checkpoint: Checkpoint) -> Checkpoint:
    """The checkpoint with new-entity embeddings at their mean (sigma = 0 in eq. 7): deterministic scores."""
    return dataclasses.replace(checkpoint, config={**checkpoint.config, "new_entity_scale": 0.0})


def check_same_mentions(resolver_document: Document, model_document: Document) -> None:
    """Refuse to score a resolver document's partitions on an EntityNLM document with other mentions: the same
    spans, or, where the resolver reads the raw text (predicted mentions), the same number of mentions of the
    same lengths (preprocessing drops punctuation between mentions only)."""
    same_tokens = len(resolver_document.tokens) == len(model_document.tokens)
    resolver_mentions = [m.span if same_tokens else len(m) for m in resolver_document.mentions]
    if resolver_mentions != [m.span if same_tokens else len(m) for m in model_document.mentions]:
        raise ValueError(
            f"document {resolver_document.id!r}: the resolver's and EntityNLM's preprocessing disagree "
            f"({len(resolver_document.tokens)} vs {len(model_document.tokens)} tokens, "
            f"{len(resolver_document.mentions)} vs {len(model_document.mentions)} mentions or different spans)"
        )


def candidate_log_joints(
    model: EntityNLM, checkpoint: Checkpoint, document: Document, partitions: Sequence[Partition], device: torch.device
) -> torch.Tensor:
    """log p(R, E, L, X) (eq. 12) of ``document``'s words under each partition of its mentions, in one run: a
    (P,) tensor, with its gradient where autograd is on."""
    candidates = [document_with_clusters(document, partition) for partition in partitions]
    stacked = Annotation.of(make_batch(candidates, checkpoint.vocabulary))  # (P, T): candidate p as document p
    per_particle = Annotation(*(values.unsqueeze(1).to(device) for values in (stacked.R, stacked.E, stacked.L)))
    words = make_batch([document], checkpoint.vocabulary).to(device)
    return model.log_joint(words, per_particle)[:, 0]


def candidate_log_joint(
    model: EntityNLM, checkpoint: Checkpoint, document: Document, partitions: Sequence[Partition], device: torch.device
) -> list[float]:
    """:func:`candidate_log_joints` as numbers, without gradient."""
    with torch.no_grad():
        return candidate_log_joints(model, checkpoint, document, partitions, device).tolist()


def gold_mention_documents(document: Document, checkpoint: Checkpoint) -> tuple[Document, Document]:
    """A corpus document with its gold mentions as reranking reads it: the resolver's document (EntityNLM's
    preprocessing with case and numbers kept, :func:`coref.resolution.ranker.resolver_documents`) and EntityNLM's (the
    checkpoint's preprocessing and vocabulary, :func:`inference.data.prepared_documents`), the same mentions."""
    return (preprocess_document(document, RESOLVER_PREPROCESSING)[0],
            preprocess_document(document, checkpoint.preprocess, checkpoint.vocabulary)[0])


def rerank_document(
    document: Document, model_document: Document, ranker: MentionRanker, model: EntityNLM, checkpoint: Checkpoint,
    device: torch.device, k: int, generators: Sequence[str] = GENERATORS, syntax: Syntax | None = None,
    key: Document | None = None, chunk: int = 64,
) -> dict[str, CandidateList]:
    """One document's candidate lists (:func:`coref.resolution.rerank.document_candidates`) as the command makes them,
    without its cache: ``ranker``'s arc scores of ``document`` (the resolver's, with its ``syntax``), k-best lists
    by each generator, and every distinct partition scored by ``model`` (built from :func:`noise_free`) on
    ``model_document`` (EntityNLM's of the same mentions, :func:`gold_mention_documents`), ``chunk`` candidates
    per run; evaluated against ``key`` (default: ``document`` itself)."""
    check_same_mentions(document, model_document)

    def log_joint(_: Document, partitions: Sequence[Partition]) -> list[float]:
        return [score for start in range(0, len(partitions), chunk)
                for score in candidate_log_joint(model, checkpoint, model_document, partitions[start : start + chunk],
                                                 device)]

    return document_candidates(document, ranker.arc_scores(document, syntax), generators, k, log_joint, key)
