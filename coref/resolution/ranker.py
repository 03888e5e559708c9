"""The base coreference resolver: cort's mention-ranking model with latent antecedents, over gold mentions.

Martschat & Strube (2015), as digested in reference-notes §2.1. Every mention ``j`` (``1..n`` in
``Document.mentions`` order) ranks all earlier mentions and the dummy :data:`~coref.resolution.kbest.ROOT` ("new
entity"); an arc ``i -> j`` scores the sum of the weights of its hashed categorical features, and the root arc has no
features and scores 0. Decoding is cort's greedy one: every mention takes its best antecedent
(:func:`coref.resolution.kbest.greedy_tree`), and the clusters are the transitive closure, singletons dropped. An
antecedent whose entity already holds a mention crossing this one (overlapping, neither inside the other) is not
a candidate: brackets of one entity pair up like parentheses, so no CoNLL file could write that entity.

Prediction ranks bounded candidates, as coarse-to-fine rankers do (:func:`candidate_antecedents`): the
:data:`ANTECEDENT_WINDOW` (500) mentions just before each mention and, before that window, those of the
:data:`FAR_MATCHES` (5) most recent mentions with its lowercased head word or its lowercased string (dictionary
look-ups). Features are built and scored a chunk of anaphors at a time (:meth:`MentionRanker.best_antecedents`),
so time and memory grow linearly with the text: a 120K-word book resolves in well under a minute and 1 GB. No
LitBank or OntoGUM document has more than 501 mentions, so there every earlier mention is a candidate and the
predictions are exactly the greedy decoding of the full table. :meth:`MentionRanker.arc_scores` is that full
(quadratic) table, which EntityNLM's k-best lists are built from on corpus-length documents; training reads the
full table too.

Documents are the corpus after the paper's preprocessing with case and numbers kept (:func:`resolver_documents`),
so the resolver sees exactly EntityNLM's mentions and token positions. Mention heads and word classes come from
the CoNLL-U parse where a corpus ships one (OntoGUM, :func:`resolver_syntax`) and from heuristics elsewhere.

Learning is cort's latent structured perceptron: for each anaphor the best arc under cost-augmented scores
(cost 2 for a wrong "new entity", 1 for a wrong link, times ``cost_scaling``) is compared with the best arc
consistent with the gold clusters (the best-scoring coreferent antecedent, or the root for an entity's first
mention); when they differ the consistent arc's features gain 1 and the predicted arc's lose 1. Updates are
online, anaphor by anaphor in document order, with documents shuffled each epoch; the weights returned are
the average over all anaphors seen.

A model trained with ``lowercase`` (``train --lowercase``) lowercases every document before reading it, in
training and in prediction alike (its predictions keep the document's own tokens): a resolver for lowercase text
(LAMBADA), which cannot tell names by their capital. Trained on a detector's mentions, it must lowercase exactly
when the detector does (``python -m coref.mentions train --lowercase``), or training refuses.

Trained by :func:`inference.training.resolution.train_ranker`; the command is :mod:`inference.commands.resolver`.
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from functools import cache
from pathlib import Path

import numpy as np
import torch
from scipy import sparse

from coref.corpora.preprocess import (
    PreprocessConfig,
    drop_singletons,
    entitynlm_mentions,
    kept_tokens,
    preprocess_documents,
)
from coref.corpora.registry import corpus_names, load_corpus, resolve_data_dir
from coref.document import Document, Mention, crossing_pairs
from coref.io.checkpoint import Checkpoint, CheckpointError, load
from coref.io.conll import ConllError, read_conllu_words
from coref.io.progress import progress as progress_bar
from coref.metrics.coreference import CorefEvaluation, evaluate
from coref.resolution.kbest import ROOT, clusters, document_with_clusters, tree_from_antecedents

# The paper's preprocessing but with case and numbers kept: the same tokens, spans and mentions as EntityNLM's.
RESOLVER_PREPROCESSING = PreprocessConfig(lowercase=False, replace_numbers=False)

KIND = "mention_ranker"  # its kind of checkpoint (coref.io.checkpoint)
# Bump whenever features or hashing change: old weights would mean something else. Version 2 adds the gender of
# first names, places, the word before a mention and quotation features (:func:`_names_and_speech`) and heads that
# stop at prepositions (:data:`HEAD_STOPS_2`); version 1 models still load and read their own features.
FEATURE_VERSION = 2
FEATURE_VERSIONS = (1, 2)
HASH_BITS = 22  # 4M weights; cort uses 2^24 for far more training data
# Bounded antecedent candidates (candidate_antecedents): the window covers every LitBank / OntoGUM document
# (at most 501 mentions), so those are ranked over all earlier mentions exactly as by the full table.
ANTECEDENT_WINDOW = 500
FAR_MATCHES = 5  # earlier same-head / same-string mentions kept beyond the window
CHUNK_ARCS = 1 << 16  # arcs whose features are built at once in prediction (~60 MB of feature indices)
DataDir = str | os.PathLike | None

# ---- lexicons ---------------------------------------------------------------------------------------------

UNKNOWN = 0  # an unknown person, number or gender agrees with anything
MASCULINE, FEMININE, NEUTER = 1, 2, 3
SINGULAR, PLURAL = 1, 2
FIRST, SECOND, THIRD = 1, 2, 3

# pronoun -> (person, number, gender); archaic forms because LitBank is 19th-century fiction
PRONOUNS: dict[str, tuple[int, int, int]] = {
    **dict.fromkeys(("i", "me", "my", "mine", "myself"), (FIRST, SINGULAR, UNKNOWN)),
    **dict.fromkeys(("we", "us", "our", "ours", "ourselves"), (FIRST, PLURAL, UNKNOWN)),
    **dict.fromkeys(("you", "your", "yours"), (SECOND, UNKNOWN, UNKNOWN)),
    **dict.fromkeys(("yourself", "thou", "thee", "thy", "thine", "thyself"), (SECOND, SINGULAR, UNKNOWN)),
    **dict.fromkeys(("yourselves", "ye"), (SECOND, PLURAL, UNKNOWN)),
    **dict.fromkeys(("he", "him", "his", "himself"), (THIRD, SINGULAR, MASCULINE)),
    **dict.fromkeys(("she", "her", "hers", "herself"), (THIRD, SINGULAR, FEMININE)),
    **dict.fromkeys(("it", "its", "itself"), (THIRD, SINGULAR, NEUTER)),
    **dict.fromkeys(("they", "them", "their", "theirs", "themselves", "themself"), (THIRD, PLURAL, UNKNOWN)),
}
POSSESSIVES = frozenset({"my", "mine", "our", "ours", "your", "yours", "thy", "thine", "his", "hers", "its", "their"})
DEMONSTRATIVES = {"this": SINGULAR, "that": SINGULAR, "these": PLURAL, "those": PLURAL}
INDEFINITES = frozenset({"a", "an", "some", "another", "any", "one", "no", "many", "several", "few"})
MASCULINE_NOUNS = frozenset(
    "mr mr. sir lord king prince duke earl count baron monsieur master father brother son man boy husband uncle "
    "nephew grandfather gentleman fellow lad".split()
)
FEMININE_NOUNS = frozenset(
    "mrs mrs. miss ms ms. lady queen princess duchess countess madame mademoiselle mistress mother sister daughter "
    "woman girl wife aunt niece grandmother widow maid".split()
)
# quotation marks as the corpora tokenise them: opening, closing, and the straight ones that toggle
# (double quotes only: a single one is as often an apostrophe, "talkin'")
OPENING_QUOTES, CLOSING_QUOTES, TOGGLING_QUOTES = frozenset({"“", "``"}), frozenset({"”", "''"}), frozenset({'"'})
HEAD_STOPS = frozenset({"of", "who", "which", "that", ","})  # heuristic head: the word before the first of these
# a name right after one of these is a place (feature version 2)
PLACE_PREPOSITIONS = frozenset({"in", "at", "near", "into", "across", "through", "toward", "towards"})
# and, from feature version 2, the head is also the word before a preposition ("her brother in Paris": brother)
HEAD_STOPS_2 = HEAD_STOPS | frozenset({"in", "at", "on", "from", "with", "to", "by", "for", "into", "near", "whose"})

PRONOUN, PROPER, NOMINAL, DEMONSTRATIVE = range(4)  # mention types, the conjunction classes
TYPE_COUNT = 4


class ResolverModelError(CheckpointError):
    """A file that is not a saved :class:`MentionRanker` (or one this code cannot read); the message names it."""


# ---- syntax -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Syntax:
    """A dependency parse of one document, one entry per token.

    ``head[t]`` is the index of the token ``t`` depends on, ``-1`` for the root of its sentence (or a head that
    preprocessing dropped). ``form`` is kept to check that a parse belongs to the tokens it is used with.
    """

    form: tuple[str, ...]
    upos: tuple[str, ...]
    xpos: tuple[str, ...]
    head: tuple[int, ...]
    deprel: tuple[str, ...]

    def __post_init__(self) -> None:
        sizes = {len(self.form), len(self.upos), len(self.xpos), len(self.head), len(self.deprel)}
        if len(sizes) != 1:
            raise ValueError(f"a parse needs one form, upos, xpos, head and deprel per token, got lengths {sizes}")

    def __len__(self) -> int:
        return len(self.form)

    def restricted(self, kept: Sequence[int]) -> Syntax:
        """The parse of the tokens ``kept`` (old indices, in order), heads renumbered; dropped heads become -1."""
        new_index = {old: new for new, old in enumerate(kept)}
        return Syntax(
            tuple(self.form[t] for t in kept),
            tuple(self.upos[t] for t in kept),
            tuple(self.xpos[t] for t in kept),
            tuple(new_index.get(self.head[t], -1) for t in kept),
            tuple(self.deprel[t] for t in kept),
        )


def read_conllu_syntax(path: str | os.PathLike) -> Syntax:
    """The parse in a CoNLL-U file, sentences concatenated, over its syntactic words: those of
    :func:`coref.io.conll.read_conllu_words`, so token ``t`` here is token ``t`` of the CoNLL file read with that
    CoNLL-U file. HEAD (1-based in its sentence, 0 for the root) becomes a token index, -1 for the root."""
    words = read_conllu_words(str(path))
    sentence_start: dict[int, int] = {}
    for index, word in enumerate(words):
        sentence_start.setdefault(word.sentence, index)
        if len(word.columns) < 8 or not word.columns[6].isdigit():
            raise ConllError(str(path), word.line, "a CoNLL-U word line needs 10 TAB-separated columns and a HEAD")
    heads = [int(word.columns[6]) for word in words]
    return Syntax(
        tuple(word.form for word in words),
        tuple(word.columns[3] for word in words),
        tuple(word.columns[4] for word in words),
        tuple(sentence_start[word.sentence] + head - 1 if head else -1 for word, head in zip(words, heads)),
        tuple(word.columns[7] for word in words),
    )


# ---- documents ----------------------------------------------------------------------------------------------


def resolver_documents(corpus: str, split: str, data_dir: DataDir) -> list[Document]:
    """A corpus split as the resolver sees it: EntityNLM's preprocessing with case and numbers kept.

    Mentions (gold, no singletons, outermost only) and token positions are exactly those of the default
    preprocessing; only the words keep their case and digits, which the features need.
    """
    return preprocess_documents(load_corpus(corpus, split, data_dir).documents, RESOLVER_PREPROCESSING)[0]


def resolver_syntax(corpus: str, split: str, data_dir: DataDir, documents: Sequence[Document]) -> list[Syntax | None]:
    """The parse of each of ``documents`` (from :func:`resolver_documents`), or None where the corpus has none.

    Only OntoGUM ships parses (``DATA/ontogum/conllu/NAME.conllu``); they are aligned to the preprocessed
    tokens with :func:`coref.corpora.preprocess.kept_tokens`, and refused unless the words agree.
    """
    parses: dict[tuple[str, int], Syntax] = {}
    for name in corpus_names(corpus):
        if name == "ontogum":
            folder = resolve_data_dir(data_dir) / "ontogum" / "conllu"
            for raw in load_corpus(name, split, data_dir).documents:
                path = folder / f"{raw.id}.conllu"
                if path.is_file():
                    parses[raw.key] = _aligned_parse(read_conllu_syntax(path), raw, path)
    result = [parses.get(document.key) for document in documents]
    for document, parse in zip(documents, result):
        if parse is not None and parse.form != document.tokens:
            raise ValueError(f"document {document.id!r}: its parse does not match its tokens")
    return result


def _aligned_parse(parse: Syntax, raw: Document, path: Path) -> Syntax:
    if parse.form != raw.tokens:
        raise ValueError(f"{path}: its {len(parse)} words do not match the {len(raw.tokens)} of document {raw.id!r}")
    return parse.restricted(kept_tokens(raw, RESOLVER_PREPROCESSING))


def lowercased(document: Document) -> Document:
    """``document`` with every token lowercased; sentences and mentions unchanged."""
    return document.replace(tokens=[token.lower() for token in document.tokens])


# ---- mentions -----------------------------------------------------------------------------------------------


def mention_heads(document: Document, syntax: Syntax | None = None, version: int = FEATURE_VERSION) -> list[int]:
    """The token index of the head of every mention (``document.mentions`` order).

    With a parse: the token of the span whose head lies outside it (the first, punctuation aside, if several).
    Without: the word before the first "of", "who", "which", "that" or comma after the span's first word (from
    feature ``version`` 2, or preposition: :data:`HEAD_STOPS_2`), else the last word.
    """
    stops = HEAD_STOPS if version == 1 else HEAD_STOPS_2
    return [
        _syntactic_head(mention.start, mention.end, syntax)
        if syntax is not None
        else _heuristic_head(mention.start, mention.end, document.tokens, stops)
        for mention in document.mentions
    ]


def _syntactic_head(start: int, end: int, syntax: Syntax) -> int:
    outside = [t for t in range(start, end) if not start <= syntax.head[t] < end and syntax.deprel[t] != "punct"]
    return outside[0] if outside else end - 1


def _heuristic_head(start: int, end: int, tokens: Sequence[str], stops: frozenset[str]) -> int:
    for t in range(start + 1, end):
        if tokens[t].lower() in stops:
            return t - 1
    return end - 1


def mention_types(document: Document) -> list[int]:
    """The type of every mention (``document.mentions`` order): PRONOUN, DEMONSTRATIVE, PROPER or NOMINAL, as the
    ranker's features read it without a parse (the heuristic head; a name is a capitalised word seen somewhere not
    at a sentence start)."""
    proper = _proper_words(document)
    return [_mention_type(document.tokens[mention.start:mention.end], head - mention.start, None, proper)
            for mention, head in zip(document.mentions, mention_heads(document))]


def _proper_words(document: Document) -> set[str]:
    """Capitalised words seen somewhere not at a sentence start: the heuristic's proper names."""
    starts = {start for start, _ in document.sentences}
    return {
        token
        for t, token in enumerate(document.tokens)
        if t not in starts and token[:1].isupper() and token.lower() not in PRONOUNS
    }


