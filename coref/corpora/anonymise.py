"""Anonymised language modelling data (Kobayashi et al. 2017, §4 and Table 1), from a coreference corpus.

The paper turns OntoNotes into a language modelling task in which entities are unknown words: every
coreference chain of a document gets an identifier ``<unk1>``, ``<unk2>``, ... in order of first appearance,
every mention of the chain is replaced by that ONE token, sentences are marked with ``<bos>``/``<eos>``, the
vocabulary is the 10K most frequent words, and only documents with at most 50 chains are used. Here:

- :data:`ANONYMISED_PREPROCESS` prepares a document (:mod:`coref.corpora.preprocess`): lowercase, ``<num>``, outermost
  mentions of any length, no singletons, and punctuation KEPT (the paper's Figure 3 keeps it);
- :func:`anonymise` replaces each mention by its chain's identifier, with a one-token mention labelled K in
  its place, so that EntityNLM's batching (``E`` numbered by first mention) gives exactly K at that token;
  :func:`source_spans` says which original tokens each anonymised token stands for and :func:`restore` puts
  the mention words back;
- :func:`anonymised_corpus` loads a split and drops, and counts, the documents with more than
  :data:`MAX_CHAINS` chains; :func:`anonymised_vocabulary` always holds the 50 identifiers, at fixed ids;
- :func:`table1` gives the paper's Table 1 rows. The sentence marks are the project's ``<s>`` and ``</s>``,
  which :mod:`generative.layers.batch` puts around every sentence, so they are not tokens of the documents here.

Its command is :mod:`inference.commands.anonymise` (``python -m coref.anonymise stats``).
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from coref.corpora.preprocess import SPECIALS, UNK, PreprocessConfig, PreprocessReport, Vocabulary, preprocess_documents
from coref.corpora.registry import Corpus, DataDir, dropped_report, load_corpus
from coref.document import Document, Mention, encoding_problems

MAX_CHAINS = 50  # the paper's "documents with no more than 50 clusters"
ENTITY_TOKENS = tuple(f"<unk{k}>" for k in range(1, MAX_CHAINS + 1))

ANONYMISED_PREPROCESS = PreprocessConfig(
    lowercase=True,
    replace_numbers=True,
    drop_punctuation=False,  # Figure 3 keeps ", . ..."
    outermost_only=True,  # a mention becomes one token, so nested ones cannot survive
    drop_singletons=True,  # OntoNotes has no singletons; LitBank's are dropped to match
    max_mention_length=None,  # any length: every mention becomes one token anyway
)


# ---- one document -------------------------------------------------------------------------------------------


def source_spans(document: Document) -> list[tuple[int, int]]:
    """For each token of ``anonymise(document)``, the span of ``document``'s tokens it stands for: a whole
    mention for an identifier, one token otherwise. This is the alignment that carries per-token results on the
    anonymised text (a model's log-probabilities, say) back to the original words."""
    spans: list[tuple[int, int]] = []
    position = 0
    for mention in document.mentions:
        spans.extend((t, t + 1) for t in range(position, mention.start))
        spans.append(mention.span)
        position = mention.end
    spans.extend((t, t + 1) for t in range(position, len(document.tokens)))
    return spans


def anonymise(document: Document) -> Document:
    """``document`` with each mention replaced by the identifier ``<unkK>`` of its chain, K = 1, 2, ... in order
    of first mention, and a one-token ``Mention(i, i + 1, K)`` there.

    The mentions must not overlap (preprocess with :data:`ANONYMISED_PREPROCESS` first) and there may be at most
    :data:`MAX_CHAINS` chains (the caller drops longer documents, as :func:`anonymised_corpus` does): anything
    else is a ValueError. A sentence keeps its span over the shorter text; should a mention run over a sentence
    end, its token stays in the sentence where it starts, and a sentence left empty is removed.
    """
    problems = encoding_problems(document, max_length=len(document.tokens))  # overlaps only, any length
    if problems:
        raise ValueError(f"document {document.id!r} cannot be anonymised: {'; '.join(problems[:5])}")
    chains = document.entities()
    if len(chains) > MAX_CHAINS:
        raise ValueError(f"document {document.id!r} has {len(chains)} chains, more than the {MAX_CHAINS} identifiers")
    number = {label: k for k, label in enumerate(chains, start=1)}
    starts = [start for start, _ in source_spans(document)]
    tokens = [document.tokens[start] for start in starts]
    mentions = []
    for mention in document.mentions:
        index, k = bisect_left(starts, mention.start), number[mention.entity]
        tokens[index] = ENTITY_TOKENS[k - 1]
        mentions.append(Mention(index, index + 1, k))
    shifted = [(bisect_left(starts, start), bisect_left(starts, end)) for start, end in document.sentences]
    return document.replace(tokens=tokens, sentences=[(s, e) for s, e in shifted if e > s], mentions=mentions)


def restore(anonymised: Document, original: Document) -> Document:
    """``original`` with the words of ``anonymised`` outside its identifiers: the mention words put back.

    ``restore(anonymise(d), d) == d``; after a vocabulary has mapped words of the anonymised text to ``<unk>``,
    those stay ``<unk>``. ``anonymised`` must be the anonymisation of ``original`` (same length and the same
    identifiers at the same places), else ValueError.
    """
    spans = source_spans(original)
    if len(anonymised.tokens) != len(spans) or anonymised.mentions != anonymise(original).mentions:
        raise ValueError(f"document {anonymised.id!r} is not the anonymisation of document {original.id!r}")
    identifiers = {mention.start for mention in anonymised.mentions}
    tokens: list[str] = []
    for index, (token, (start, end)) in enumerate(zip(anonymised.tokens, spans)):
        tokens.extend(original.tokens[start:end] if index in identifiers else [token])
    return original.replace(tokens=tokens)


# ---- a corpus split -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnonymisedSplit:
    """One split of a corpus as anonymised language modelling data, and everything left out on the way.

    ``documents`` are the anonymised documents; ``originals`` the same documents after preprocessing, before
    anonymisation (``restore(documents[i], originals[i])``); ``dropped`` the (id, part, chains) of every
    document left out for having more than :data:`MAX_CHAINS` chains; ``preprocessing`` the report over every
    document read, dropped ones included; ``corpus`` the split as read, with the reader's problems.
    """

    corpus: Corpus
    originals: tuple[Document, ...]
    documents: tuple[Document, ...]
    dropped: tuple[tuple[str, int, int], ...]
    preprocessing: PreprocessReport

    def report(self) -> dict[str, int]:
        """Documents read and dropped, and the size of what is kept."""
        return {
            "documents_read": len(self.corpus.documents),
            "documents_dropped": len(self.dropped),
            "documents": len(self.documents),
            "tokens": sum(len(document.tokens) for document in self.documents),
            "mentions": sum(len(document.mentions) for document in self.documents),
            "chains": sum(len(document.entities()) for document in self.documents),
        }


def anonymised_corpus(corpus: str, split: str, data_dir: DataDir = None) -> AnonymisedSplit:
    """One split of a named corpus (``ontogum``, ``litbank``, ``sample``, or several joined by ``+``) preprocessed
    with :data:`ANONYMISED_PREPROCESS` and anonymised; documents with more than :data:`MAX_CHAINS` chains after
    preprocessing are dropped and listed in ``dropped``."""
    read = load_corpus(corpus, split, data_dir)
    preprocessed, report = preprocess_documents(read.documents, ANONYMISED_PREPROCESS)
    kept = [document for document in preprocessed if len(document.entities()) <= MAX_CHAINS]
    dropped = [(d.id, d.part, len(d.entities())) for d in preprocessed if len(d.entities()) > MAX_CHAINS]
    return AnonymisedSplit(read, tuple(kept), tuple(anonymise(d) for d in kept), tuple(dropped), report)


# ---- vocabulary ---------------------------------------------------------------------------------------------


def anonymised_vocabulary(train_documents: Iterable[Document], max_size: int = 10_000) -> Vocabulary:
    """The specials, then all :data:`ENTITY_TOKENS` (whatever their counts), then the most frequent other words of
    ``train_documents``, ``max_size`` entries in all; words left out count towards ``<unk>``, as in
    :meth:`Vocabulary.build`. The identifiers come first so that their ids are fixed and contiguous whatever
    the corpus (:func:`first_entity_id`)."""
    reserved = len(SPECIALS) + MAX_CHAINS
    if max_size < reserved:
        raise ValueError(f"max_size must leave room for the {len(SPECIALS)} specials and {MAX_CHAINS} identifiers")
    every = Vocabulary.build(train_documents, max_size=sys.maxsize)  # every word with its count, ranked
    count = dict(zip(every.words, every.counts))
    others = [word for word in every.words[len(SPECIALS) :] if word not in ENTITY_TOKENS]
    kept, cut = others[: max_size - reserved], others[max_size - reserved :]
    count[UNK] += sum(count[word] for word in cut)
    words = [*SPECIALS, *ENTITY_TOKENS, *kept]
    return Vocabulary(tuple(words), tuple(count.get(word, 0) for word in words))


def first_entity_id(vocabulary: Vocabulary) -> int:
    """The id of ``<unk1>``; ``<unkK>`` has id ``first_entity_id(vocabulary) + K - 1``. ValueError for a
    vocabulary without the identifiers in order (one not made by :func:`anonymised_vocabulary`)."""
    first = vocabulary.index(ENTITY_TOKENS[0])
    if vocabulary.words[first : first + MAX_CHAINS] != ENTITY_TOKENS:
        raise ValueError(f"{vocabulary!r} does not hold {ENTITY_TOKENS[0]} .. {ENTITY_TOKENS[-1]} with contiguous ids")
    return first


# ---- statistics ---------------------------------------------------------------------------------------------

TABLE1_ROWS = {  # key: the paper's row name
    "documents": "# of documents",
    "sentences": "Avg. # of sentences",
    "entities": "Avg. # of unique entities",
    "entities_more_than_once": "Avg. # of unique entities occurring more than once",
    "occurrences": "Avg. # of occurrences of an entity",
}


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def table1(documents: Sequence[Document]) -> dict[str, float | None]:
    """The paper's Table 1 rows for anonymised documents: the number of documents; per document, the average
    number of sentences, of chains and of chains with more than one mention; and mentions per chain over all the
    chains. Averages of no documents are None."""
    chain_sizes = [Counter(mention.entity for mention in document.mentions) for document in documents]
    chains = sum(len(sizes) for sizes in chain_sizes)
    return {
        "documents": len(documents),
        "sentences": _ratio(sum(len(document.sentences) for document in documents), len(documents)),
        "entities": _ratio(chains, len(documents)),
        "entities_more_than_once": _ratio(sum(n > 1 for s in chain_sizes for n in s.values()), len(documents)),
        "occurrences": _ratio(sum(len(document.mentions) for document in documents), chains),
    }


def split_stats(split: AnonymisedSplit) -> dict:
    """:meth:`AnonymisedSplit.report`, :func:`table1`, and what was dropped: documents, preprocessing, problems."""
    return {
        **split.report(),
        **table1(split.documents),
        "dropped_documents": [{"id": id, "part": part, "chains": chains} for id, part, chains in split.dropped],
        "preprocessing": split.preprocessing.to_dict(),
        "problems": [str(problem) for problem in split.corpus.problems],
    }


def stats_json(name: str, splits: Sequence[AnonymisedSplit]) -> dict:
    """The numbers of ``python -m coref.anonymise stats --json``: the preprocessing, the chain limit and
    :func:`split_stats` of each split."""
    return {
        "corpus": name,
        "preprocess": ANONYMISED_PREPROCESS.to_dict(),
        "max_chains": MAX_CHAINS,
        "splits": {split.corpus.split: split_stats(split) for split in splits},
    }


def format_table(name: str, splits: Sequence[AnonymisedSplit]) -> str:
    """Table 1 with one column per split, after the documents read and dropped and the kept tokens and chains."""
    stats = [split_stats(split) for split in splits]
    rows = {
        "documents read": "documents_read",
        f"dropped (> {MAX_CHAINS} chains)": "documents_dropped",
        **{label: key for key, label in TABLE1_ROWS.items()},
        "tokens": "tokens",
        "chains": "chains",
    }

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:.1f}"

    table = [["split", *(split.corpus.split for split in splits)]]
    table += [[label, *(cell(column[key]) for column in stats)] for label, key in rows.items()]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = [f"corpus {name}, anonymised"]
    lines += ["  ".join([row[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(row[1:], widths[1:]))]) for row in table]
    return "\n".join(lines)


def dropped_lines(split: AnonymisedSplit) -> str:
    """The documents dropped for too many chains, then the reader's problems and what preprocessing changed."""
    lines = []
    if split.dropped:
        where = f"{split.corpus.name}/{split.corpus.split}"
        lines.append(f"{where}: {len(split.dropped)} document(s) with more than {MAX_CHAINS} chains dropped:")
        lines.extend(f"  {id} part {part}: {chains} chains" for id, part, chains in split.dropped)
    lines.append(dropped_report(split.corpus, split.preprocessing))
    return "\n".join(lines)
