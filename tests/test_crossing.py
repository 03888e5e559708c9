"""Crossing mentions (overlapping, neither inside the other): the detector keeps the more probable of two, the
ranker never puts two in one entity, and a writer that cannot express its output leaves the clusters in a JSON file
that its one-line error names. Reproduced on a passage of *Emma* (``DATA/texts``) and on LitBank joined end to end."""

from __future__ import annotations

import json
import re
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coref.corpora.registry import joined_text
from coref.document import Document, Mention, best_non_crossing, crossing_pairs
from coref.io.conll import read_conll, write_conll
from coref.io.text import tokenize
from coref.resolution.kbest import ROOT
from coref.resolution.mentions import PAD, UNK, MentionDetector, MentionDetectorConfig
from coref.resolution.pipeline import RESCUED_JSON, CorefPipeline, clusters_json, resolve, write_outputs
from coref.resolution.ranker import HASH_BITS, MentionRanker
from inference.commands.resolve import main

EMMA = "emma_crossing_mentions.txt"


@pytest.fixture(scope="module")
def emma(texts_dir: Path) -> Path:
    path = texts_dir / EMMA
    if not path.is_file():
        pytest.skip(f"the Emma excerpt is unavailable: {path} does not exist")
    return path


def entities_with_crossing_mentions(document: Document) -> list[int]:
    """The entities of ``document`` that hold two crossing mentions (what no CoNLL file can write)."""
    return sorted({document.mentions[i].entity for i, k in crossing_pairs(document.mentions)
                   if document.mentions[i].entity == document.mentions[k].entity})


spans = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 6)).map(lambda s: (s[0], s[0] + s[1])),
                 unique=True, max_size=14)


# ---- the helpers ------------------------------------------------------------------------------------------------


@given(spans)
def test_crossing_pairs_are_exactly_the_pairs_that_cross(found):
    mentions = [Mention(start, end, 0) for start, end in found]
    expected = [(i, k) for i, k in combinations(range(len(mentions)), 2) if mentions[i].crosses(mentions[k])]
    assert sorted(crossing_pairs(mentions)) == expected


@given(spans, st.data())
def test_best_non_crossing_drops_each_span_only_for_a_better_one_it_crosses(found, data):
    mentions = [Mention(start, end, 0) for start, end in found]
    # integer scores: ties happen, and the suite's flush-to-zero (torch.set_flush_denormal) upsets st.floats
    scores = data.draw(st.lists(st.integers(0, 4), min_size=len(mentions), max_size=len(mentions)))
    kept = best_non_crossing(mentions, scores)
    assert crossing_pairs(kept) == [] and kept == sorted(kept)
    score = dict(zip(mentions, scores))
    for mention in set(mentions) - set(kept):
        assert any(mention.crosses(other) and score[other] >= score[mention] for other in kept)


def test_the_better_scored_of_two_crossing_mentions_stays_and_nesting_is_kept():
    outer, inner, crossing, after = Mention(0, 5, 0), Mention(1, 3, 0), Mention(2, 7, 0), Mention(7, 9, 0)
    assert best_non_crossing([outer, inner, crossing, after], [0.6, 0.5, 0.9, 0.1]) == [crossing, after]
    assert best_non_crossing([outer, inner, crossing, after], [0.9, 0.5, 0.6, 0.1]) == [outer, inner, after]
    assert best_non_crossing([Mention(0, 2, 0), Mention(1, 3, 0)], [0.5, 0.5]) == [Mention(0, 2, 0)]  # ties: first
    with pytest.raises(ValueError, match="2 mentions but 1 scores"):
        best_non_crossing([outer, inner], [0.5])


# ---- the detector's selection -----------------------------------------------------------------------------------


def test_the_detector_returns_no_crossing_spans(monkeypatch):
    detector = MentionDetector(MentionDetectorConfig(embedding_size=4, hidden_size=4, layers=1, mlp_size=4,
                                                     max_width=5), [PAD, UNK])
    candidates = {(0, 3): 0.9, (2, 5): 0.8, (3, 5): 0.7, (1, 2): 0.6, (4, 6): 0.55, (5, 6): 0.2}
    probabilities = np.array(list(candidates.values()))
    logits = np.log(probabilities / (1 - probabilities))
    starts, ends = (np.array(side) for side in zip(*candidates))
    monkeypatch.setattr(detector, "candidate_logits", lambda documents, batch_tokens=4000: (
        np.zeros(len(candidates), dtype=np.int64), starts, ends, logits))
    document = Document("d", "a b c d e f".split())
    # (2, 5) crosses the more probable (0, 3); (4, 6) crosses (3, 5); (1, 2) nests in (0, 3); (5, 6) is below 0.5
    assert detector.predict([document], threshold=0.5) == [[(0, 3), (1, 2), (3, 5)]]
    found = detector.span_probabilities([document], threshold=0.1)[0]
    assert sorted(found) == [(0, 3), (1, 2), (3, 5), (5, 6)] and found[0, 3] == pytest.approx(0.9)


# ---- clustering ------------------------------------------------------------------------------------------------


