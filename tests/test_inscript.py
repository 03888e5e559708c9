"""The InScript loader: labels and chains to mentions and entities (coref/corpora/inscript.py), its split
table, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coref.corpora.inscript import LabelCounts
from coref.corpora.preprocess import PreprocessConfig, preprocess_documents
from coref.corpora.registry import CorpusError, corpus_stats, load_corpus, load_inscript
from coref.document import encoding_problems
from inference.commands.corpora import main

SENTENCES = [
    ["I", "took", "the", "bath", "tub", "."],
    ["We", "used", "2 1/4", "towels", "from", "the", "shelf", "."],
    ["It", "was", "warm", "and", "I", "dried", "with", "the", "towels", "."],
]
# (id, from, to, name): 1 is the NP around the chained head 2; 8 is not a referent; 9 is in no chain
LABELS = [
    ("0", "1-1", None, "ScrPart_bather"),
    ("1", "1-3", "1-5", "ScrPart_bathtub"),
    ("2", "1-5", None, "ScrPart_bathtub"),
    ("3", "2-1", None, "ScrPart_bather"),
    ("4", "2-3", "2-4", "ScrPart_towel"),
    ("9", "2-7", None, "NPart"),
    ("5", "3-1", None, "ScrPart_bathtub"),
    ("8", "3-3", None, "No_label"),
    ("6", "3-5", None, "ScrPart_bather"),
    ("7", "3-8", "3-9", "ScrPart_towel"),
]
CHAINS = [("0 6", None), ("2 5 8", None), ("4 7", None), ("3 0", "group_we")]
# the token index spans of the expected mentions, grouped by entity
ENTITIES = {
    frozenset({(0, 1), (18, 19)}),  # I ... I (the group chain does not take label 0)
    frozenset({(4, 5), (14, 15)}),  # tub ... It (not "the bath tub", not the No_label "warm")
    frozenset({(8, 10), (21, 23)}),  # 2_1/4 towels ... the towels
    frozenset({(6, 7)}),  # We: what is left of the group chain
    frozenset({(12, 13)}),  # shelf: a singleton
}


def story_xml(labels=LABELS, chains=CHAINS) -> str:
    """A story file in InScript's layout: sentences of tokens, participant and event labels, chains."""
    sentences = "".join(
        f'<sentence id="{s}">'
        + "".join(f'<token content="{token}" id="{s}-{t}"/>' for t, token in enumerate(tokens, start=1))
        + "</sentence>"
        for s, tokens in enumerate(SENTENCES, start=1)
    )
    participants = "".join(
        f'<label from="{first}" id="{label_id}" name="{name}" type="participant"'
        + (f' to="{last}"' if last else "")
        + "/>"
        for label_id, first, last, name in labels
    )
    chain_elements = "".join(
        f'<chain elements="{elements}"' + (f' name="{name}"' if name else "") + "/>" for elements, name in chains
    )
    content = "\n".join(" ".join(tokens) for tokens in SENTENCES)
    return (
        '<?xml version="1.0" encoding="UTF-8"?><story id="001" scenario="bath">'
        f"<text><content>{content}</content><sentences>{sentences}</sentences></text>"
        f"<annotations><participants>{participants}</participants>"
        '<events><label from="1-2" id="10" name="ScrEv_take" type="event"/></events>'
        f"<chains>{chain_elements}</chains></annotations></story>"
    )


def write_corpus(data: Path, xml: str) -> Path:
    """A data directory holding one story, bath_001, as the only story of dev."""
    story = data / "inscript" / "corpus" / "bath" / "bath_001.xml"
    story.parent.mkdir(parents=True)
    story.write_text(xml, encoding="utf-8")
    splits = data / "inscript" / "splits" / "modi_split_637_91_182.json"
    splits.parent.mkdir(parents=True)
    splits.write_text(json.dumps({"test": ["bath_002"], "train": ["bath_003"], "dev": ["bath_001"]}), encoding="utf-8")
    return story


