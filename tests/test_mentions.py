"""The mention detector (coref.resolution.mentions): its span grid, training on a toy corpus, batching, files, scores
and
the lowercase mode.

Everything runs on tiny hand-made documents on the CPU in seconds; only the max-width coverage check reads the
real LitBank (skipped, with the reason, without ENTITYLM_DATA).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from coref.corpora.registry import load_corpus
from coref.document import Document, Mention
from coref.resolution.mentions import (
    ALL_CAPS,
    CAPITALISED,
    SHAPES,
    MentionDetector,
    MentionDetectorConfig,
    MentionModelError,
    choose_max_width,
    mention_scores,
    span_grid,
    width_coverage,
    word_shape,
)
from coref.resolution.pipeline import BUNDLED
from coref.resolution.ranker import lowercased
from inference.commands.mentions import main

NAMES = ["Anna", "Tom", "Mary", "John", "Lucy", "Peter", "Emma", "Paul"]
PRONOUNS = ["she", "he", "they", "it"]
VERBS = ["met", "saw", "called", "helped", "found", "thanked"]
FILLER = ["yesterday", "again", "quickly", "today", "at", "noon", "in", "the", "park"]


def toy_document(rng: random.Random, number: int, sentences: int) -> Document:
    """Sentences like "Anna met Mr Tom again ." and "she saw him today .": names (some with a title) and subject
    pronouns are the mentions."""
    tokens: list[str] = []
    bounds, mentions = [], []

    def mention(words: list[str]) -> None:
        mentions.append(Mention(len(tokens), len(tokens) + len(words), len(mentions)))
        tokens.extend(words)

    for _ in range(sentences):
        start = len(tokens)
        subject = rng.choice(NAMES)
        if rng.random() < 0.5:
            mention([rng.choice(PRONOUNS).capitalize()])
        else:
            mention([subject])
        tokens.append(rng.choice(VERBS))
        mention(["Mr", rng.choice(NAMES)] if rng.random() < 0.3 else [rng.choice(NAMES)])
        tokens.extend(rng.sample(FILLER, rng.randint(0, 3)))
        tokens.append(".")
        bounds.append((start, len(tokens)))
    return Document(f"toy{number}", tokens, bounds, mentions)


TINY = MentionDetectorConfig(embedding_size=16, shape_size=4, suffix_buckets=50, suffix_size=4, hidden_size=16,
                             layers=1, width_size=4, mlp_size=16, max_width=3, dropout=0.1)


@pytest.fixture(scope="module")
def toy() -> tuple[list[Document], list[Document]]:
    rng = random.Random(0)
    return [toy_document(rng, n, 12) for n in range(8)], [toy_document(rng, 100 + n, 8) for n in range(3)]


@pytest.fixture(scope="module")
def trained(toy) -> MentionDetector:
    from inference.training.resolution import train_detector

    train, dev = toy
    return train_detector(train, dev, TINY, epochs=15, seed=1, progress=False, batch_tokens=200,
                          learning_rate=1e-2)


def test_span_grid_enumerates_exactly_the_spans_up_to_the_max_width_inside_each_sentence():
    lengths, width = [3, 1, 5, 2], 2
    mask = span_grid(torch.tensor(lengths), max(lengths), width)
    assert mask.shape == (4, 5, 2)
    found = {(n, i, i + w + 1) for n, i, w in mask.nonzero().tolist()}
    expected = {(n, i, j) for n, size in enumerate(lengths) for i in range(size) for j in range(i + 1, size + 1)
                if j - i <= width}
    assert found == expected


def test_word_shapes():
    assert [word_shape(t) for t in ["Anna", "NASA", "I", "1984", ",", "the", "--"]] == [1, 2, 1, 3, 4, 5, 4]


def test_training_loss_falls_and_the_toy_mentions_are_found(trained, toy):
    history = trained.info["history"]
    assert history[-1]["loss"] < 0.5 * history[0]["loss"]
    train, dev = toy
    for documents in (train, dev):
        scores = mention_scores(documents, trained.predict(documents))
        assert scores["f1"] >= 0.95, scores
    assert 0.0 < trained.config.threshold < 1.0
    assert trained.info["max_width_coverage"] == 1.0


def test_predicting_documents_together_equals_predicting_each_alone(trained, toy):
    documents = [toy[1][0], toy_document(random.Random(5), 7, 1), toy[0][3]]  # different lengths
    together = trained.predict(documents, batch_tokens=10_000)
    alone = [trained.predict([document], batch_tokens=10_000)[0] for document in documents]
    assert together == alone
    assert trained.predict(documents, batch_tokens=5) == together  # one sentence a batch
    for spans, document in zip(together, documents):
        assert spans == sorted(spans)
        assert all(0 <= start < end <= len(document.tokens) for start, end in spans)
    _, _, _, joint = trained.candidate_logits(documents)
    separate = torch.cat([torch.from_numpy(trained.candidate_logits([d])[3]) for d in documents])
    assert sorted(joint.tolist()) == pytest.approx(sorted(separate.tolist()), abs=1e-5)


def test_save_and_load_give_identical_predictions(trained, toy, tmp_path):
    path = tmp_path / "detector.pt"
    trained.save(path)
    loaded = MentionDetector.load(path)
    assert loaded.config == trained.config and loaded.vocabulary == trained.vocabulary
    assert loaded.info == trained.info
    documents = [*toy[0], *toy[1]]
    assert loaded.predict(documents) == trained.predict(documents)


def test_mention_scores_by_hand():
    gold = [
        Document("a", "Anna met her brother .".split(), mentions=[Mention(0, 1, 1), Mention(2, 3, 1),
                                                                   Mention(2, 4, 2), Mention(2, 4, 2)]),
        Document("b", "He left".split(), mentions=[Mention(0, 1, 1)]),
    ]
    # gold: a {(0,1), (2,3), (2,4)} + b {(0,1)} = 4 distinct; predicted: a {(0,1), (2,4), (3,4)} + b {(0,1), (1,2)}
    predicted = [[(0, 1), (2, 4), (3, 4), (0, 1)], [(0, 1), (1, 2)]]
    scores = mention_scores(gold, predicted)
    assert (scores["gold"], scores["predicted"], scores["correct"], scores["documents"]) == (4, 5, 3, 2)
    assert scores["precision"] == pytest.approx(3 / 5)
    assert scores["recall"] == pytest.approx(3 / 4)
    assert scores["f1"] == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    assert mention_scores(gold, [[], []])["f1"] == 0.0
    with pytest.raises(ValueError, match="2 gold documents but predictions for 1"):
        mention_scores(gold, [[]])


def test_loading_a_file_that_is_not_a_detector_names_it(tmp_path):
    other = tmp_path / "other.pt"
    torch.save({"format": 1, "weights": {}}, other)
    with pytest.raises(MentionModelError, match=f"{other}: not a mention detector"):
        MentionDetector.load(other)
    noise = tmp_path / "noise.pt"
    noise.write_bytes(random.Random(0).randbytes(1000))
    with pytest.raises(MentionModelError, match=f"{noise}: not a mention detector"):
        MentionDetector.load(noise)
    with pytest.raises(MentionModelError, match="no such mention detector file"):
        MentionDetector.load(tmp_path / "absent.pt")


def test_max_width_choice_on_hand_made_widths():
    document = Document("w", ["x"] * 10, mentions=[Mention(0, 1, 1)] * 3 + [Mention(1, 2, 1), Mention(0, 4, 2)])
    # distinct spans: widths 1, 1, 4
    assert choose_max_width([document], 0.6) == 1
    assert choose_max_width([document], 0.99) == 4
    assert width_coverage([document], 1) == pytest.approx(2 / 3)


def test_command_line_trains_and_evaluates_on_the_sample_corpus(tmp_path, capsys):
    model, result = tmp_path / "m.pt", tmp_path / "dev.json"
    assert main(["train", "--corpus", "sample", "--epochs", "1", "--hidden-size", "8", "--layers", "1",
                 "--out", str(model)]) == 0
    assert main(["evaluate", "--model", str(model), "--corpus", "sample", "--split", "dev",
                 "--json", str(result)]) == 0
    assert "sample/dev: mention precision" in capsys.readouterr().out
    scores = json.loads(result.read_text())
    assert scores["documents"] == 2 and scores["gold"] > 0 and scores["training"]["epochs"] == 1


def test_max_width_covers_99_percent_of_litbank_training_mentions(litbank_dir):
    train = load_corpus("litbank", "train", litbank_dir.parent).documents
    width = choose_max_width(train, 0.99)
    assert width_coverage(train, width) >= 0.99
    assert width_coverage(train, width - 1) < 0.99  # the smallest such width


def test_a_lowercase_detector_records_it_and_reads_cased_text_as_its_lowercased_copy(tmp_path, capsys):
    model, result = tmp_path / "lower.pt", tmp_path / "dev.json"
    assert main(["train", "--corpus", "sample", "--epochs", "2", "--hidden-size", "8", "--layers", "1",
                 "--lowercase", "--out", str(model)]) == 0
    assert "tokens lowercased" in capsys.readouterr().out
    assert main(["evaluate", "--model", str(model), "--corpus", "sample", "--split", "dev",
                 "--json", str(result)]) == 0
    assert json.loads(result.read_text())["lowercase"] is True
    detector = MentionDetector.load(model)
    assert detector.config.lowercase
    cased = load_corpus("sample", "dev").documents
    lower = [lowercased(document) for document in cased]
    assert [d.tokens for d in lower] != [d.tokens for d in cased]
    shapes = np.concatenate(detector._sentences(cased).shapes)
    assert not np.isin(shapes, [CAPITALISED, ALL_CAPS]).any() and shapes.max() < SHAPES
    np.testing.assert_array_equal(detector.candidate_logits(cased)[3], detector.candidate_logits(lower)[3])
    found = detector.predict(cased)
    assert found == detector.predict(lower) and any(found)


def test_a_detector_saved_before_the_lowercase_setting_loads_as_cased(trained, toy, tmp_path):
    assert not MentionDetector.load(BUNDLED["detector"]).config.lowercase  # saved before the setting existed
    path = tmp_path / "old.pt"
    trained.save(path)
    payload = torch.load(path, weights_only=True)
    del payload["config"]["lowercase"]
    torch.save(payload, path)
    old = MentionDetector.load(path)
    assert not old.config.lowercase and old.config == trained.config
    documents = [*toy[0], *toy[1]]
    assert old.predict(documents) == trained.predict(documents)
    assert old.predict([lowercased(d) for d in documents]) != old.predict(documents)  # the case is read
