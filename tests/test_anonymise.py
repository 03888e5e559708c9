"""Anonymised language modelling data (Kobayashi et al. 2017 §4, Table 1): identifiers, corpus, vocabulary, stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coref.corpora.anonymise import (
    ANONYMISED_PREPROCESS,
    ENTITY_TOKENS,
    MAX_CHAINS,
    anonymise,
    anonymised_corpus,
    anonymised_vocabulary,
    first_entity_id,
    restore,
    source_spans,
    table1,
)
from coref.corpora.preprocess import NUM, SPECIALS, UNK, Vocabulary, apply_vocabulary, preprocess_document
from coref.corpora.registry import CorpusError
from coref.document import Document, Mention, encoding_problems
from coref.io.conll import write_conll
from inference.commands.anonymise import main


def document(text: str, mentions=(), sentences=None, id: str = "doc") -> Document:
    return Document(id, text.split(), sentences, [Mention(*m) for m in mentions])


def prepared(doc: Document) -> Document:
    return anonymise(preprocess_document(doc, ANONYMISED_PREPROCESS)[0])


def spans(doc: Document) -> list[tuple[int, int, int]]:
    return [(m.start, m.end, m.entity) for m in doc.mentions]


def chains_document(chains: int, id: str) -> Document:
    """One sentence naming ``chains`` entities twice each: ``n0 n1 ... n0 n1 ...``."""
    names = [f"n{k}" for k in range(chains)]
    mentions = [(k, k + 1, k) for k in range(chains)] + [(chains + k, chains + k + 1, k) for k in range(chains)]
    return document(" ".join(names * 2), mentions, id=id)


# ---- one document -------------------------------------------------------------------------------------------


def test_identifiers_number_chains_by_first_appearance_not_by_label():
    doc = document("John saw Mary . Mary saw him .", [(0, 1, 7), (2, 3, 3), (4, 5, 3), (6, 7, 7)])
    result = anonymise(doc)
    assert result.tokens == ("<unk1>", "saw", "<unk2>", ".", "<unk2>", "saw", "<unk1>", ".")
    assert spans(result) == [(0, 1, 1), (2, 3, 2), (4, 5, 2), (6, 7, 1)]


def test_a_long_mention_becomes_one_token_and_sentences_follow():
    doc = document("The old man sat . He slept .", [(0, 3, 1), (5, 6, 1)], [(0, 5), (5, 8)])
    result = anonymise(doc)
    assert result.tokens == ("<unk1>", "sat", ".", "<unk1>", "slept", ".")
    assert result.sentences == ((0, 3), (3, 6))
    assert spans(result) == [(0, 1, 1), (3, 4, 1)]
    assert source_spans(doc) == [(0, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]


def test_a_mention_over_a_sentence_end_stays_in_the_sentence_where_it_starts():
    doc = document("a b c d e f g", [(1, 4, 1), (5, 6, 1)], [(0, 3), (3, 7)])
    result = anonymise(doc)
    assert result.tokens == ("a", "<unk1>", "e", "<unk1>", "g")
    assert result.sentences == ((0, 2), (2, 5))
    inside = document("a b c d e", [(0, 4, 1), (4, 5, 1)], [(0, 1), (1, 2), (2, 5)])
    assert anonymise(inside).sentences == ((0, 1), (1, 2))  # the sentences inside the mention are gone


def test_preprocessing_keeps_the_outermost_mention_drops_singletons_keeps_punctuation():
    nested = document(
        "The wife of John met John , and he greeted her .",
        [(0, 4, 1), (3, 4, 2), (5, 6, 2), (8, 9, 2), (10, 11, 1)],
    )
    assert prepared(nested).tokens == (
        "<unk1>", "met", "<unk2>", ",", "and", "<unk2>", "greeted", "<unk1>", "."
    )
    singleton = document("A Dog barked at the cat in 1990 . It ran !", [(0, 2, 1), (4, 6, 2), (9, 10, 1)])
    assert prepared(singleton).tokens == (
        "<unk1>", "barked", "at", "the", "cat", "in", NUM, ".", "<unk1>", "ran", "!"
    )


def test_a_chain_left_with_one_mention_by_nesting_is_dropped_too():
    doc = document("the wife of John saw him and his wife", [(0, 4, 1), (3, 4, 2), (5, 6, 2), (7, 9, 1), (7, 8, 2)])
    assert prepared(doc).tokens == ("<unk1>", "saw", "him", "and", "<unk1>")


def test_overlapping_mentions_and_too_many_chains_are_refused():
    with pytest.raises(ValueError, match="nests with"):
        anonymise(document("a b c", [(0, 2, 1), (1, 2, 2), (2, 3, 1), (0, 1, 2)]))
    assert anonymise(chains_document(MAX_CHAINS, "fifty")).tokens[-1] == ENTITY_TOKENS[-1]
    with pytest.raises(ValueError, match="51 chains"):
        anonymise(chains_document(MAX_CHAINS + 1, "many"))


def test_restore_puts_the_mention_words_back():
    doc = document("The old man sat . He slept .", [(0, 3, 5), (5, 6, 5)], [(0, 5), (5, 8)])
    anonymised = anonymise(doc)
    assert restore(anonymised, doc) == doc
    vocabulary = Vocabulary((*SPECIALS, "<unk1>", "sat", "."), (0, 0, 1, 1, 2, 1, 2))
    unknown, _ = apply_vocabulary(anonymised, vocabulary)
    assert restore(unknown, doc).tokens == ("The", "old", "man", "sat", ".", "He", UNK, ".")
    other = document("The old man sat . He slept .", [(0, 3, 5), (6, 7, 6), (7, 8, 6)], [(0, 5), (5, 8)])
    with pytest.raises(ValueError, match="not the anonymisation"):
        restore(anonymised, other)


@st.composite
def annotated(draw) -> Document:
    """A document with non-overlapping mentions of a few chains, several sentences."""
    size = draw(st.integers(1, 30))
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), max_size=4))) if size > 1 else []
    bounds = [0, *cuts, size]
    mentions, position = [], 0
    while position < size and draw(st.booleans()):
        start = draw(st.integers(position, size - 1))
        end = draw(st.integers(start + 1, min(size, start + 4)))
        mentions.append(Mention(start, end, draw(st.integers(0, 5))))
        position = end
    tokens = [f"w{draw(st.integers(0, 9))}" for _ in range(size)]
    return Document("doc", tokens, list(zip(bounds, bounds[1:])), mentions)


@given(annotated())
def test_anonymise_round_trips_and_leaves_one_identifier_token_per_mention(doc):
    result = anonymise(doc)
    assert restore(result, doc) == doc
    assert len(result.tokens) == len(doc.tokens) - sum(len(m) - 1 for m in doc.mentions)
    assert [result.tokens[m.start] for m in result.mentions] == [ENTITY_TOKENS[m.entity - 1] for m in result.mentions]
    assert [m.entity for m in result.mentions] == [
        doc.entities().index(m.entity) + 1 for m in doc.mentions
    ]
    assert all(len(m) == 1 for m in result.mentions) and encoding_problems(result) == []


def test_batching_gives_entity_k_and_word_id_first_plus_k_minus_1_at_each_identifier():
    from generative.layers.batch import token_stream  # torch: imported only here

    doc = anonymise(document("John saw Mary . Mary saw him .", [(0, 1, 7), (2, 3, 3), (4, 5, 3), (6, 7, 7)]))
    vocabulary = anonymised_vocabulary([doc])
    stream = token_stream(doc, vocabulary)
    first = first_entity_id(vocabulary)
    identifiers = [(word, entity) for word, entity, r in zip(stream.words, stream.E, stream.R) if r]
    assert identifiers == [(first, 1), (first + 1, 2), (first + 1, 2), (first, 1)]


# ---- vocabulary ---------------------------------------------------------------------------------------------


def test_vocabulary_holds_every_identifier_at_fixed_contiguous_ids():
    docs = [anonymise(document("a a a b b c . a <unk1>", [(3, 4, 1), (6, 7, 1)], [(0, 7), (7, 9)]))]
    # tokens: a a a <unk1> b c <unk1> a <unk1>: a 4, <unk1> 3, b 1, c 1; two sentences
    vocabulary = anonymised_vocabulary(docs, max_size=len(SPECIALS) + MAX_CHAINS + 2)
    first = first_entity_id(vocabulary)
    assert first == len(SPECIALS)
    assert all(vocabulary.index(f"<unk{k}>") == first + k - 1 for k in range(1, MAX_CHAINS + 1))
    assert vocabulary.words[first + MAX_CHAINS :] == ("a", "b")  # c is cut: b and c tie, by the word
    counts = dict(zip(vocabulary.words, vocabulary.counts))
    assert (counts["<unk1>"], counts["<unk2>"], counts["a"], counts["b"], counts[UNK]) == (3, 0, 4, 1, 1)
    assert counts["<s>"] == counts["</s>"] == 2
    assert len(anonymised_vocabulary(docs)) == len(SPECIALS) + MAX_CHAINS + 3  # everything fits in 10K
    with pytest.raises(ValueError, match="room"):
        anonymised_vocabulary(docs, max_size=len(SPECIALS) + MAX_CHAINS - 1)
    with pytest.raises(ValueError, match="contiguous"):
        first_entity_id(Vocabulary.build(docs))


# ---- statistics and the corpus loader -----------------------------------------------------------------------


def test_table1_counts_what_the_documents_hold():
    two_sentences = document("a b c d e f", [(0, 1, 1), (1, 2, 1), (2, 3, 2), (3, 4, 2), (4, 5, 2)], [(0, 3), (3, 6)])
    one_mention = document("a b", [(0, 1, 1)])
    assert table1([two_sentences, one_mention]) == {
        "documents": 2, "sentences": 1.5, "entities": 1.5, "entities_more_than_once": 1.0, "occurrences": 2.0
    }
    assert table1([])["sentences"] is None


@pytest.fixture
def tiny_data(tmp_path: Path) -> Path:
    """A LitBank-layout data folder: train holds 51-, 50- and 2-chain documents, dev and test one each."""
    small = document(
        "The old man saw Mary . Mary saw him 3 times .",
        [(0, 3, 1), (4, 5, 2), (6, 7, 2), (8, 9, 1), (9, 11, 3)],
        [(0, 6), (6, 12)],
        id="small",
    )
    dog = "A dog barked . It ran ."
    splits = {
        "train": [chains_document(MAX_CHAINS + 1, "many"), chains_document(MAX_CHAINS, "fifty"), small],
        "dev": [document(dog, [(0, 2, 1), (4, 5, 1)], [(0, 4), (4, 7)], id="dog_dev")],
        "test": [document(dog, [(0, 2, 1), (4, 5, 1)], [(0, 4), (4, 7)], id="dog_test")],
    }
    (tmp_path / "litbank" / "conll").mkdir(parents=True)
    rows = ["document\tsplit"]
    for split, docs in splits.items():
        for doc in docs:
            write_conll([doc], tmp_path / "litbank" / "conll" / f"{doc.id}.conll")
            rows.append(f"{doc.id}\t{split}")
    (tmp_path / "litbank" / "splits.tsv").write_text("\n".join(rows) + "\n")
    return tmp_path


def test_documents_with_more_than_50_chains_are_dropped_and_counted(tiny_data):
    split = anonymised_corpus("litbank", "train", tiny_data)
    assert split.dropped == (("many", 0, MAX_CHAINS + 1),)
    assert [doc.id for doc in split.documents] == ["fifty", "small"]
    assert split.documents[1].tokens == tuple("<unk1> saw <unk2> . <unk2> saw <unk1> <num> times .".split())
    assert [restore(a, o) for a, o in zip(split.documents, split.originals)] == list(split.originals)
    assert split.report() == {
        "documents_read": 3, "documents_dropped": 1, "documents": 2, "tokens": 110, "mentions": 104, "chains": 52
    }
    assert split.preprocessing.documents == 3 and split.preprocessing.singletons_dropped == 1


def test_stats_command_prints_table1_per_split_and_the_dropped_documents(tiny_data, tmp_path, capsys):
    out = tmp_path / "stats.json"
    assert main(["stats", "--corpus", "litbank", "--data-dir", str(tiny_data), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = {line[:52].strip(): line[52:].split() for line in printed.splitlines()[1:9]}
    assert rows == {
        "split": ["train", "dev", "test"],
        "documents read": ["3", "1", "1"],
        "dropped (> 50 chains)": ["1", "0", "0"],
        "# of documents": ["2", "1", "1"],
        "Avg. # of sentences": ["1.5", "2.0", "2.0"],
        "Avg. # of unique entities": ["26.0", "1.0", "1.0"],
        "Avg. # of unique entities occurring more than once": ["26.0", "1.0", "1.0"],
        "Avg. # of occurrences of an entity": ["2.0", "2.0", "2.0"],
    }
    assert "litbank/train: 1 document(s) with more than 50 chains dropped:\n  many part 0: 51 chains" in printed
    result = json.loads(out.read_text())
    assert result["splits"]["train"]["dropped_documents"] == [{"id": "many", "part": 0, "chains": 51}]
    assert result["splits"]["dev"]["tokens"] == 6 and result["preprocess"]["drop_punctuation"] is False


def test_stats_command_bad_input_is_one_line(capsys):
    assert main(["stats", "--corpus", "nope"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown corpus 'nope': choose from sample, litbank,")


def test_the_sample_corpus_needs_no_data_directory():
    split = anonymised_corpus("sample", "dev")
    assert split.report()["documents"] == 2 and not split.dropped
    with pytest.raises(CorpusError, match="unknown split"):
        anonymised_corpus("sample", "test2")


# ---- real corpora: the figures of docs/dntm.md -----------------------------------------------------------

# split: documents read, dropped, avg sentences, avg chains, avg chains mentioned more than once, mentions per
# chain (to 0.05), tokens, chains
REAL = {
    "ontogum": {
        "train": (177, 0, 57.8, 27.2, 27.2, 4.2, 154_949, 4_812),
        "dev": (30, 0, 52.5, 25.6, 25.6, 4.2, 24_559, 767),
        "test": (30, 0, 48.8, 25.3, 25.3, 4.1, 24_536, 759),
        "test2": (26, 0, 51.3, 16.0, 16.0, 4.0, 16_245, 416),
    },
    "litbank": {
        "train": (80, 0, 88.1, 20.3, 20.3, 10.7, 156_609, 1_625),
        "dev": (10, 0, 79.0, 18.6, 18.6, 11.0, 19_751, 186),
        "test": (10, 0, 72.5, 22.6, 22.6, 9.7, 21_157, 226),
    },
}


@pytest.mark.parametrize("corpus", REAL)
def test_table1_of_the_real_corpora(corpus, request):
    data = request.getfixturevalue(f"{corpus}_dir").parent
    for name, expected in REAL[corpus].items():
        split = anonymised_corpus(corpus, name, data)
        report, stats = split.report(), table1(split.documents)
        measured = (
            report["documents_read"], report["documents_dropped"], *(stats[key] for key in
            ("sentences", "entities", "entities_more_than_once", "occurrences")), report["tokens"], report["chains"]
        )
        assert measured == pytest.approx(expected, abs=0.05), name
        assert all(restore(a, o) == o for a, o in zip(split.documents, split.originals))
        if name == "train":
            vocabulary = anonymised_vocabulary(split.documents)
            assert first_entity_id(vocabulary) == len(SPECIALS) and len(vocabulary) <= 10_000