def _mention_type(words: Sequence[str], head: int, tags: tuple[str, str] | None, proper: set[str]) -> int:
    """PRONOUN, DEMONSTRATIVE, PROPER or NOMINAL; ``head`` indexes ``words``, ``tags`` are its (upos, xpos)."""
    head_word = words[head].lower()
    if head_word in PRONOUNS or (tags is not None and tags[1] in ("PRP", "PRP$")):
        return PRONOUN
    if words[0].lower() in DEMONSTRATIVES:
        return DEMONSTRATIVE
    if tags is not None:
        return PROPER if tags[0] == "PROPN" or tags[1] in ("NNP", "NNPS") else NOMINAL
    return PROPER if words[head] in proper else NOMINAL


def _fine_type(words: Sequence[str], head: int, kind: int) -> str:
    """A finer class than the type, as a feature: the pronoun's form class or the nominal's determiner."""
    first, head_word = words[0].lower(), words[head].lower()
    if kind == PRONOUN:
        if head_word.endswith(("self", "selves")):
            return "pronoun:reflexive"
        return "pronoun:possessive" if head_word in POSSESSIVES else "pronoun:personal"
    if kind != NOMINAL:
        return "demonstrative" if kind == DEMONSTRATIVE else "proper"
    if first == "the":
        return "nominal:definite"
    if first in INDEFINITES:
        return "nominal:indefinite"
    return "nominal:possessed" if first in POSSESSIVES or "'s" in words else "nominal:bare"


