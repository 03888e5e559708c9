"""Coreference of raw text end to end: the pipeline on the embedded sample, the command, the bundled models, the
resolver trained and scored on predicted mentions, and a lowercase pipeline."""

from __future__ import annotations

import json

import pytest

from coref.corpora.registry import load_corpus
from coref.document import Document, Mention
from coref.io.text import tokenize
from coref.resolution import pipeline as resolve_module
from coref.resolution.mentions import MentionDetectorConfig
from coref.resolution.pipeline import BUNDLED, CorefPipeline, clusters, resolve
from coref.resolution.ranker import MentionRanker, lowercased, with_predicted_mentions
from inference.commands import resolver as resolver_command
from inference.commands.resolve import main
from inference.training.resolution import train_detector, train_ranker

STORY = ("Maria opened a small bakery on Elm Street. Every morning, she baked bread before dawn. "
         "Her brother Tomas delivered the bread to the cafes. He drove an old van.")


@pytest.fixture(scope="module")
def sample_pipeline(tmp_path_factory) -> tuple[CorefPipeline, str, str]:
    """A detector and a ranker trained on its mentions of the sample corpus, saved, and their paths."""
    train = load_corpus("sample", "train", None).documents
    dev = load_corpus("sample", "dev", None).documents
    detector = train_detector(train, dev, MentionDetectorConfig(embedding_size=16, hidden_size=16, layers=1,
                                                                mlp_size=16), epochs=30, progress=False)
    labelled = [with_predicted_mentions(document, spans) for document, spans in zip(train, detector.predict(train))]
    ranker = train_ranker(labelled, epochs=3, progress=False)
    folder = tmp_path_factory.mktemp("pipeline")
    detector.save(folder / "mentions.pt")
    ranker.save(folder / "resolver.npz")
    return CorefPipeline(detector, ranker), str(folder / "mentions.pt"), str(folder / "resolver.npz")


@pytest.fixture(scope="module")
def lowercase_pipeline(tmp_path_factory) -> tuple[CorefPipeline, str]:
    """A lowercase detector and a lowercase ranker trained on its mentions of the sample corpus, and the
    detector's path."""
    train = load_corpus("sample", "train", None).documents
    dev = load_corpus("sample", "dev", None).documents
    config = MentionDetectorConfig(embedding_size=16, hidden_size=16, layers=1, mlp_size=16, lowercase=True)
    detector = train_detector(train, dev, config, epochs=15, progress=False)
    labelled = [with_predicted_mentions(document, spans) for document, spans in zip(train, detector.predict(train))]
    path = tmp_path_factory.mktemp("lowercase") / "mentions.pt"
    detector.save(path)
    return CorefPipeline(detector, train_ranker(labelled, epochs=3, lowercase=True, progress=False)), str(path)


def test_the_pipeline_finds_mentions_and_links_pronouns(sample_pipeline):
    pipeline = sample_pipeline[0]
    document = pipeline.resolve(STORY)
    words = {" ".join(document.tokens[m.start:m.end]): m.entity for m in document.mentions}
    assert document.tokens == tokenize(STORY).tokens and len(document.sentences) == 4
    assert "she" in words and "Her" in words and words["she"] == words["Her"]


def test_documents_keep_their_tokens_and_lose_their_own_mentions(sample_pipeline):
    pipeline = sample_pipeline[0]
    gold = load_corpus("sample", "dev", None).documents
    resolved = pipeline.resolve_documents(gold)
    assert [d.tokens for d in resolved] == [d.tokens for d in gold]
    assert [d.key for d in resolved] == [d.key for d in gold]
    alone = pipeline.resolve_documents([gold[1]])[0]
    assert alone == resolved[1]  # batching documents together changes nothing


def test_clusters_give_character_offsets_into_the_text():
    text = "Anna met  her brother."
    tokenized = tokenize(text)
    document = Document("t", tokenized.tokens, tokenized.sentences, [Mention(0, 1, 7), Mention(2, 3, 7)])
    found = clusters(document, tokenized)
    assert found == [[{"text": "Anna", "start_token": 0, "end_token": 1, "start_char": 0, "end_char": 4},
                      {"text": "her", "start_token": 2, "end_token": 3, "start_char": 10, "end_char": 13}]]


def test_the_command_writes_conll_and_json(sample_pipeline, tmp_path, capsys):
    _, detector, ranker = sample_pipeline
    story = tmp_path / "story.txt"
    story.write_text(STORY, encoding="utf-8")
    out, clusters_json = tmp_path / "story.conll", tmp_path / "story.json"
    assert main(["--file", str(story), "--detector", detector, "--resolver", ranker, "--out", str(out),
                 "--json", str(clusters_json)]) == 0
    assert "entities mentioned more than once" in capsys.readouterr().out
    assert out.read_text().startswith("#begin document (story); part 000")
    written = json.loads(clusters_json.read_text())
    for cluster in written["documents"][0]["clusters"]:
        for mention in cluster:
            assert STORY[mention["start_char"]:mention["end_char"]] == mention["text"]
    assert main(["--conll", str(out), "--detector", detector, "--resolver", ranker, "--out", "-"]) == 0
    assert capsys.readouterr().out == out.read_text()  # a CoNLL file's tokens resolve as the text's did


