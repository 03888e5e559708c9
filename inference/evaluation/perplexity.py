"""Test perplexity of any language model checkpoint, in total and per token group (Kobayashi et al. 2017, Table 2
and Figures 4-6): :func:`perplexity_by_group`, whose command is :mod:`inference.commands.perplexity` (``python -m
inference.perplexity``).

The checkpoint says what it reads (:data:`generative.registry.DATA_KINDS`): EntityNLM's preprocessed text, or
the Anonymized Language Modelling data, where each coreference chain's mentions are one token ``<unkK>``. Every
target token (the words and sentence ends, as every model predicts them) falls in the paper's groups:

- ``all``;
- ``reappearing_entities``: a token of a mention of an entity mentioned before in the document;
- ``following_entities``: the token right after a mention;
- ``non_entities``: a token outside every mention.

and in the paper's breakdowns: by position in the document (Figure 4; 1-20, 21-40, ...), tokens following the
k-th occurrence of an entity (Figure 5), and entity tokens by the number of entities seen before them (Figure 6,
"antecedent candidates"). A group's perplexity is exp(- its summed log-probability / its tokens).

For an exact model (:attr:`generative.registry.ModelKind.exact`: the RNNLM, the Dynamic Neural Text Model, the
n-gram) the log-probabilities are its conditionals log p(x_t | x_<t). EntityNLM's per-word probabilities are not
defined without its latent structure: its perplexity comes from ``python -m inference.marginal_ppl``, which this
module refuses to guess.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from coref.document import Document
from coref.io.progress import progress as progress_bar
from generative.layers.batch import TokenStream, batches_by_length, token_stream
from generative.registry import LANGUAGE_MODELS, model_kind
from inference.data import language_model_documents
from inference.distributed import ranks
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import Checkpoint, CheckpointError, language_model, ngram_model

GROUPS = ("all", "reappearing_entities", "following_entities", "non_entities")
# The paper's buckets: Figure 4 (token position), Figure 5 (occurrence of the entity a token follows), Figure 6
# (entities seen before an entity token). Each bucket is (label, lowest, highest) with highest None for open.
POSITION_BUCKETS = (("1-20", 1, 20), ("21-40", 21, 40), ("41-60", 41, 60), ("61-100", 61, 100),
                    ("101-200", 101, 200), ("201-", 201, None))
OCCURRENCE_BUCKETS = (("1", 1, 1), ("2", 2, 2), ("3-6", 3, 6), ("7-10", 7, 10), ("11-", 11, None))
ANTECEDENT_BUCKETS = (("0", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3", 3, 3), ("4-6", 4, 6), ("7-10", 7, 10),
                      ("11-20", 11, 20), ("21-", 21, None))


# ---- token groups --------------------------------------------------------------------------------------------


def mention_starts(stream: TokenStream) -> np.ndarray:
    """Whether each target starts a mention (R = 1 after a token that ended one, or at the start)."""
    R, L = np.array(stream.R), np.array(stream.L)
    ended_before = np.concatenate([[True], (R[:-1] == 0) | (L[:-1] == 1)])
    return (R == 1) & ended_before


def token_groups(stream: TokenStream) -> dict[str, np.ndarray]:
    """Boolean masks over the targets of one document, one per group of :data:`GROUPS`."""
    R, E, L = np.array(stream.R), np.array(stream.E), np.array(stream.L)
    starts = mention_starts(stream)
    mention_number = np.cumsum(starts)  # which mention each mention token belongs to (1-based)
    first_mention = {}
    for t in np.flatnonzero(starts):
        first_mention.setdefault(int(E[t]), int(mention_number[t]))
    seen_before = np.array([R[t] == 1 and first_mention[int(E[t])] < mention_number[t] for t in range(len(R))],
                           dtype=bool)
    mention_end = (R == 1) & (L == 1)
    return {
        "all": np.ones(len(R), dtype=bool),
        "reappearing_entities": seen_before,
        "following_entities": np.concatenate([[False], mention_end[:-1]]),
        "non_entities": R == 0,
    }


def _bucket(value: int, buckets: Sequence[tuple[str, int, int | None]]) -> str:
    return next(label for label, low, high in buckets if value >= low and (high is None or value <= high))


def token_breakdowns(stream: TokenStream) -> dict[str, list[str | None]]:
    """Each target's bucket in the paper's Figures 4-6 (None where a figure does not count the token)."""
    R, E = np.array(stream.R), np.array(stream.E)
    starts = mention_starts(stream)
    occurrences: dict[int, int] = {}
    occurrence_of_mention, seen_entities = np.zeros(len(R), dtype=int), np.zeros(len(R), dtype=int)
    for t in range(len(R)):
        if starts[t]:
            seen_entities[t] = len(occurrences) - (int(E[t]) in occurrences)  # other entities seen before
            occurrences[int(E[t])] = occurrences.get(int(E[t]), 0) + 1
            occurrence_of_mention[t] = occurrences[int(E[t])]
        elif R[t]:
            occurrence_of_mention[t], seen_entities[t] = occurrence_of_mention[t - 1], seen_entities[t - 1]
    mention_end = token_groups(stream)["following_entities"]
    return {
        "position": [_bucket(t + 1, POSITION_BUCKETS) for t in range(len(R))],
        "following_occurrence": [_bucket(int(occurrence_of_mention[t - 1]), OCCURRENCE_BUCKETS)
                                 if mention_end[t] else None for t in range(len(R))],
        "antecedent_entities": [_bucket(int(seen_entities[t]), ANTECEDENT_BUCKETS) if R[t] else None
                                for t in range(len(R))],
    }


def _perplexity(log_prob: float, tokens: int) -> float | None:
    return math.exp(-log_prob / tokens) if tokens else None


def group_table(streams: Sequence[TokenStream], log_probs: Sequence[np.ndarray]) -> dict[str, dict]:
    """Perplexity and token count of every group, and of every bucket of the breakdowns."""
    totals: dict[str, list[float]] = {}

    def add(name: str, values: np.ndarray) -> None:
        total = totals.setdefault(name, [0.0, 0])
        total[0] += float(values.sum())
        total[1] += len(values)

    for stream, log_prob in zip(streams, log_probs):
        for name, mask in token_groups(stream).items():
            add(name, log_prob[mask])
        for figure, buckets in token_breakdowns(stream).items():
            for t, bucket in enumerate(buckets):
                if bucket is not None:
                    add(f"{figure}:{bucket}", log_prob[t : t + 1])
    table = {name: {"perplexity": _perplexity(*totals.get(name, (0.0, 0))), "tokens": totals.get(name, (0, 0))[1]}
             for name in GROUPS}
    for figure, buckets in (("position", POSITION_BUCKETS), ("following_occurrence", OCCURRENCE_BUCKETS),
                            ("antecedent_entities", ANTECEDENT_BUCKETS)):
        table[figure] = {label: {"perplexity": _perplexity(*totals.get(f"{figure}:{label}", (0.0, 0))),
                                 "tokens": int(totals.get(f"{figure}:{label}", (0, 0))[1])}
                         for label, _, _ in buckets}
    return table


# ---- per-token log-probabilities -----------------------------------------------------------------------------


def require_exact(checkpoint: Checkpoint) -> None:
    """Refuse a model whose per-word probabilities are not its exact conditionals (EntityNLM)."""
    if checkpoint.kind != "ngram" and not model_kind(checkpoint.kind).exact:
        raise CheckpointError(f"{checkpoint.kind} checkpoints have no exact per-word probabilities: their "
                              "perplexity is estimated by python -m inference.marginal_ppl")


def document_log_probs(checkpoint: Checkpoint, documents: Sequence[Document], device: torch.device,
                       batch_tokens: int, progress: bool = True, scored_from: Sequence[int] | None = None,
                       model: nn.Module | None = None) -> list[np.ndarray]:
    """log p(x_t | x_<t) of every target of every document, in the order of ``documents``; with
    ``scored_from`` (the DNTM only), of document i's targets from ``scored_from[i]`` on, 0 before: the model
    reads the prefix but skips its softmax. ``model``: the checkpoint's model already built on ``device`` (a
    caller that scores many times builds it once, as :mod:`inference.api` does); default built here."""
    vocabulary = checkpoint.vocabulary
    if checkpoint.kind == "ngram":
        ngram = ngram_model(checkpoint)
        return [ngram.log_prob(token_stream(document, vocabulary).words) for document in documents]
    require_exact(checkpoint)
    model = language_model(checkpoint, device) if model is None else model
    first_target = {document.key: start for document, start in zip(documents, scored_from or [])}
    run = ranks()  # under torchrun, each rank scores its share of the batches and all gather them
    scored = []
    with torch.no_grad():
        for batch in progress_bar(run.shard(batches_by_length(documents, vocabulary, batch_tokens)),
                                  desc=f"{checkpoint.kind}: log-probabilities", unit="batch",
                                  enabled=progress and run.leader):
            batch = batch.to(device)
            if scored_from is None:
                values = model.token_log_probs(batch)
            else:
                starts = torch.tensor([first_target[key] for key in batch.keys], device=device)
                values = model.token_log_probs(batch, torch.arange(batch.steps, device=device) >= starts[:, None])
            values = values.cpu().numpy()
            scored.append([(key, values[row, :length])
                           for row, (key, length) in enumerate(zip(batch.keys, batch.lengths.tolist()))])
    by_key = dict(pair for batch in run.gather(scored) for pair in batch)
    return [by_key[document.key] for document in documents]


def perplexity_by_group(checkpoint: str, corpus: str = "sample", split: str = "test", data_dir: str | None = None,
                        batch_tokens: int = 32_000, device: str = "auto", seed: int = 0) -> dict:
    """The perplexity of an exact model's ``checkpoint`` on a corpus split, in total and per token group and
    breakdown bucket (:func:`group_table`), in batches of ``batch_tokens`` padded tokens: the result ``python -m
    inference.perplexity`` prints and writes as JSON."""
    set_seed(seed)
    where = resolve_device(device)
    loaded = Checkpoint.load(checkpoint)
    require_exact(loaded)  # before reading the corpus, so the refusal is the only line
    data = "entity" if loaded.kind == "ngram" else LANGUAGE_MODELS[loaded.kind].data
    documents = language_model_documents(data, corpus, split, data_dir, loaded.preprocess, loaded.vocabulary)
    log_probs = document_log_probs(loaded, documents, where, batch_tokens)
    streams = [token_stream(document, loaded.vocabulary) for document in documents]
    return {"checkpoint": str(checkpoint), "kind": loaded.kind, "config": loaded.config, "corpus": corpus,
            "split": split, "documents": len(documents), "groups": group_table(streams, log_probs)}


def format_result(result: dict) -> str:
    """Each group's perplexity and tokens, as the command prints them."""
    lines = [f"{result['kind']} on {result['corpus']}/{result['split']} ({result['documents']} documents)",
             f"{'group':<24}{'perplexity':>12}{'tokens':>10}"]
    for name in GROUPS:
        cell = result["groups"][name]
        value = f"{cell['perplexity']:.2f}" if cell["perplexity"] is not None else "-"
        lines.append(f"{name:<24}{value:>12}{cell['tokens']:>10}")
    return "\n".join(lines)