def _agreement(words: Sequence[str], head: int, kind: int, xpos: str | None) -> tuple[int, int, int]:
    """(person, number, gender) from the lexicons and the head's tag; UNKNOWN where nothing says."""
    lower = [word.lower() for word in words]
    if kind == PRONOUN and lower[head] in PRONOUNS:
        return PRONOUNS[lower[head]]
    number = UNKNOWN
    if "and" in lower[1:-1]:
        number = PLURAL  # a coordination refers to a group
    elif lower[0] in DEMONSTRATIVES:
        number = DEMONSTRATIVES[lower[0]]
    elif xpos is not None and xpos.startswith("NN"):
        number = PLURAL if xpos.endswith("S") else SINGULAR
    gender = UNKNOWN
    for word in (lower[0], lower[head]):
        if word in MASCULINE_NOUNS:
            gender = MASCULINE
        elif word in FEMININE_NOUNS:
            gender = FEMININE
    return UNKNOWN, number, gender


@cache
def _first_names() -> object:
    """gender-guesser's detector over its first-name lexicon (Michael's ``nam_dict``, 40,000 names with their
    usual gender by country), loaded once per process: an offline source, nothing downloaded."""
    import gender_guesser.detector

    return gender_guesser.detector.Detector(case_sensitive=False)


@cache
def _first_name_gender(word: str) -> int:
    found = _first_names().get_gender(word)
    return {"male": MASCULINE, "mostly_male": MASCULINE, "female": FEMININE, "mostly_female": FEMININE}.get(
        found, UNKNOWN)


