"""Coreference reranking with EntityNLM (paper §5.2, Table 2): a base resolver's k-best lists reranked by log p(R, E,
L, X): :func:`rerank_corpus` of a :class:`RerankConfig`, whose command is :mod:`inference.commands.rerank` (``python
-m inference.rerank``).

For every document of the dev and test splits the resolver (:mod:`coref.resolution.ranker`) scores all antecedent
arcs over the gold mentions; each generator ("heuristic", the paper's; "exact") turns the table into a k-best list
of partitions, and EntityNLM scores every distinct partition once (eq. 12), all candidates of a document in one run
that shares the LSTM. :mod:`coref.resolution.rerank` then picks the interpolation weight on dev and prints Table 2
for test: the base one-best, EntityNLM alone, EntityNLM + resolver score, and the oracle, with approximate
randomization p-values against the base.

With a ``detector`` the mentions are not given: a mention detector finds them in the raw text
(:mod:`coref.resolution.mentions`), the resolver trained on its mentions (``python -m coref.resolver train
--detector``) links them, and EntityNLM reranks the partitions of the mentions it can encode (outermost, not
crossing), every system scored against EntityNLM's mentions of the gold.

EntityNLM's new-entity embedding u = normalise(r_1 + sigma * eps) (eq. 7) is taken at its mean (eps = 0): otherwise
every score would carry sampling noise of a few tenths of a nat, as large as some differences between candidates,
and a rerun would rank differently. Scores are cached per (document, partition) in a JSON file (in the config's
``cache`` folder; the command's default is beside ``--json OUT``) rewritten atomically after each document, so an
interrupted run resumes where it stopped and a second run (other generator, other k) rescores nothing it has seen.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from coref.corpora.preprocess import entitynlm_mentions, preprocess_documents
from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.io.atomic import write_text_atomic
from coref.io.progress import progress
from coref.resolution.kbest import Partition
from coref.resolution.mentions import MentionDetector
from coref.resolution.ranker import (
    MentionRanker,
    Syntax,
    resolver_syntax,
    with_predicted_mentions,
)
from coref.resolution.rerank import (
    DEFAULT_GRID,
    GENERATORS,
    CandidateList,
    RerankResult,
    base_choice,
    document_candidates,
    format_table,
    format_weight,
    interpolated_choice,
    oracle_choice,
    rerank_experiment,
)
from inference.algorithms.scoring import candidate_log_joint, check_same_mentions, gold_mention_documents, noise_free
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import Checkpoint, entitynlm_checkpoint, entitynlm_modules

CACHE_FORMAT = 1


@dataclass(frozen=True)
class RerankConfig:
    """A reranking experiment: the options of ``python -m inference.rerank``. The ``resolver`` (a model of ``python
    -m coref.resolver train``) makes k-best lists of length ``k`` by ``generator`` (one of
    :data:`coref.resolution.rerank.GENERATORS`, or ``both``) over the gold mentions of ``corpus``, or over the
    ``detector``'s mentions of the raw text; EntityNLM (``checkpoint``, None: the bundled one) scores them
    ``chunk`` candidates per run, cached in the ``cache`` folder (None: no cache); the weight is chosen on
    ``dev_split``, Table 2 reported on ``test_split`` with ``trials`` approximate randomization trials."""

    resolver: str
    corpus: str
    checkpoint: str | None = None
    data_dir: str | None = None
    detector: str | None = None
    k: int = 100
    generator: str = "both"
    dev_split: str = "dev"
    test_split: str = "test"
    cache: str | None = None
    chunk: int = 64
    trials: int = 10_000
    device: str = "auto"
    seed: int = 0


# ---- the score cache ----------------------------------------------------------------------------------------


def file_fingerprint(path: Path) -> str:
    """SHA-256 of a file's bytes: the identity of a checkpoint, whatever its name."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def document_fingerprint(document: Document) -> str:
    """A key for ``document`` that changes when its words or mentions do (a changed preprocessing, corpus)."""
    content = json.dumps([document.id, document.part, document.tokens, [m.span for m in document.mentions]])
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:32]


def partition_fingerprint(partition: Partition) -> str:
    """A key for a partition of mentions ``1..n``: the hash of every mention's cluster number by first mention."""
    cluster = {mention: number for number, members in enumerate(sorted(partition, key=min)) for mention in members}
    labels = ",".join(str(cluster[mention]) for mention in sorted(cluster))
    return hashlib.sha256(labels.encode("ascii")).hexdigest()[:32]