def test_the_bundled_models_resolve_a_text_with_no_data_directory():
    if not BUNDLED["detector"].is_file():
        pytest.fail(f"the bundled detector {BUNDLED['detector']} is missing")
    resolve_module.bundled_pipeline.cache_clear()
    document = resolve("John Smith went home because he was tired. His wife Mary met him at the door.")
    words = {" ".join(document.tokens[m.start:m.end]): m.entity for m in document.mentions}
    assert words.get("he") is not None and words.get("he") == words.get("John Smith")


def test_training_and_scoring_on_predicted_mentions_through_the_command(sample_pipeline, tmp_path, capsys):
    _, detector, _ = sample_pipeline
    model = tmp_path / "resolver.npz"
    assert resolver_command.main(["train", "--corpus", "sample", "--detector", detector, "--out", str(model),
                          "--epochs", "2"]) == 0
    assert "mentions from" in capsys.readouterr().out
    trained = MentionRanker.load(model)
    assert trained.settings["detector"] == "mentions.pt"
    assert trained.keeps_singletons  # the sample annotates singletons, as LitBank does
    scores = tmp_path / "scores.json"
    assert resolver_command.main(["predict", "--model", str(model), "--detector", detector, "--corpus", "sample",
                          "--split", "dev", "--out", str(tmp_path / "dev.conll"), "--json", str(scores)]) == 0
    result = json.loads(scores.read_text())
    assert set(result) == {"as_annotated", "entitynlm_mentions", "detected_mentions"}
    detected, annotated = result["detected_mentions"], result["as_annotated"]
    assert detected["correct"] > 0 and annotated["conll_f1"] > 0
    # the resolver keeps (LitBank style) every detected mention: the key's mention recall is the detector's
    assert annotated["mentions"]["recall"] == pytest.approx(detected["recall"])


def test_the_gap_command_scores_the_pipeline(sample_pipeline, tmp_path, capsys):
    from inference.commands import gap
    from tests.test_gap import ROW, write_gap

    _, detector, ranker = sample_pipeline
    masculine = ["ex-2", "Tomas met Pavel and he left.", "he", "20", "Tomas", "0", "TRUE", "Pavel", "10", "FALSE",
                 "http://en.wikipedia.org/wiki/Y"]
    write_gap(tmp_path, [ROW, masculine], "gap-test.tsv")
    out = tmp_path / "gap.json"
    assert gap.main(["--split", "test", "--data-dir", str(tmp_path), "--detector", detector, "--resolver", ranker,
                     "--json", str(out)]) == 0
    assert "bias (F/M)" in capsys.readouterr().out
    scores = json.loads(out.read_text())
    assert scores["examples"] == 2 and scores["split"] == "test"
    assert sum(scores["overall"][count] for count in ("tp", "fp", "fn", "tn")) == 4  # two decisions per example


def test_a_lowercase_pipeline_resolves_text_and_its_lowercased_copy_alike(lowercase_pipeline):
    pipeline = lowercase_pipeline[0]
    gold = load_corpus("sample", "dev", None).documents
    cased = pipeline.resolve_documents(gold)
    lower = pipeline.resolve_documents([lowercased(document) for document in gold])
    assert [d.tokens for d in cased] == [d.tokens for d in gold]  # each keeps its own tokens
    assert [d.mentions for d in cased] == [d.mentions for d in lower] and any(d.mentions for d in cased)


def test_a_resolver_must_lowercase_exactly_when_its_detector_does(lowercase_pipeline, tmp_path, capsys):
    detector = lowercase_pipeline[1]
    model = tmp_path / "resolver.npz"
    command = ["train", "--corpus", "sample", "--detector", detector, "--out", str(model), "--epochs", "1"]
    assert resolver_command.main(command) == 2
    error = capsys.readouterr().err
    assert error == (f"error: {detector} was trained with --lowercase: train the resolver on its mentions with it "
                     "too\n")
    assert not model.exists()
    assert resolver_command.main([*command, "--lowercase"]) == 0
    assert "tokens lowercased" in capsys.readouterr().out
    assert MentionRanker.load(model).lowercase
    scores = tmp_path / "scores.json"
    assert resolver_command.main(["predict", "--model", str(model), "--detector", detector, "--corpus", "sample",
                          "--split", "dev", "--out", str(tmp_path / "dev.conll"), "--json", str(scores)]) == 0
    assert json.loads(scores.read_text())["as_annotated"]["conll_f1"] > 0


def test_an_empty_file_is_one_line_naming_the_file(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    assert main(["--file", str(empty)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {empty}:1: cannot tokenize an empty or whitespace-only text"


def test_the_readme_example_resolves_as_a_reader_would():
    """Issue 26: "Anna met her brother in Paris. She thanked him." gives Anna | her | She and her brother | him,
    Paris apart (the README's example, by the bundled pipeline)."""
    document = resolve("Anna met her brother in Paris. She thanked him.")
    found = [[mention["text"] for mention in entity] for entity in clusters(document)]
    assert ["Anna", "her", "She"] in found and ["her brother", "him"] in found
    assert all("Paris" not in entity or entity == ["Paris"] for entity in found)