def name_gender(words: Sequence[str], kind: int, previous: str = "") -> int:
    """The gender a name's first name implies ("Anna Smith": FEMININE); NEUTER for a name just after a preposition
    of place ("in Paris": a place, whatever the lexicon says of Paris as a first name); UNKNOWN for a name the
    lexicon does not know or gives to both, where no capitalised word follows the titles, and for mentions that
    are not names. A name is a proper mention, or a one-word capitalised one (a name seen only at sentence starts
    reads as a common noun)."""
    if kind != PROPER and not (len(words) == 1 and words[0][:1].isupper() and words[0].lower() not in PRONOUNS):
        return UNKNOWN
    if previous.lower() in PLACE_PREPOSITIONS:
        return NEUTER
    for word in words:
        if word[:1].isupper() and word.lower() not in MASCULINE_NOUNS | FEMININE_NOUNS:
            return _first_name_gender(word)
    return UNKNOWN


def quotations(tokens: Sequence[str]) -> np.ndarray:
    """The quotation every token lies in, numbered from 1 in order of opening (0 outside): an opening mark starts
    one, a closing mark ends it, a straight double quote does whichever is due. The marks belong to their
    quotation."""
    inside = np.zeros(len(tokens), dtype=np.int64)
    current = opened = 0
    for t, token in enumerate(tokens):
        if token in OPENING_QUOTES or (token in TOGGLING_QUOTES and not current):
            opened += 1
            current = opened
            inside[t] = current
        elif token in CLOSING_QUOTES or (token in TOGGLING_QUOTES and current):
            inside[t], current = current, 0
        else:
            inside[t] = current
    return inside


def _code(text: str) -> int:
    """A stable 32-bit code of a string (CRC-32), the same in every process, unlike ``hash``."""
    return zlib.crc32(text.encode("utf-8"))


@dataclass(frozen=True)
class _Mentions:
    """Per-mention attributes of one document as arrays over its mentions (index ``j - 1`` for mention ``j``).

    ``*_code`` arrays hold stable string codes; ``words`` says which lowercased word types (columns, numbered
    per document) each mention contains (sparse, 1 where it does), and ``head_word`` / ``text`` are word and
    whole-string ids.
    """

    kind: np.ndarray
    fine_code: np.ndarray
    head_code: np.ndarray
    first_code: np.ndarray
    deprel_code: np.ndarray
    length: np.ndarray
    person: np.ndarray
    number: np.ndarray
    gender: np.ndarray
    sentence: np.ndarray
    start: np.ndarray
    end: np.ndarray
    text: np.ndarray
    head_word: np.ndarray
    name_gender: np.ndarray
    quotation: np.ndarray
    previous_code: np.ndarray
    words: sparse.csr_matrix

    def __len__(self) -> int:
        return len(self.kind)


def describe_mentions(document: Document, syntax: Syntax | None = None, version: int = FEATURE_VERSION) -> _Mentions:
    """The attributes the features (of ``version``) read, for every mention of ``document``."""
    if syntax is not None and syntax.form != document.tokens:
        raise ValueError(f"document {document.id!r}: the parse given does not match its tokens")
    proper = _proper_words(document)
    sentence_of = document.sentence_of()
    quotation = quotations(document.tokens)
    word_ids: dict[str, int] = {}  # lowercased word -> column of ``words``
    texts: dict[str, int] = {}  # lowercased mention string -> id
    rows, word_lists = [], []
    for mention, head in zip(document.mentions, mention_heads(document, syntax, version)):
        words = document.tokens[mention.start : mention.end]
        lower = [word.lower() for word in words]
        local = head - mention.start
        tags = (syntax.upos[head], syntax.xpos[head]) if syntax is not None else None
        kind = _mention_type(words, local, tags, proper)
        rows.append(
            (  # in the field order of _Mentions
                kind,
                _code(_fine_type(words, local, kind)),
                _code(lower[local]),
                _code(lower[0]),
                _code(syntax.deprel[head] if syntax is not None else ""),
                min(len(words), 5),
                *_agreement(words, local, kind, tags[1] if tags else None),
                sentence_of[mention.start],
                mention.start,
                mention.end,
                texts.setdefault(" ".join(lower), len(texts)),
                word_ids.setdefault(lower[local], len(word_ids)),
                name_gender(words, kind, document.tokens[mention.start - 1] if mention.start else ""),
                int(quotation[int(mention.start)]),
                _code(document.tokens[mention.start - 1].lower() if mention.start else ""),
            )
        )
        word_lists.append([word_ids.setdefault(word, len(word_ids)) for word in lower])
    table = np.array(rows, dtype=np.int64).reshape(len(rows), len(fields(_Mentions)) - 1)
    return _Mentions(*table.T, words=_word_matrix(word_lists, len(word_ids)))


def _word_matrix(word_lists: Sequence[Sequence[int]], types: int) -> sparse.csr_matrix:
    """The sparse 0/1 matrix of which word types (columns) each mention (row) contains: a mention has a few
    words, so the matrix is linear in the document's length where a dense one would be mentions x types."""
    columns = [sorted(set(word_list)) for word_list in word_lists]
    indptr = np.cumsum([0, *(len(c) for c in columns)])
    indices = np.fromiter(itertools.chain.from_iterable(columns), dtype=np.int64, count=int(indptr[-1]))
    return sparse.csr_matrix((np.ones(len(indices), dtype=np.int32), indices, indptr),
                             shape=(len(columns), max(types, 1)))


# ---- features -----------------------------------------------------------------------------------------------


