"""What the raw-text pipeline takes besides one text (issue 26, items 3-5), with the bundled models: given mentions
come back exactly as given, a bad span is one clear error (exit status 2 from the command), ``--no-singletons`` drops
exactly the one-mention entities, many texts in one call resolve as each alone, and ``--file`` reads a folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import entitylm as elm
from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.io.conll import read_conll
from coref.io.text import tokenize
from coref.resolution.pipeline import CorefPipeline, SpanError, bundled_pipeline, resolve
from coref.resolution.ranker import MentionRanker
from inference.commands.resolve import main

STORY = ("Maria opened a small bakery on Elm Street. Every morning, she baked bread before dawn. "
         "Her brother Tomas delivered the bread to the cafes. He drove an old van.")
# (start_char, end_char) of: Maria, a small bakery on Elm Street, Elm Street, she, Her brother Tomas, Her, He,
# an old van
GIVEN = [(0, 5), (13, 41), (31, 41), (58, 61), (87, 104), (87, 90), (139, 141), (148, 158)]
SAMPLE = Path(__file__).resolve().parents[1] / "coref" / "corpora" / "data" / "sample_test.conll"


def texts() -> list[str]:
    """A few short texts: the story, and the sample corpus's documents written out one sentence a line."""
    documents = load_corpus("sample", "dev", None).documents + load_corpus("sample", "test", None).documents
    return [STORY, *("\n".join(" ".join(document.tokens[start:end]) for start, end in document.sentences)
                     for document in documents)]


def char_spans(document: Document, text: str) -> list[tuple[int, int]]:
    """The character spans of the document's mentions in the text it was resolved from, in text order."""
    offsets = tokenize(text).offsets
    return sorted((offsets[mention.start][0], offsets[mention.end - 1][1]) for mention in document.mentions)


def partition(document: Document) -> set[frozenset[tuple[int, int]]]:
    """The entities as sets of spans: what a clustering says, whatever numbers label the entities."""
    entities: dict[int, set[tuple[int, int]]] = {}
    for mention in document.mentions:
        entities.setdefault(mention.entity, set()).add(mention.span)
    return {frozenset(spans) for spans in entities.values()}


def entity_sizes(document: Document) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for mention in document.mentions:
        sizes[mention.entity] = sizes.get(mention.entity, 0) + 1
    return sizes


@pytest.fixture(scope="module")
def no_singletons_model() -> CorefPipeline:
    """The bundled pipeline with a ranker that follows OntoNotes' convention (drops singletons) by default."""
    bundled = bundled_pipeline()
    ranker = MentionRanker(bundled.ranker.weights, {**bundled.ranker.settings, "keep_singletons": False})
    return CorefPipeline(bundled.detector, ranker)


# ---- given mentions ---------------------------------------------------------------------------------------------


def test_the_story_spans_are_what_the_comment_says():
    assert [STORY[start:end] for start, end in GIVEN] == [
        "Maria", "a small bakery on Elm Street", "Elm Street", "she", "Her brother Tomas", "Her", "He", "an old van"]


@pytest.mark.parametrize("pipeline", ["bundled", "drops singletons"])
def test_given_mentions_come_back_exactly_as_given(pipeline, no_singletons_model):
    model = bundled_pipeline() if pipeline == "bundled" else no_singletons_model
    document = resolve(STORY, model, mentions=GIVEN)
    assert char_spans(document, STORY) == sorted(GIVEN)  # singletons included: the user asked about each span
    assert len(document.mentions) == len(GIVEN)
    assert len(entity_sizes(document)) < len(GIVEN)  # the ranker links some of them
    dropped = resolve(STORY, model, mentions=GIVEN, singletons=False)
    kept = {mention.span for mention in document.mentions if entity_sizes(document)[mention.entity] > 1}
    assert {mention.span for mention in dropped.mentions} == kept


