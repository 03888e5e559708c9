"""The paper's preprocessing (Ji et al. 2017 §4), step by step and switch by switch, and the vocabulary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from coref.corpora.preprocess import (
    NUM,
    SPECIALS,
    UNK,
    PreprocessConfig,
    PreprocessError,
    PreprocessReport,
    Vocabulary,
    apply_vocabulary,
    is_number,
    is_punctuation,
    preprocess_document,
    preprocess_documents,
)
from coref.document import Document, Mention, decode_entities, encode_entities, encoding_problems
from coref.io.conll import read_conll

KEEP_ALL = PreprocessConfig(
    lowercase=False,
    drop_punctuation=False,
    replace_numbers=False,
    outermost_only=False,
    drop_singletons=False,
    max_mention_length=None,
)


def only(**switches) -> PreprocessConfig:
    """A config that runs only the named steps."""
    return PreprocessConfig(**{**KEEP_ALL.to_dict(), **switches})


def document(text: str, mentions=(), sentences=None) -> Document:
    return Document("doc", text.split(), sentences, [Mention(*m) for m in mentions])


def spans(doc: Document) -> list[tuple[int, int, int]]:
    return [(m.start, m.end, m.entity) for m in doc.mentions]


# ---- tokens -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token", ["7", "1,000", "3.5", "-5", "+3", "1990s", "90's", "2nd", "19th", "6:00", "1/2", "2."]
)
def test_numbers(token):
    assert is_number(token)


@pytest.mark.parametrize("token", ["one", "A1", "y2", "SARS-CoV-2", "639-3", "1..2", ".", "", "first"])
def test_not_numbers(token):
    assert not is_number(token)


@pytest.mark.parametrize("token", [".", ",", "--", '"', "...", "(", "$", "%", "\u2014", "\u201c", "*"])
def test_punctuation(token):
    assert is_punctuation(token)


@pytest.mark.parametrize("token", ["'s", "n't", "a.", "1", "&c", "<num>"])
def test_not_punctuation(token):
    assert not is_punctuation(token)


def test_lowercase_switch():
    doc = document("The Cat SAT on it", [(0, 2, 1), (4, 5, 1)])
    result, report = preprocess_document(doc, only(lowercase=True))
    assert result.tokens == ("the", "cat", "sat", "on", "it")
    assert report.tokens_lowercased == 3
    assert preprocess_document(doc, KEEP_ALL)[0].tokens == doc.tokens


def test_number_switch_replaces_digits_only():
    doc = document("In the 1990s one A1 cost 1,000 or 3.5 dollars")
    result, report = preprocess_document(doc, only(replace_numbers=True))
    assert result.tokens == ("In", "the", NUM, "one", "A1", "cost", NUM, "or", NUM, "dollars")
    assert report.numbers_replaced == 3
    assert preprocess_document(doc, KEEP_ALL)[1].numbers_replaced == 0


def test_punctuation_outside_mentions_is_dropped_and_spans_shift():
    # sentences: [" Mr. Smith , the baker , came . ] [ " Hello ! " said [he] . ]
    doc = document(
        '" Mr. Smith , the baker , came . " Hello ! " said he .',
        mentions=[(1, 7, 1), (14, 15, 1)],
        sentences=[(0, 9), (9, 16)],
    )
    result, report = preprocess_document(doc, only(drop_punctuation=True))
    assert result.tokens == ("Mr.", "Smith", ",", "the", "baker", ",", "came", "Hello", "said", "he")
    assert spans(result) == [(0, 6, 1), (9, 10, 1)]  # the commas inside the first mention stay
    assert result.sentences == ((0, 7), (7, 10))
    assert [result.mention_text(m) for m in result.mentions] == ["Mr. Smith , the baker ,", "he"]
    assert report.punctuation_dropped == 6
    assert preprocess_document(doc, KEEP_ALL)[0] == doc


def test_sentences_left_empty_are_removed():
    doc = document("Yes . -- ! ? Ok .", [(0, 1, 1), (5, 6, 1)], sentences=[(0, 2), (2, 5), (5, 7)])
    result, report = preprocess_document(doc, only(drop_punctuation=True))
    assert result.tokens == ("Yes", "Ok")
    assert result.sentences == ((0, 1), (1, 2))
    assert report.empty_sentences_dropped == 1


def test_punctuation_of_dropped_mentions_is_not_protected():
    # the singleton "[Smith ,]" goes, so its comma is punctuation outside every mention
    doc = document("John saw Smith , and he left", [(0, 1, 1), (2, 4, 2), (5, 6, 1)])
    result, _ = preprocess_document(doc, only(drop_punctuation=True, drop_singletons=True))
    assert result.tokens == ("John", "saw", "Smith", "and", "he", "left")
    assert spans(result) == [(0, 1, 1), (4, 5, 1)]


def test_a_document_of_punctuation_is_an_error_naming_it():
    with pytest.raises(PreprocessError, match="'doc' part 0 is empty.*all its 3 tokens"):
        preprocess_document(document(". ! ?"))


# ---- mentions ---------------------------------------------------------------------------------------------


def test_nested_mentions_keep_the_outermost():
    # [the king of [France]2 ]1 said [he]1 loves [France]2 and [[its]2 capital]3
    doc = document(
        "the king of France said he loves France and its capital",
        [(0, 4, 1), (3, 4, 2), (5, 6, 1), (7, 8, 2), (9, 11, 3), (9, 10, 2)],
    )
    result, report = preprocess_document(doc, only(outermost_only=True))
    assert spans(result) == [(0, 4, 1), (5, 6, 1), (7, 8, 2), (9, 11, 3)]
    assert report.nested_mentions_dropped == 2
    assert encoding_problems(result) == []
    assert len(preprocess_document(doc, KEEP_ALL)[0].mentions) == 6


def test_singletons_go_before_nesting_is_resolved():
    # "[the wife of [John]]" where the wife is never mentioned again: John's inner mention survives
    doc = document("the wife of John met John and he smiled", [(0, 4, 1), (3, 4, 2), (5, 6, 2), (7, 8, 2)])
    result, report = preprocess_document(doc)
    assert spans(result) == [(3, 4, 2), (5, 6, 2), (7, 8, 2)]
    assert report.singletons_dropped == 1 and report.nested_mentions_dropped == 0


def test_singletons_made_by_the_outermost_filter_go_too():
    # [[Mary]2 's sister]1 saw [her]1 and [Mary]2: after the outermost filter Mary is a singleton
    doc = document("Mary 's sister saw her and Mary", [(0, 3, 1), (0, 1, 2), (4, 5, 1), (6, 7, 2)])
    result, report = preprocess_document(doc, only(outermost_only=True, drop_singletons=True))
    assert spans(result) == [(0, 3, 1), (4, 5, 1)]
    assert report.nested_mentions_dropped == 1 and report.singletons_dropped == 1
    kept, _ = preprocess_document(doc, only(outermost_only=True))
    assert spans(kept) == [(0, 3, 1), (4, 5, 1), (6, 7, 2)]


def test_long_mentions_are_dropped_before_nesting_so_inner_mentions_survive():
    words = ["w"] * 30 + ["Anna", "smiled"]
    doc = Document("doc", words, mentions=[Mention(0, 30, 1), Mention(3, 4, 2), Mention(30, 31, 2)])
    result, report = preprocess_document(doc, only(outermost_only=True, max_mention_length=25))
    assert spans(result) == [(3, 4, 2), (30, 31, 2)]
    assert report.long_mentions_dropped == 1 and report.nested_mentions_dropped == 0
    unbounded, _ = preprocess_document(doc, only(outermost_only=True))
    assert spans(unbounded) == [(0, 30, 1), (30, 31, 2)]
    assert encoding_problems(unbounded) == ["mention (0, 30) is 30 tokens long (max 25)"]


def test_duplicate_spans_keep_one_mention():
    doc = document("Ann met Bob and Ann", [(0, 1, 1), (0, 1, 1), (4, 5, 1)])
    result, report = preprocess_document(doc, KEEP_ALL)
    assert spans(result) == [(0, 1, 1), (4, 5, 1)]
    assert report.duplicate_mentions_dropped == 1 and report.entities_merged == 0


def test_entities_sharing_a_span_are_merged_transitively():
    # entity 5 shares a span with 3, and 3 with 8: all three are one entity, labelled by the smallest label
    doc = document("a b c d e", [(0, 1, 5), (1, 2, 5), (1, 2, 3), (2, 3, 3), (2, 3, 8), (4, 5, 8), (3, 4, 9)])
    result, report = preprocess_document(doc, KEEP_ALL)
    assert spans(result) == [(0, 1, 3), (1, 2, 3), (2, 3, 3), (3, 4, 9), (4, 5, 3)]
    assert report.duplicate_mentions_dropped == 2 and report.entities_merged == 2


def test_crossing_mentions_drop_the_later_one():
    doc = document("a b c d e f", [(0, 2, 1), (1, 3, 2), (4, 5, 1), (5, 6, 2), (0, 4, 3), (3, 6, 4)])
    result, report = preprocess_document(doc, KEEP_ALL)
    # text order is by start, enclosing mentions first: (0,4) (0,2) (1,3) (3,6) (4,5) (5,6);
    # (1,3) crosses (0,2) and (3,6) crosses (0,4)
    assert spans(result) == [(0, 2, 1), (0, 4, 3), (4, 5, 1), (5, 6, 2)]
    assert report.crossing_mentions_dropped == 2


def test_report_adds_up_over_documents():
    docs = [document("The Cat , 2 cats", [(0, 2, 1), (3, 5, 1)]), document("A b . C", [(0, 1, 1)]).replace(id="x")]
    results, total = preprocess_documents(docs)
    separately = [preprocess_document(doc) for doc in docs]
    assert results == [result for result, _ in separately]
    assert total == separately[0][1] + separately[1][1]
    assert total.to_dict()["documents"] == 2 and total.tokens_before == 9 and total.tokens_after == 7
    assert total.to_dict() == json.loads(json.dumps(total.to_dict()))
    summary = total.summary()
    assert summary.splitlines()[0] == "2 documents: 9 -> 7 tokens, 3 -> 2 mentions"
    assert "  punctuation dropped: 2" in summary and "crossing" not in summary
    assert PreprocessReport() + total == total


def test_config_round_trips_and_rejects_unknown_options():
    config = PreprocessConfig(lowercase=False, max_mention_length=None)
    assert PreprocessConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert PreprocessConfig().to_dict() == {
        "lowercase": True,
        "drop_punctuation": True,
        "replace_numbers": True,
        "outermost_only": True,
        "drop_singletons": True,
        "max_mention_length": 25,
    }
    with pytest.raises(ValueError, match="unknown preprocessing options \\['stem'\\]"):
        PreprocessConfig.from_dict({"stem": True})
    with pytest.raises(ValueError, match="at least 1"):
        PreprocessConfig(max_mention_length=0)


# ---- the whole pipeline, as a property --------------------------------------------------------------------

WORDS = ["John", "the", "Cat", "said", ",", ".", "--", "!", "1,000", "3.5", "1990s", "one", "A1"]


@st.composite
def annotated_documents(draw) -> Document:
    """Random documents with arbitrary mentions: nested, crossing, duplicated, long, singletons."""
    size = draw(st.integers(1, 45))
    tokens = draw(st.lists(st.sampled_from(WORDS), min_size=size, max_size=size))
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), max_size=4))) if size > 1 else []
    bounds = [0, *cuts, size]
    starts = st.integers(0, size - 1)
    mention_list = draw(st.lists(st.tuples(starts, st.integers(1, 30), st.integers(0, 5)), max_size=25))
    mentions = [Mention(start, min(size, start + length), entity) for start, length, entity in mention_list]
    return Document("doc", tokens, list(zip(bounds, bounds[1:])), mentions)


@given(annotated_documents())
def test_preprocessed_documents_encode_and_decode_to_the_same_clusters(doc: Document):
    assume(not all(is_punctuation(token) for token in doc.tokens))
    result, report = preprocess_document(doc)
    assert encoding_problems(result) == []
    decoded = decode_entities(result.id, result.tokens, encode_entities(result), result.sentences, result.part)
    assert decoded.partition() == result.partition()
    assert all(len(cluster) > 1 for cluster in result.clusters())
    normalised = [NUM if is_number(token) else token.lower() for token in doc.tokens]
    mention_texts = {tuple(normalised[m.start : m.end]) for m in doc.mentions}
    assert all(result.tokens[m.start : m.end] in mention_texts for m in result.mentions)
    assert report.tokens_after == len(result.tokens) == report.tokens_before - report.punctuation_dropped


# ---- vocabulary -------------------------------------------------------------------------------------------


def training_documents() -> list[Document]:
    return [
        document("the cat saw the dog <num>", sentences=[(0, 3), (3, 6)]),
        document("a dog saw the cat", sentences=[(0, 5)]),
        document("zebra", sentences=[(0, 1)]),
    ]


def test_vocabulary_order_counts_and_specials():
    vocabulary = Vocabulary.build(training_documents(), max_size=8)
    # the: 3; cat, dog, saw: 2 (ties alphabetical); a, zebra: 1, past the 4 places left after the specials
    assert vocabulary.words == (*SPECIALS, "the", "cat", "dog", "saw")
    assert vocabulary.counts == (2, 1, 4, 4, 3, 2, 2, 2)  # <unk> stands for "a" and "zebra"; 4 sentences
    assert len(vocabulary) == 8
    assert [vocabulary.index(special) for special in SPECIALS] == [0, 1, 2, 3]
    assert vocabulary.index("zebra") == vocabulary.unk_id == 0
    assert vocabulary.word(5) == "cat" and "cat" in vocabulary and "zebra" not in vocabulary
    assert vocabulary.encode("the zebra saw <num>".split()) == [4, 0, 7, 1]
    assert Vocabulary.build(reversed(training_documents()), max_size=8) == vocabulary
    assert len(Vocabulary.build(training_documents())) == len(SPECIALS) + 6


def test_vocabulary_refuses_bad_word_lists():
    with pytest.raises(ValueError, match="must start with"):
        Vocabulary(("cat", *SPECIALS), (1, 0, 0, 0, 0))
    with pytest.raises(ValueError, match="more than once"):
        Vocabulary((*SPECIALS, "cat", "cat"), (0, 0, 0, 0, 1, 1))
    with pytest.raises(ValueError, match="5 words but 4 counts"):
        Vocabulary((*SPECIALS, "cat"), (0, 0, 0, 0))
    with pytest.raises(ValueError, match="room for the 4 specials"):
        Vocabulary.build(training_documents(), max_size=3)


def test_vocabulary_fingerprint_names_the_ids():
    vocabulary = Vocabulary.build(training_documents(), max_size=8)
    recounted = Vocabulary(vocabulary.words, (9,) * len(vocabulary))
    reordered = Vocabulary((*SPECIALS, "cat", "the", "dog", "saw"), vocabulary.counts)
    assert recounted.fingerprint == vocabulary.fingerprint != reordered.fingerprint
    assert len(vocabulary.fingerprint) == 64 and vocabulary.fingerprint[:12] in repr(vocabulary)


def test_vocabulary_save_and_load(tmp_path: Path):
    vocabulary = Vocabulary.build(training_documents(), max_size=8)
    path = tmp_path / "vocab.json"
    vocabulary.save(path)
    assert Vocabulary.load(path) == vocabulary
    assert Vocabulary.from_dict(json.loads(path.read_text())) == vocabulary
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.json"]  # no temporary file left behind
    edited = {**vocabulary.to_dict(), "words": [*SPECIALS, "cat", "the", "dog", "saw"]}
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="vocab.json: not a vocabulary file: .*fingerprint"):
        Vocabulary.load(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="vocab.json: not a vocabulary file"):
        Vocabulary.load(path)


def test_a_failed_save_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "vocab.json"
    Vocabulary.build(training_documents(), max_size=8).save(path)
    before = path.read_text()

    def broken_dump(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(json, "dumps", broken_dump)
    with pytest.raises(OSError, match="disk full"):
        Vocabulary.build(training_documents()).save(path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.json"]


def test_apply_vocabulary_counts_unknown_words():
    vocabulary = Vocabulary.build(training_documents(), max_size=8)
    doc = document("The zebra saw 12 cats", [(0, 2, 1), (4, 5, 1)])
    mapped, unknown = apply_vocabulary(doc, vocabulary)
    assert mapped.tokens == (UNK, UNK, "saw", UNK, UNK) and unknown == 4
    assert mapped.mentions == doc.mentions
    result, report = preprocess_document(doc, vocabulary=vocabulary)
    assert result.tokens == ("the", UNK, "saw", NUM, UNK) and report.unknown_tokens == 2


# ---- real corpora -----------------------------------------------------------------------------------------


def _check_corpus(documents: list[Document]) -> PreprocessReport:
    """Preprocess a whole corpus and check that every document encodes to R/E/L and decodes back."""
    results, report = preprocess_documents(documents)
    for result in results:
        annotation = encode_entities(result)
        decoded = decode_entities(result.id, result.tokens, annotation, result.sentences, result.part)
        assert decoded.partition() == result.partition(), result.key
    return report


def test_litbank_preprocesses_into_encodable_documents(litbank_dir: Path):
    documents = [doc for path in sorted((litbank_dir / "conll").glob("*.conll")) for doc in read_conll(path)[0]]
    report = _check_corpus(documents)
    assert report.documents == 100
    assert report.singletons_dropped > 0 and report.nested_mentions_dropped > 0  # LitBank annotates both


def test_ontogum_preprocesses_into_encodable_documents(ontogum_dir: Path):
    documents = [
        doc
        for path in sorted((ontogum_dir / "conll").glob("*.conll"))
        for doc in read_conll(path, conllu=ontogum_dir / "conllu" / f"{path.stem}.conllu")[0]
    ]
    report = _check_corpus(documents)
    assert report.documents == 263
    assert report.nested_mentions_dropped > 0