def _mix(a: np.ndarray, b: np.ndarray | int) -> np.ndarray:
    """A stable 64-bit hash of two codes (the splitmix64 finaliser of ``a * golden ^ b``), elementwise."""
    x = np.asarray(a, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ np.asarray(b, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _feature(template: str, values: np.ndarray) -> np.ndarray:
    """The codes of one categorical feature: its template's name hashed with each (integer or code) value."""
    return _mix(np.full(len(values), _code(template), dtype=np.uint64), values.astype(np.uint64))


def _buckets(values: np.ndarray) -> np.ndarray:
    """0, 1, 2, 3, 4, then one bucket per power of two: 5-7, 8-15, 16-31, ... (negative values count as 0)."""
    values = np.maximum(values, 0)
    return np.where(values < 5, values, np.floor(np.log2(np.maximum(values, 1))).astype(np.int64) + 3)


def _mention_features(mentions: _Mentions, index: np.ndarray, role: str) -> list[np.ndarray]:
    """The features of one side of every arc (``role`` "anaphor" or "antecedent"), ``index`` its mentions."""
    return [
        _feature(f"{role}.type", mentions.kind[index]),
        _feature(f"{role}.fine", mentions.fine_code[index]),
        _feature(f"{role}.head", mentions.head_code[index]),
        _feature(f"{role}.first", mentions.first_code[index]),
        _feature(f"{role}.deprel", mentions.deprel_code[index]),
        _feature(f"{role}.length", mentions.length[index]),
        _feature(f"{role}.number", mentions.number[index]),
        _feature(f"{role}.gender", mentions.gender[index]),
    ]


def _compatible(attribute: np.ndarray, ana: np.ndarray, ante: np.ndarray) -> np.ndarray:
    a, b = attribute[ana], attribute[ante]
    return (a == b) | (a == UNKNOWN) | (b == UNKNOWN)


def _has_word(words: sparse.csr_matrix, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Whether mention ``rows[k]`` contains word type ``columns[k]``, elementwise."""
    if len(rows) == 0:  # scipy's fancy indexing returns a matrix, not an empty array, here
        return np.zeros(0, dtype=bool)
    return np.asarray(words[rows, columns]).ravel() > 0


def _pair_features(mentions: _Mentions, ana: np.ndarray, ante: np.ndarray) -> list[np.ndarray]:
    """The features of the anaphor-antecedent pair of every arc."""
    words = mentions.words
    sizes = np.diff(words.indptr)  # word types per mention
    shared = np.asarray(words[ana].multiply(words[ante]).sum(axis=1)).ravel()  # word types the pair shares
    head_contained = _has_word(words, ante, mentions.head_word[ana]) | _has_word(words, ana, mentions.head_word[ante])
    agreement = (
        _compatible(mentions.person, ana, ante) * 4
        + _compatible(mentions.number, ana, ante) * 2
        + _compatible(mentions.gender, ana, ante)
    )
    both_pronouns = (mentions.kind[ana] == PRONOUN) & (mentions.kind[ante] == PRONOUN)
    head_pair = _mix(mentions.head_code[ana], mentions.head_code[ante])
    return [
        _feature("bias", np.zeros(len(ana), dtype=np.int64)),
        _feature("exact_match", mentions.text[ana] == mentions.text[ante]),
        _feature("head_match", mentions.head_word[ana] == mentions.head_word[ante]),
        _feature("head_contained", head_contained),
        _feature("tokens_contained", (shared == sizes[ana]) | (shared == sizes[ante])),
        _feature("sentence_distance", np.minimum(mentions.sentence[ana] - mentions.sentence[ante], 5)),
        _feature("mention_distance", _buckets(ana - ante)),
        _feature("token_distance", _buckets(mentions.start[ana] - mentions.end[ante])),
        _feature("agreement", agreement),
        _feature("pronoun_pair", np.where(both_pronouns, head_pair, np.uint64(0))),
        _feature("head_pair", head_pair),
    ]


def _names_and_speech(mentions: _Mentions, ana: np.ndarray, ante: np.ndarray) -> list[np.ndarray]:
    """Version 2's features: the gender of first names (gender-guesser's lexicon) where the nouns and pronouns
    say nothing, the word before each mention ("in Paris" is seldom a person), and where the two mentions stand
    to quotations, with their grammatical persons (an "I" inside a quotation is not the narrator's)."""
    gender = np.where(mentions.gender == UNKNOWN, mentions.name_gender, mentions.gender)
    a, b = gender[ana], gender[ante]
    gender_agreement = np.where((a == UNKNOWN) | (b == UNKNOWN), 1, np.where(a == b, 2, 0))
    quoted_a, quoted_b = mentions.quotation[ana] > 0, mentions.quotation[ante] > 0
    same_quotation = quoted_a & (mentions.quotation[ana] == mentions.quotation[ante])
    quotation = quoted_a + 2 * quoted_b + 4 * same_quotation
    persons = 4 * mentions.person[ana] + mentions.person[ante]
    return [
        _feature("anaphor.name_gender", mentions.name_gender[ana]),
        _feature("antecedent.name_gender", mentions.name_gender[ante]),
        _feature("anaphor.previous", mentions.previous_code[ana]),
        _feature("antecedent.previous", mentions.previous_code[ante]),
        _feature("gender_with_names", gender_agreement),
        _feature("quotation", quotation),
        _feature("quotation_persons", _mix(quotation, persons)),
    ]


def pair_features(mentions: _Mentions, ana: np.ndarray, ante: np.ndarray, version: int = FEATURE_VERSION
                  ) -> np.ndarray:
    """The hashed feature indices of the arcs ``ante[k] -> ana[k]`` (0-based indices into ``mentions``), one
    row per arc: the one feature function, for the full table and for bounded candidate lists alike.

    Every feature appears plain and conjoined with the anaphor's type, the antecedent's type and their pair, as
    in cort. The root arc has no features. Memory is linear in the number of arcs. ``version`` is the model's
    (:data:`FEATURE_VERSIONS`): version 1 has no :func:`_names_and_speech`.
    """
    base = np.stack(
        [
            *_mention_features(mentions, ana, "anaphor"),
            *_mention_features(mentions, ante, "antecedent"),
            *_pair_features(mentions, ana, ante),
            *(_names_and_speech(mentions, ana, ante) if version >= 2 else []),
        ],
        axis=1,
    )
    ana_kind, ante_kind = mentions.kind[ana], mentions.kind[ante]
    # distinct class numbers for "anaphor type", "antecedent type" and "type pair", each mixed into every feature
    conjunctions = [1 + ana_kind, 1 + TYPE_COUNT + ante_kind, 1 + TYPE_COUNT * (2 + ana_kind) + ante_kind]
    codes = np.concatenate([base, *(_mix(base, classes[:, None]) for classes in conjunctions)], axis=1)
    return (codes & np.uint64((1 << HASH_BITS) - 1)).astype(np.intp)


def arc_features(document: Document, syntax: Syntax | None = None, version: int = FEATURE_VERSION) -> np.ndarray:
    """:func:`pair_features` of every real arc ``i -> j`` (``1 <= i < j``): the full table, quadratic in the
    number of mentions (training and :meth:`MentionRanker.arc_scores`, on corpus-length documents).

    Rows run anaphor by anaphor, antecedents in document order (``np.tril_indices(n, -1)``), so the arcs of
    mention ``j`` are rows ``(j-1)(j-2)/2`` to ``j(j-1)/2 - 1``.
    """
    return _all_arcs(describe_mentions(document, syntax, version), version)


def _read_mentions(document: Document, syntax: Syntax | None, lowercase: bool, version: int = FEATURE_VERSION
                   ) -> _Mentions:
    """:func:`describe_mentions` of the document as a model reads it: with ``lowercase``, its tokens (and its
    parse's words) lowercased first."""
    if lowercase:
        document = lowercased(document)
        syntax = None if syntax is None else replace(syntax, form=tuple(word.lower() for word in syntax.form))
    return describe_mentions(document, syntax, version)


def _all_arcs(mentions: _Mentions, version: int) -> np.ndarray:
    """:func:`pair_features` of every real arc, in :func:`arc_features`'s row order."""
    return pair_features(mentions, *np.tril_indices(len(mentions), -1), version)


def _read_features(document: Document, syntax: Syntax | None, lowercase: bool, version: int = FEATURE_VERSION
                   ) -> np.ndarray:
    """:func:`arc_features` of the document as a model reads it (see :func:`_read_mentions`)."""
    return _all_arcs(_read_mentions(document, syntax, lowercase, version), version)


def _arcs_of(features: np.ndarray, j: int) -> np.ndarray:
    """The feature rows of the arcs ``1 -> j`` .. ``j-1 -> j`` (see :func:`arc_features`)."""
    first = (j - 1) * (j - 2) // 2
    return features[first : first + j - 1]


# ---- bounded antecedent candidates (long documents) ------------------------------------------------------------


@dataclass(frozen=True)
class Candidates:
    """Each mention's antecedent candidates, 0-based, in document order: those of mention ``j`` (0-based) are
    ``antecedents[offsets[j] : offsets[j + 1]]``. The root is a candidate of every mention and not listed."""

    offsets: np.ndarray
    antecedents: np.ndarray

    def anaphors(self, first: int, stop: int) -> np.ndarray:
        """The anaphor of every listed arc of mentions ``first .. stop - 1``, aligned with their antecedents."""
        return np.repeat(np.arange(first, stop), np.diff(self.offsets[first : stop + 1]))


def candidate_antecedents(
    mentions: _Mentions, window: int = ANTECEDENT_WINDOW, matches: int = FAR_MATCHES
) -> Candidates:
    """The bounded candidate lists (coarse-to-fine, as in Lee et al. 2018): the ``window`` mentions just before
    each mention, plus, before that window, the ``matches`` most recent mentions with the same lowercased head
    word and the ``matches`` most recent with the same lowercased string (dictionary look-ups, nothing of size
    mentions x mentions). At most ``window + 2 * matches`` candidates per mention; a document of at most
    ``window + 1`` mentions gets every earlier mention, exactly the full table's arcs.
    """
    recent: dict[tuple[str, int], deque[int]] = {}
    lists: list[np.ndarray] = []
    for j in range(len(mentions)):
        first = max(0, j - window)
        keys = (("head", int(mentions.head_word[j])), ("text", int(mentions.text[j])))
        far = sorted({i for key in keys for i in recent.get(key, ()) if i < first})
        lists.append(np.concatenate([np.array(far, dtype=np.intp), np.arange(first, j, dtype=np.intp)]))
        for key in keys:
            recent.setdefault(key, deque(maxlen=matches)).append(j)
    offsets = np.cumsum([0, *(len(candidates) for candidates in lists)], dtype=np.intp)
    return Candidates(offsets, np.concatenate(lists) if lists else np.zeros(0, dtype=np.intp))


def _anaphor_chunks(offsets: np.ndarray, arcs: int) -> list[tuple[int, int]]:
    """Consecutive ranges ``(first, stop)`` of anaphors whose candidate arcs number at most ``arcs`` (or one
    anaphor, if it alone has more): the features of one range are built at a time, bounding memory."""
    chunks, first, n = [], 0, len(offsets) - 1
    while first < n:
        stop = int(np.searchsorted(offsets, offsets[first] + arcs, side="right")) - 1
        stop = min(max(stop, first + 1), n)
        chunks.append((first, stop))
        first = stop
    return chunks


def best_candidate(scores: np.ndarray) -> int:
    """The index of the best candidate (0 is the root), ties to the closest antecedent, the root last (cort)."""
    return len(scores) - 1 - int(np.argmax(scores[::-1]))


# ---- learning -----------------------------------------------------------------------------------------------


class _AveragedPerceptron:
    """cort's latent structured perceptron with cost-augmented decoding, averaged by the running-sum trick.

    ``totals`` accumulates every update times the step at which it happened, so that the average of the
    weights over all steps is ``weights - totals / step`` without storing a copy per step.
    """

    def __init__(self, size: int, cost_scaling: float) -> None:
        self.weights = np.zeros(size)
        self.totals = np.zeros(size)
        self.step = 1
        self.cost_scaling = cost_scaling

    def learn_document(self, features: np.ndarray, entities: np.ndarray) -> None:
        """One online update per anaphor of a document, in document order; ``entities`` are its gold labels."""
        for j in range(1, len(entities) + 1):
            self.learn_anaphor(_arcs_of(features, j), entities[: j - 1] == entities[j - 1])

    def learn_anaphor(self, arcs: np.ndarray, coreferent: np.ndarray) -> None:
        """Update on one anaphor; ``arcs`` are its real arcs' feature rows, ``coreferent`` marks gold antecedents."""
        scores = np.concatenate([[0.0], self.weights[arcs].sum(axis=1)])
        consistent = np.concatenate([[not coreferent.any()], coreferent])
        cost = np.where(consistent, 0.0, 1.0)
        cost[ROOT] = 0.0 if consistent[ROOT] else 2.0
        predicted = best_candidate(scores + self.cost_scaling * cost)
        target = best_candidate(np.where(consistent, scores, -np.inf))
        if predicted != target:
            self._add(arcs, target, 1.0)
            self._add(arcs, predicted, -1.0)
        self.step += 1

    def _add(self, arcs: np.ndarray, antecedent: int, delta: float) -> None:
        if antecedent != ROOT:
            np.add.at(self.weights, arcs[antecedent - 1], delta)
            np.add.at(self.totals, arcs[antecedent - 1], delta * self.step)

    def averaged(self) -> np.ndarray:
        return (self.weights - self.totals / self.step).astype(np.float32)


# ---- the model ----------------------------------------------------------------------------------------------


class MentionRanker:
    """A trained mention-ranking resolver: averaged weights over hashed features, and how they were trained."""

    def __init__(self, weights: np.ndarray, settings: dict[str, object] | None = None,
                 feature_version: int = FEATURE_VERSION) -> None:
        weights = np.asarray(weights, dtype=np.float32)
        if weights.shape != (1 << HASH_BITS,):
            raise ValueError(f"expected {1 << HASH_BITS} weights, got an array of shape {weights.shape}")
        if feature_version not in FEATURE_VERSIONS:
            raise ValueError(f"feature version {feature_version} is not one of {FEATURE_VERSIONS}")
        self.weights = weights
        self.settings = dict(settings or {})
        self.feature_version = feature_version

    def arc_scores(self, document: Document, syntax: Syntax | None = None) -> np.ndarray:
        """The ``(n+1, n+1)`` score table of :mod:`coref.resolution.kbest`: ``[j, i]`` scores arc ``i -> j`` for
        ``i < j``.

        The root column scores 0.0 and entries with ``i >= j`` are ``-inf``; no cost term (prediction time).
        """
        n = len(document.mentions)
        table = np.full((n + 1, n + 1), -np.inf)
        table[1:, ROOT] = 0.0
        ana, ante = np.tril_indices(n, -1)
        features = _read_features(document, syntax, self.lowercase, self.feature_version)
        table[ana + 1, ante + 1] = self.weights[features].sum(axis=1, dtype=np.float64)
        return table

    @property
    def lowercase(self) -> bool:
        """Whether the model reads every document lowercased (trained so; models saved before the setting
        existed did not)."""
        return bool(self.settings.get("lowercase", False))

    @property
    def mention_threshold(self) -> float | None:
        """The detector probability from which a span is a mention for this ranker (trained with ``train
        --mention-threshold``); None: the detector's own, tuned for mention F1."""
        value = self.settings.get("mention_threshold")
        return None if value is None else float(value)

    @property
    def singleton_threshold(self) -> float | None:
        """The detector probability a mention needs to stand alone (``train --singleton-threshold``): a singleton
        below it is dropped, while a mention linked to others is kept down to :attr:`mention_threshold`."""
        value = self.settings.get("singleton_threshold")
        return None if value is None else float(value)

    @property
    def keeps_singletons(self) -> bool:
        """Whether predictions keep single-mention entities: a model trained on predicted mentions of a corpus
        that annotates singletons (LitBank) writes them, as that corpus's key holds them; otherwise cort's
        convention, none."""
        return bool(self.settings.get("keep_singletons", False))

    def candidate_scores(self, document: Document, syntax: Syntax | None = None, *, window: int = ANTECEDENT_WINDOW,
                         matches: int = FAR_MATCHES, progress: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each mention's bounded candidates (:func:`candidate_antecedents`, 0-based mention indices) and their arc
        scores, in document order; the root (score 0.0) is not listed.

        Features are built and scored a chunk of anaphors at a time, so memory is linear in the number of
        mentions; the progress bar (on a terminal only) is drawn for documents longer than the window.
        """
        mentions = _read_mentions(document, syntax, self.lowercase, self.feature_version)
        candidates = candidate_antecedents(mentions, window, matches)
        with progress_bar(total=len(mentions), desc="resolver: ranking antecedents", unit="mention",
                          enabled=progress and len(mentions) > window + 1, leave=False) as bar:
            for first, stop in _anaphor_chunks(candidates.offsets, CHUNK_ARCS):
                base = candidates.offsets[first]
                antecedents = candidates.antecedents[base : candidates.offsets[stop]]
                features = pair_features(mentions, candidates.anaphors(first, stop), antecedents,
                                         self.feature_version)
                scores = self.weights[features].sum(axis=1, dtype=np.float64)
                for j in range(first, stop):
                    a, b = candidates.offsets[j] - base, candidates.offsets[j + 1] - base
                    yield antecedents[a:b], scores[a:b]
                bar.update(stop - first)

    def best_antecedents(self, document: Document, syntax: Syntax | None = None, *, window: int = ANTECEDENT_WINDOW,
                         matches: int = FAR_MATCHES, progress: bool = True) -> list[int]:
        """cort's greedy decoding over bounded candidates (:meth:`candidate_scores`): the best antecedent of every
        mention ``j`` (entry ``j - 1``; :data:`~coref.resolution.kbest.ROOT` for a new entity), ties to the
        closest, the root last. A mention never joins an entity that holds a mention crossing it (those arcs are
        impossible), so no predicted entity has crossing mentions, which no CoNLL file could write. On a document
        of at most ``window + 1`` mentions, none crossing, this is exactly :func:`coref.resolution.kbest.greedy_tree`
        of :meth:`arc_scores`."""
        crossed: dict[int, list[int]] = {}  # each mention's earlier mentions that cross it
        for i, k in crossing_pairs(document.mentions):
            crossed.setdefault(k, []).append(i)
        entity = np.zeros(len(document.mentions), dtype=np.intp)  # each decided mention's first mention
        best: list[int] = []
        for j, (antecedents, scores) in enumerate(self.candidate_scores(document, syntax, window=window,
                                                                        matches=matches, progress=progress)):
            if j in crossed:  # no entity may hold two crossing mentions: CoNLL brackets cannot pair them up
                scores = np.where(np.isin(entity[antecedents], entity[crossed[j]]), -np.inf, scores)
            choice = best_candidate(np.concatenate([[0.0], scores]))
            best.append(ROOT if choice == ROOT else int(antecedents[choice - 1]) + 1)
            entity[j] = j if choice == ROOT else entity[antecedents[choice - 1]]
        return best

    def predict(self, document: Document, syntax: Syntax | None = None) -> Document:
        """``document`` with the clusters of the greedy antecedent tree (:meth:`best_antecedents`), singletons
        removed unless :attr:`keeps_singletons`."""
        partition = clusters(tree_from_antecedents(self.best_antecedents(document, syntax)))
        clustered = document_with_clusters(document, partition)
        return clustered if self.keeps_singletons else clustered.replace(mentions=drop_singletons(clustered.mentions))

    def checkpoint(self) -> Checkpoint:
        """The model as a :class:`~coref.io.checkpoint.Checkpoint`: its nonzero weights (indices and values, as
        tensors), the feature version and hash size as its config, its settings as the training record."""
        nonzero = np.flatnonzero(self.weights)
        weights = {"indices": torch.from_numpy(nonzero.astype(np.int32)), "values": torch.from_numpy(
            self.weights[nonzero])}
        return Checkpoint(KIND, {"feature_version": self.feature_version, "hash_bits": HASH_BITS}, {}, weights,
                          dict(self.settings))

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, path: str | os.PathLike) -> MentionRanker:
        """The model a checkpoint holds; a :class:`ResolverModelError` naming ``path`` if its features are not
        this code's."""
        version, bits = checkpoint.config.get("feature_version"), checkpoint.config.get("hash_bits")
        if version not in FEATURE_VERSIONS or bits != HASH_BITS:
            raise ResolverModelError(
                f"{path}: features version {version} with 2^{bits} weights, but this code reads versions "
                f"{', '.join(map(str, FEATURE_VERSIONS))} with 2^{HASH_BITS}: retrain the model"
            )
        try:
            weights = np.zeros(1 << HASH_BITS, dtype=np.float32)
            weights[checkpoint.weights["indices"].long().numpy()] = checkpoint.weights["values"].numpy()
        except (KeyError, IndexError, ValueError) as error:
            raise ResolverModelError(f"{path}: incomplete resolver model ({type(error).__name__}: {error})"
                                     ) from error
        return cls(weights, checkpoint.training, version)

    def save(self, path: str | os.PathLike) -> None:
        """Write the model atomically (:meth:`checkpoint`)."""
        self.checkpoint().save(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> MentionRanker:
        """Read a model :meth:`save` wrote (or an earlier version's ``.npz``); anything else is a
        :class:`ResolverModelError` naming the file."""
        return cls.from_checkpoint(load(path, "resolver model", {KIND}, ResolverModelError), path)


def per_document(documents: Sequence[Document], syntax: Sequence[Syntax | None] | None) -> list[Syntax | None]:
    if syntax is None:
        return [None] * len(documents)
    if len(syntax) != len(documents):
        raise ValueError(f"{len(documents)} documents but {len(syntax)} parses (use None for a missing one)")
    return list(syntax)


def evaluate_resolver(
    model: MentionRanker, documents: Sequence[Document], syntax: Sequence[Syntax | None] | None = None
) -> tuple[list[Document], CorefEvaluation]:
    """The model's predictions for ``documents`` and their scores against the documents' own (gold) clusters."""
    parses = per_document(documents, syntax)
    predictions = [model.predict(document, parse) for document, parse in zip(documents, parses)]
    return predictions, evaluate(documents, predictions)


# ---- predicted mentions ---------------------------------------------------------------------------------------


def with_predicted_mentions(gold: Document, spans: Sequence[tuple[int, int]]) -> Document:
    """``gold``'s text with the predicted mention ``spans``, each in the entity of the gold mention of the same
    span (the first, where the key repeats a span), a spurious one in an entity of its own: the clusters a
    resolver should find among predicted mentions, and what it learns from."""
    entity: dict[tuple[int, int], int] = {}
    for mention in gold.mentions:
        entity.setdefault(mention.span, mention.entity)
    fresh = itertools.count(max((mention.entity for mention in gold.mentions), default=0) + 1)
    return gold.replace(mentions=[Mention(start, end, entity[start, end] if (start, end) in entity else next(fresh))
                                  for start, end in spans])


def end_to_end_evaluations(gold: Sequence[Document], predictions: Sequence[Document]) -> dict[str, CorefEvaluation]:
    """Scores of clusters over predicted mentions against the two keys: the gold as annotated, and EntityNLM's
    mentions of it (outermost, no singletons; the response filtered alike), the key of the gold-mention figures."""
    return {"as_annotated": evaluate(gold, predictions),
            "entitynlm_mentions": evaluate([entitynlm_mentions(document) for document in gold],
                                           [entitynlm_mentions(document) for document in predictions])}


def unsure_singletons_dropped(document: Document, probabilities: dict[tuple[int, int], float],
                              threshold: float | None) -> Document:
    """``document`` without the single-mention entities whose detector probability (``probabilities``, by span)
    is below ``threshold`` (None: all kept): a mention needs more confidence to stand alone than to join others."""
    if threshold is None:
        return document
    sizes = Counter(mention.entity for mention in document.mentions)
    kept = [mention for mention in document.mentions
            if sizes[mention.entity] > 1 or probabilities.get(mention.span, 1.0) >= threshold]
    numbers: dict[int, int] = {}  # entities renumbered 1..K by first mention, as everywhere
    for mention in sorted(kept):
        numbers.setdefault(mention.entity, len(numbers) + 1)
    return document.replace(mentions=[Mention(m.start, m.end, numbers[m.entity]) for m in kept])