def test_the_ranker_never_puts_crossing_mentions_in_one_entity(tmp_path):
    linking = MentionRanker(np.ones(1 << HASH_BITS, dtype=np.float32))  # every arc beats "new entity"
    tokens = "Anna saw her old brother and the brother saw her".split()
    plain = Document("d", tokens, mentions=[Mention(0, 1, 1), Mention(2, 3, 2), Mention(9, 10, 3)])
    assert len(linking.predict(plain).entities()) == 1
    # (3, 5) joins Anna; (4, 7) crosses (3, 5), so it may join neither (3, 5) nor Anna, who holds (3, 5)
    mentions = [Mention(0, 1, 1), Mention(3, 5, 2), Mention(4, 7, 3), Mention(7, 8, 4), Mention(9, 10, 5)]
    document = Document("d", tokens, mentions=mentions)
    assert linking.best_antecedents(document)[:3] == [ROOT, 1, ROOT]
    predicted = linking.predict(document)
    assert len(predicted.entities()) >= 2 and entities_with_crossing_mentions(predicted) == []
    write_conll([predicted], tmp_path / "predicted.conll")


def test_given_crossing_mentions_are_clustered_apart_and_written(tmp_path):
    text = "My dear Miss Fairfax, young ladies are very sure to be cared for."
    tokenized = tokenize(text)
    starts = {token: tokenized.offsets[number][0] for number, token in enumerate(tokenized.tokens)}
    dear, miss = (starts["My"], tokenized.offsets[3][1]), (starts["Miss"], tokenized.offsets[6][1])
    document = resolve(text, mentions=[dear, miss])
    assert len(document.mentions) == 2 and entities_with_crossing_mentions(document) == []
    write_outputs([document], [tokenized], tmp_path / "out.conll", tmp_path / "out.json")
    assert read_conll(tmp_path / "out.conll", strict=True)[0][0].partition() == document.partition()


# ---- writers that fail -----------------------------------------------------------------------------------------


def _crossing_in_one_entity() -> tuple[Document, None]:
    return Document("story", "a b c d".split(), mentions=[Mention(0, 2, 1), Mention(1, 3, 1)]), None


def test_a_conll_that_cannot_be_written_leaves_the_json_and_names_it(tmp_path, monkeypatch):
    document, tokenized = _crossing_in_one_entity()
    conll, clusters = tmp_path / "out.conll", tmp_path / "out.json"
    with pytest.raises(ValueError) as error:
        write_outputs([document], [tokenized], conll, clusters)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{conll}: the CoNLL was not written")
    assert "cross" in message and message.endswith(f"the clusters are in {clusters}")
    assert not conll.exists() and json.loads(clusters.read_text()) == clusters_json([document], [tokenized])
    with pytest.raises(ValueError, match=re.escape(f"the clusters are in {conll}.json")):  # none asked: beside
        write_outputs([document], [tokenized], conll)
    assert json.loads(Path(f"{conll}.json").read_text()) == clusters_json([document], [tokenized])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"^stdout: .* the clusters are in {re.escape(RESCUED_JSON)}$"):
        write_outputs([document], [tokenized], "-")
    assert (tmp_path / RESCUED_JSON).is_file() and sorted(path.name for path in tmp_path.iterdir()) == [
        "out.conll.json", "out.json", RESCUED_JSON]  # and no partial file left


def test_the_command_writes_the_json_when_the_conll_fails(tmp_path, monkeypatch, capsys):
    document, _ = _crossing_in_one_entity()
    monkeypatch.setattr(CorefPipeline, "load", classmethod(lambda cls, detector=None, resolver=None: cls(None, None)))
    monkeypatch.setattr(CorefPipeline, "resolve_documents", lambda self, documents, mentions, singletons: [
        document.replace(tokens=documents[0].tokens)])
    conll, clusters = tmp_path / "out.conll", tmp_path / "out.json"
    assert main(["--text", "a b c d", "--out", str(conll), "--json", str(clusters)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"error: {conll}: the CoNLL was not written")
    assert error.rstrip().endswith(f"the clusters are in {clusters}")
    assert not conll.exists() and json.loads(clusters.read_text())["documents"][0]["clusters"][0][1]["text"] == "b c"


# ---- real text --------------------------------------------------------------------------------------------------


def test_the_emma_excerpt_resolves_through_the_command(emma, tmp_path, capsys):
    conll, clusters = tmp_path / "emma.conll", tmp_path / "emma.json"
    assert main(["--file", str(emma), "--out", str(conll), "--json", str(clusters)]) == 0
    assert "Miss Fairfax" in capsys.readouterr().out
    written = read_conll(conll, strict=True)[0][0]
    assert crossing_pairs(written.mentions) == []
    entities = json.loads(clusters.read_text())["documents"][0]["clusters"]
    assert sum(len(entity) for entity in entities) == len(written.mentions)


def test_the_emma_excerpt_resolves_through_the_api(emma, tmp_path):
    text = emma.read_text(encoding="utf-8")
    document = resolve(text)
    spans = {" ".join(document.tokens[m.start:m.end]) for m in document.mentions}
    assert not {"My dear Miss Fairfax", "Miss Fairfax , young ladies"} <= spans  # the two spans that crossed
    assert crossing_pairs(document.mentions) == []
    write_conll([document], tmp_path / "emma.conll")
    (tmp_path / "emma.json").write_text(json.dumps(clusters_json([document], [tokenize(text)])))
    assert read_conll(tmp_path / "emma.conll", strict=True)[0][0].partition() == document.partition()


def test_a_novel_of_litbank_documents_joined_end_to_end_has_no_crossing_mentions(litbank_dir, tmp_path):
    text = joined_text("litbank", "test", litbank_dir.parent, words=4000)
    document = resolve(text)
    assert len(document.mentions) > 400 and entities_with_crossing_mentions(document) == []
    assert crossing_pairs(document.mentions) == []  # the detector's own spans do not cross either
    write_conll([document], tmp_path / "joined.conll")