def test_the_command_writes_the_given_spans_back_as_character_offsets(tmp_path, capsys):
    spans = tmp_path / "spans.json"
    spans.write_text(json.dumps({"mentions": [list(span) for span in GIVEN]}))
    story = tmp_path / "story.txt"
    story.write_text(STORY, encoding="utf-8")
    out = tmp_path / "clusters.json"
    assert main(["--file", str(story), "--mentions", str(spans), "--json", str(out), "--out", str(tmp_path / "s.conll")
                 ]) == 0
    assert "story: 34 tokens, 8 mentions" in capsys.readouterr().out
    (document,) = json.loads(out.read_text())["documents"]
    written = [(mention["start_char"], mention["end_char"]) for cluster in document["clusters"] for mention in cluster]
    assert sorted(written) == sorted(GIVEN)
    assert all(mention["text"] == STORY[mention["start_char"]:mention["end_char"]]
               for cluster in document["clusters"] for mention in cluster)
    (conll,) = read_conll(tmp_path / "s.conll", strict=True)[0]
    assert char_spans(conll, STORY) == sorted(GIVEN)


def test_a_conll_file_gives_its_own_mentions(tmp_path, capsys):
    out = tmp_path / "out.conll"
    assert main(["--conll", str(SAMPLE), "--mentions", str(SAMPLE), "--out", str(out)]) == 0
    for given, resolved in zip(read_conll(SAMPLE)[0], read_conll(out)[0], strict=True):
        assert sorted({mention.span for mention in given.mentions}) == [mention.span for mention in resolved.mentions]


@pytest.mark.parametrize(("span", "says"), [
    ((0, 3), "mention (0, 3) ends inside the token 'Maria' (characters 0:5), not at a token's end"),
    ((1, 5), "mention (1, 5) starts inside the token 'Maria'"),
    ((0, 6), "mention (0, 6) ends in whitespace"),
    ((5, 12), "mention (5, 12) starts in whitespace"),
    ((5, 5), "mention (5, 5) is empty or reversed"),
    ((9, 6), "mention (9, 6) is empty or reversed"),
    ((150, 170), "mention (150, 170) lies outside the text (159 characters)"),
    ((-1, 5), "mention (-1, 5) lies outside the text"),
    ((0.0, 5), "mention (0.0, 5) is not a pair of integers (start, end)"),
])
def test_a_bad_span_is_one_error_naming_it(span, says):
    with pytest.raises(SpanError) as raised:
        resolve(STORY, mentions=[(0, 5), span])
    assert str(raised.value).startswith(says)
    assert raised.value.index == 1


def test_a_span_given_twice_is_an_error_and_many_texts_name_the_text():
    with pytest.raises(SpanError, match=r"mention \(0, 5\) is given twice"):
        resolve(STORY, mentions=[(0, 5), (58, 61), (0, 5)])
    with pytest.raises(SpanError, match=r"mention \(0, 3\) of text1 ends inside the token 'Anna'"):
        resolve([STORY, "Anna left."], mentions=[[(0, 5)], [(0, 3)]])