def test_a_story_becomes_tokens_sentences_and_the_mentions_the_rules_choose(tmp_path):
    write_corpus(tmp_path, story_xml())
    (document,), counts = load_inscript("dev", tmp_path)
    assert (document.id, document.part) == ("bath_001", 0)
    assert document.tokens[6:10] == ("We", "used", "2_1/4", "towels")
    assert len(document.tokens) == 24 and document.sentences == ((0, 6), (6, 14), (14, 24))
    assert [mention.span for mention in document.mentions] == [
        (0, 1), (4, 5), (6, 7), (8, 10), (12, 13), (14, 15), (18, 19), (21, 23)
    ]
    assert document.partition() == frozenset(ENTITIES)
    assert counts == LabelCounts(
        labels=10, no_label_dropped=1, overlapping_singletons_dropped=1, group_labels_kept_individual=1
    )


def test_a_label_in_two_individual_chains_stays_with_the_first(tmp_path):
    write_corpus(tmp_path, story_xml(chains=[("0 6", None), ("3 6", None)]))
    (document,), counts = load_inscript("dev", tmp_path)
    assert {frozenset({(0, 1), (18, 19)}), frozenset({(6, 7)})} <= document.partition()
    assert counts.labels_in_two_individual_chains == 1


def test_singletons_overlapping_each_other_are_left_for_preprocessing(tmp_path):
    write_corpus(tmp_path, story_xml(chains=[]))
    (document,), counts = load_inscript("dev", tmp_path)
    assert (2, 5) in [mention.span for mention in document.mentions]
    assert counts.overlapping_singletons_dropped == 0 and len(document.entities()) == 9


def test_the_registry_and_the_stats_command_know_inscript(tmp_path, capsys):
    write_corpus(tmp_path, story_xml())
    corpus = load_corpus("inscript", "dev", tmp_path)
    assert corpus_stats(corpus)["mentions"] == 8 and corpus.problems == ()
    assert main(["stats", "--corpus", "inscript", "--split", "dev", "--data-dir", str(tmp_path)]) == 0
    assert "corpus inscript" in capsys.readouterr().out


def test_malformed_xml_is_an_error_naming_the_file_and_line(tmp_path):
    story = write_corpus(tmp_path, story_xml().replace("</sentences>", "</sentence>", 1))
    with pytest.raises(CorpusError, match=f"{story}: malformed XML: mismatched tag: line 3, column"):
        load_inscript("dev", tmp_path)


def test_an_unknown_label_in_a_chain_is_an_error_naming_the_file_and_chain(tmp_path):
    story = write_corpus(tmp_path, story_xml(chains=[("0 42", None)]))
    with pytest.raises(CorpusError, match=f"{story}: <chain elements=\"0 42\"> names unknown label ids \\['42'\\]"):
        load_inscript("dev", tmp_path)


def test_a_missing_split_table_or_story_is_an_error(tmp_path):
    with pytest.raises(CorpusError, match="corpus 'inscript' not found: .*modi_split_637_91_182.json"):
        load_corpus("inscript", "dev", tmp_path)
    write_corpus(tmp_path, story_xml())
    with pytest.raises(CorpusError, match="bath_002.xml is missing"):
        load_corpus("inscript", "test", tmp_path)


# ---- the real corpus ----------------------------------------------------------------------------------------

# stories, sentences, tokens per split (the data's SOURCE.md)
SOURCE_COUNTS = {"train": (637, 7790, 137615), "dev": (91, 1138, 20150), "test": (182, 2339, 39668)}


@pytest.fixture(scope="module")
def inscript_dir(data_dir: Path) -> Path:
    """The data directory if it holds InScript, or a skip that says why."""
    if not (data_dir / "inscript").is_dir():
        pytest.skip(f"corpus 'inscript' unavailable: {data_dir / 'inscript'} does not exist")
    return data_dir


@pytest.mark.parametrize("split", SOURCE_COUNTS)
def test_real_splits_have_the_documented_sizes_and_encode_after_preprocessing(inscript_dir, split):
    documents = load_corpus("inscript", split, inscript_dir).documents
    sizes = (len(documents), sum(len(d.sentences) for d in documents), sum(len(d.tokens) for d in documents))
    assert sizes == SOURCE_COUNTS[split]
    config = PreprocessConfig(drop_singletons=False, max_mention_length=25)
    for document in preprocess_documents(documents, config)[0]:
        assert encoding_problems(document) == [], document.id