class ScoreCache:
    """EntityNLM log-probabilities by (document, partition) for one checkpoint, kept in a JSON file (or only in
    memory when ``path`` is None). A file made with another checkpoint or format is ignored and replaced."""

    def __init__(self, path: Path | None, checkpoint: str) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self.scores: dict[str, dict[str, float]] = {}
        if path is not None and path.is_file():
            try:
                stored = json.loads(path.read_bytes())
            except ValueError as error:  # not JSON, or not UTF-8
                raise ValueError(f"{path}: not a score cache ({error}); delete it to start a new one") from None
            if not isinstance(stored, dict):
                raise ValueError(f"{path}: not a score cache (not a JSON object); delete it to start a new one")
            if stored.get("format") == CACHE_FORMAT and stored.get("checkpoint") == checkpoint:
                self.scores = stored["scores"]
            else:
                print(f"{path}: made with another checkpoint or format; starting a new cache", file=sys.stderr)

    def get(self, document: str, partition: str) -> float | None:
        return self.scores.get(document, {}).get(partition)

    def put(self, document: str, partition: str, log_prob: float) -> None:
        self.scores.setdefault(document, {})[partition] = log_prob

    def save(self) -> None:
        if self.path is not None:
            payload = {"format": CACHE_FORMAT, "checkpoint": self.checkpoint, "scores": self.scores}
            write_text_atomic(self.path, json.dumps(payload))


# ---- EntityNLM as the reranking language model -----------------------------------------------------------------


class EntityNLMScorer:
    """The :data:`coref.resolution.rerank.LanguageModel` of EntityNLM: cached log p(R, E, L, X) of candidate partitions.

    It is called with the resolver's documents and scores the EntityNLM document of the same key (lowercased,
    numbers replaced, vocabulary applied), after checking the two have the same mentions.
    """

    def __init__(self, checkpoint: Checkpoint, model_documents: Sequence[Document], device: torch.device,
                 chunk: int, cache: ScoreCache) -> None:
        self.checkpoint = checkpoint
        self.model = entitynlm_modules(noise_free(checkpoint), device)[0]
        self.documents = {document.key: document for document in model_documents}
        self.device = device
        self.chunk = chunk
        self.cache = cache
        self.scored = self.reused = 0
        self.seconds = 0.0

    def __call__(self, document: Document, partitions: Sequence[Partition]) -> list[float]:
        if document.key not in self.documents:
            raise ValueError(f"document {document.id!r} part {document.part} is not among EntityNLM's documents")
        model_document = self.documents[document.key]
        check_same_mentions(document, model_document)
        name = document_fingerprint(model_document)
        keys = [partition_fingerprint(partition) for partition in partitions]
        missing = [(key, partition) for key, partition in zip(keys, partitions) if self.cache.get(name, key) is None]
        started = time.perf_counter()
        for start in range(0, len(missing), self.chunk):
            chunk = missing[start : start + self.chunk]
            partitions_chunk = [partition for _, partition in chunk]
            scores = candidate_log_joint(self.model, self.checkpoint, model_document, partitions_chunk, self.device)
            for (key, _), score in zip(chunk, scores):
                self.cache.put(name, key, score)
        if missing:
            self.cache.save()
        self.seconds += time.perf_counter() - started
        self.scored += len(missing)
        self.reused += len(partitions) - len(missing)
        return [self.cache.get(name, key) for key in keys]


# ---- the experiment ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RerankSplit:
    """A split as reranking reads it: the resolver's documents (the mentions it links) with their parses, the
    keys they are scored against, and EntityNLM's documents (the same mentions, the model's preprocessing)."""

    documents: list[Document]
    syntax: list[Syntax | None]
    keys: list[Document]
    model_documents: list[Document]


def gold_mention_split(corpus: str, split: str, data_dir: str | None, checkpoint: Checkpoint) -> RerankSplit:
    """The gold mentions, as the paper reranks: the preprocessed corpus, its own key."""
    pairs = [gold_mention_documents(raw, checkpoint) for raw in load_corpus(corpus, split, data_dir).documents]
    documents = [resolver_document for resolver_document, _ in pairs]
    return RerankSplit(documents, resolver_syntax(corpus, split, data_dir, documents), documents,
                       [model_document for _, model_document in pairs])


def detected_mention_split(corpus: str, split: str, data_dir: str | None, checkpoint: Checkpoint,
                           detector: str) -> RerankSplit:
    """A mention detector's mentions of the raw text, as many as EntityNLM can encode (outermost, not crossing,
    at most its mention length; the singleton filter off, since whether a mention stays single is what the
    candidates decide), without parses; scored against EntityNLM's mentions of the gold, the key of
    :func:`gold_mention_split`."""
    gold = load_corpus(corpus, split, data_dir).documents
    spans = MentionDetector.load(detector).predict(gold)
    encodable = dataclasses.replace(checkpoint.preprocess, drop_singletons=False)
    documents = [entitynlm_mentions(with_predicted_mentions(document.replace(mentions=()), found), encodable)
                 for document, found in zip(gold, spans)]
    model_documents = preprocess_documents(documents, encodable, checkpoint.vocabulary)[0]
    return RerankSplit(documents, [None] * len(documents), [entitynlm_mentions(document) for document in gold],
                       model_documents)