@pytest.mark.parametrize(("content", "says"), [
    ('[[0, 5],\n  [58, 60]]', "{file}:2: mention [58, 60] ends inside the token 'she' (characters 58:61)"),
    ('{"mentions": [[0, 5], [0, 5]]}', "{file}:1: mention [0, 5] is given twice"),
    ('[[0, 5], "she"]', "{file}:1: mention 'she' is not a pair of integers"),
    ('{"other.txt": [[0, 5]]}', "{file}:1: no mentions for {story}: expected the key 'story.txt'"),
    ('[[0, 5]', "{file}:1: not JSON"),
    (SAMPLE.read_text(), "{file}:1: given mentions: text takes JSON character spans"),
])
def test_a_bad_mentions_file_is_one_line_and_exit_status_2(content, says, tmp_path, capsys):
    spans, story = tmp_path / "spans.json", tmp_path / "story.txt"
    spans.write_text(content)
    story.write_text(STORY)
    assert main(["--file", str(story), "--mentions", str(spans), "--json", str(tmp_path / "out.json")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"error: {says.format(file=spans, story=story)}")
    assert len(captured.err.splitlines()) == 1 and captured.out == ""
    assert not (tmp_path / "out.json").exists()


# ---- singletons -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", ["bundled", "drops singletons"])
def test_no_singletons_drops_exactly_the_one_mention_entities(pipeline, no_singletons_model):
    model = bundled_pipeline() if pipeline == "bundled" else no_singletons_model
    with_them, without = resolve(texts(), model, singletons=True), resolve(texts(), model, singletons=False)
    default = resolve(texts(), model)
    assert default == (with_them if model.ranker.keeps_singletons else without)
    assert sum(len(document.mentions) for document in without) > 0
    for kept, dropped in zip(with_them, without):
        sizes = entity_sizes(kept)
        assert any(size == 1 for size in sizes.values())  # there is something to drop
        singles = {frozenset({mention.span}) for mention in kept.mentions if sizes[mention.entity] == 1}
        assert partition(kept) - partition(dropped) == singles
        assert partition(dropped) == partition(kept) - singles  # nothing else changes: the same entities


def test_the_command_switches_singletons(tmp_path, capsys):
    outputs = {}
    for flag in ("--singletons", "--no-singletons"):
        out = tmp_path / f"{flag}.conll"
        assert main(["--text", STORY, flag, "--out", str(out)]) == 0
        outputs[flag] = read_conll(out)[0][0]
    kept, dropped = outputs["--singletons"], outputs["--no-singletons"]
    assert partition(dropped) == {entity for entity in partition(kept) if len(entity) > 1}
    assert "0 singletons" in capsys.readouterr().out


# ---- many texts ---------------------------------------------------------------------------------------------------


def test_many_texts_in_one_call_equal_each_resolved_alone():
    together = resolve(texts())
    assert [document.id for document in together] == [f"text{number}" for number in range(len(texts()))]
    for number, text in enumerate(texts()):
        assert together[number] == resolve(text).replace(id=f"text{number}")
    api = elm.coreference(texts()[:2])
    assert [found.document for found in api] == together[:2]
    assert api[0].clusters() == elm.coreference(STORY).clusters()


def test_many_texts_take_one_list_of_given_mentions_each():
    first, second = resolve([STORY, "Anna met Tom. She thanked him."], mentions=[GIVEN, [(0, 4), (9, 12), (14, 17)]])
    assert first == resolve(STORY, mentions=GIVEN).replace(id="text0")
    assert [mention.span for mention in second.mentions] == [(0, 1), (2, 3), (4, 5)]
    with pytest.raises(ValueError, match="2 texts but 1 lists of mentions"):
        resolve([STORY, STORY], mentions=[GIVEN])


def test_file_takes_a_folder_and_files_in_one_batch(tmp_path, capsys):
    folder = tmp_path / "stories"
    folder.mkdir()
    chosen = texts()[:3]
    for name, text in zip(["b", "a"], chosen):
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    (folder / "notes.md").write_text("not read")
    extra = tmp_path / "c.txt"
    extra.write_text(chosen[2], encoding="utf-8")
    spans = tmp_path / "spans.json"
    out, conll = tmp_path / "all.json", tmp_path / "all.conll"
    assert main(["--file", str(folder), str(extra), "--json", str(out), "--out", str(conll)]) == 0
    printed = capsys.readouterr().out
    assert printed.index("\na: ") < printed.index("\nb: ") < printed.index("\nc: ")
    documents = json.loads(out.read_text())["documents"]
    assert [document["id"] for document in documents] == ["a", "b", "c"]  # the folder's files sorted, then c.txt
    written = read_conll(conll, strict=True)[0]
    alone = [resolve(text) for text in (chosen[1], chosen[0], chosen[2])]
    assert [document.mentions for document in written] == [document.mentions for document in alone]
    for document, text in zip(documents, (chosen[1], chosen[0], chosen[2])):
        assert all(text[mention["start_char"]:mention["end_char"]] == mention["text"]
                   for cluster in document["clusters"] for mention in cluster)
    # given mentions for several files: keyed by file name (or path as given); each file named once
    spans.write_text(json.dumps({"a.txt": [[0, 4]], str(folder / "b.txt"): [], "c.txt": [[0, 5], [10, 13]]}))
    assert main(["--file", str(folder), str(extra), "--mentions", str(spans), "--json", str(out)]) == 0
    documents = json.loads(out.read_text())["documents"]
    assert [sum(len(cluster) for cluster in document["clusters"]) for document in documents] == [1, 0, 2]
    spans.write_text(json.dumps([[0, 3]]))
    assert main(["--file", str(folder), str(extra), "--mentions", str(spans)]) == 2
    assert "expected an object keyed by the 3 input files' names" in capsys.readouterr().err