def split_candidates(
    config: RerankConfig, split: str, data: RerankSplit, ranker: MentionRanker, scorer: EntityNLMScorer,
    generators: Sequence[str],
) -> tuple[dict[str, list[CandidateList]], list[dict]]:
    """Every document's candidate list per generator (``config.k`` long), and per-document sizes for the JSON."""
    lists: dict[str, list[CandidateList]] = {generator: [] for generator in generators}
    sizes = []
    for document, parse, key in progress(list(zip(data.documents, data.syntax, data.keys)),
                                         desc=f"{config.corpus}/{split}: k-best lists", unit="document"):
        table = ranker.arc_scores(document, parse)
        candidates = document_candidates(document, table, generators, config.k, scorer, key)
        for generator in generators:
            lists[generator].append(candidates[generator])
        sizes.append({
            "document": document.id, "part": document.part, "mentions": len(document.mentions),
            "list_length": {generator: candidates[generator].list_length for generator in generators},
            "distinct_candidates": {generator: len(candidates[generator].candidates) for generator in generators},
            "scored_candidates": len({c.partition for lst in candidates.values() for c in lst.candidates}),
        })
    return lists, sizes


def per_document_choices(lists: Sequence[CandidateList], weight: float) -> list[dict]:
    """Which candidate each system chose in each document, and its CoNLL F1 there."""
    systems = {"base": base_choice, "entitynlm": partial(interpolated_choice, weight=0.0),
               "interpolated": partial(interpolated_choice, weight=weight), "oracle": oracle_choice}
    rows = []
    for candidates in lists:
        row: dict[str, object] = {"document": candidates.key[0], "part": candidates.key[1]}
        for name, choose in systems.items():
            index = choose(candidates)
            row[name] = {"index": index, "conll_f1": candidates.candidates[index].evaluation.conll_f1}
        rows.append(row)
    return rows


def rerank_corpus(config: RerankConfig) -> tuple[dict, dict[str, RerankResult]]:
    """The experiment: every figure as JSON, and each generator's :class:`RerankResult` for the tables."""
    started = time.perf_counter()
    set_seed(config.seed)
    device = resolve_device(config.device)
    ranker = MentionRanker.load(config.resolver)
    path, checkpoint = entitynlm_checkpoint(config.checkpoint)
    fingerprint = file_fingerprint(path)
    cache_name = f"entitynlm_scores_{config.corpus}_{fingerprint[:12]}.json"
    cache_path = Path(config.cache) / cache_name if config.cache else None
    if config.detector:
        splits = {split: detected_mention_split(config.corpus, split, config.data_dir, checkpoint, config.detector)
                  for split in (config.dev_split, config.test_split)}
    else:
        splits = {split: gold_mention_split(config.corpus, split, config.data_dir, checkpoint)
                  for split in (config.dev_split, config.test_split)}
    model_documents = [document for data in splits.values() for document in data.model_documents]
    scorer = EntityNLMScorer(checkpoint, model_documents, device, config.chunk, ScoreCache(cache_path, fingerprint))
    generators = list(GENERATORS) if config.generator == "both" else [config.generator]
    dev, dev_sizes = split_candidates(config, config.dev_split, splits[config.dev_split], ranker, scorer,
                                      generators)
    test, test_sizes = split_candidates(config, config.test_split, splits[config.test_split], ranker, scorer,
                                        generators)
    experiments = {
        generator: rerank_experiment(dev[generator], test[generator], DEFAULT_GRID, "EntityNLM", config.trials,
                                     config.seed)
        for generator in generators
    }
    figures = {
        generator: {
            **experiment.to_json(),
            "dev_choices": per_document_choices(dev[generator], experiment.weight),
            "test_choices": per_document_choices(test[generator], experiment.weight),
        }
        for generator, experiment in experiments.items()
    }
    result = {
        "corpus": config.corpus, "dev_split": config.dev_split, "test_split": config.test_split, "k": config.k,
        "resolver": str(config.resolver), "detector": config.detector, "checkpoint": str(path),
        "checkpoint_sha256": fingerprint,
        "device": str(device), "trials": config.trials, "seed": config.seed,
        "cache": str(cache_path) if cache_path else None, "generators": figures,
        "documents": {config.dev_split: dev_sizes, config.test_split: test_sizes},
        "entitynlm": {"scored": scorer.scored, "reused": scorer.reused, "seconds": scorer.seconds},
        "seconds": time.perf_counter() - started,
    }
    return result, experiments


def format_result(result: dict, experiments: dict[str, RerankResult]) -> str:
    """Per generator: the chosen weight, the dev grid and Table 2 on test; then what EntityNLM scoring cost."""
    blocks = []
    for generator, experiment in experiments.items():
        grid = ", ".join(f"{format_weight(w)}: {100 * f1:.2f}" for w, f1 in experiment.dev_f1_by_weight.items())
        blocks.append(
            f"{result['corpus']}/{result['test_split']}, {generator} k-best (k={result['k']}); lambda chosen on "
            f"{result['dev_split']}: {format_weight(experiment.weight)} "
            f"(dev CoNLL F1 {100 * experiment.dev_f1_by_weight[experiment.weight]:.2f})\n"
            f"dev CoNLL F1 by lambda: {grid}\n{format_table(experiment.test)}"
        )
    scored = result["entitynlm"]
    blocks.append(
        f"EntityNLM scored {scored['scored']} candidates in {scored['seconds']:.1f} s "
        f"({scored['reused']} more taken from the cache); total {result['seconds']:.1f} s"
    )
    return "\n\n".join(blocks)
