"""The entity-prediction protocol (paper §5.3): slots, the shallow baseline, EntityNLM's left-context-only
predictions, and the command on the embedded sample corpus."""

from __future__ import annotations

import json

import pytest
import torch

from coref.corpora.preprocess import PreprocessConfig, Vocabulary, preprocess_documents
from coref.corpora.registry import load_corpus
from coref.document import Document, Mention
from generative.entitynlm.model import EntityNLM, EntityNLMConfig
from inference.commands import entity_prediction as entity_prediction_command
from inference.commands import train
from inference.evaluation import entity_prediction
from inference.evaluation.entity_prediction import (
    NEW,
    EntityScores,
    ShallowClassifier,
    Slot,
    entitynlm_scores,
    slots,
    tune_new_bias,
)

# five one-word sentences... with entities 1 2 1 3 1 2 over six sentences
STORY = Document(
    "bath_001",
    ["a", "b", "a", "c", "a", "b"],
    [(i, i + 1) for i in range(6)],
    [Mention(0, 1, 1), Mention(1, 2, 2), Mention(2, 3, 1), Mention(3, 4, 3), Mention(4, 5, 1), Mention(5, 6, 2)],
)


def test_slots_start_after_three_sentences_and_are_capped():
    found = slots(STORY, skip_sentences=3, max_slots=2)
    assert [(slot.token, slot.gold) for slot in found] == [(3, NEW), (4, 1)]
    assert found[1].known == (1, 2, 3) and found[1].last_token == (2, 1, 3) and found[1].count == (2, 1, 1)
    assert len(slots(STORY, 0, None)) == 6 and slots(STORY, 0, None)[0].gold == NEW


def test_shallow_classifier_learns_that_the_most_recent_entity_comes_back():
    def recent_slot(known: int, token: int) -> Slot:
        last = tuple(range(token - known, token))
        return Slot("d", token, known - 1, tuple(range(known)), last, last, (1,) * known, token)

    training = [recent_slot(known, 10 + known) for known in range(1, 6)] * 5
    classifier = ShallowClassifier.fit(training)
    assert all(classifier.predict(slot) == slot.gold for slot in training)
    new_only = [Slot("d", 5, NEW, (0, 1), (1, 2), (1, 2), (1, 1), 5)] * 4 + training[:1]
    assert ShallowClassifier.fit(new_only).predict(new_only[0]) == NEW


def truncated(document: Document, end: int) -> Document:
    """The document's first ``end`` tokens (a mention running past them is cut)."""
    sentences = [(s, min(e, end)) for s, e in document.sentences if s < end]
    mentions = [Mention(m.start, min(m.end, end), m.entity) for m in document.mentions if m.start < end]
    return Document(document.id, document.tokens[:end], sentences, mentions)


def test_entitynlm_predictions_see_only_the_left_context():
    documents, _ = preprocess_documents(load_corpus("sample", "dev").documents, PreprocessConfig(drop_singletons=False))
    vocabulary = Vocabulary.build(documents)
    torch.manual_seed(0)
    config = EntityNLMConfig(vocab_size=len(vocabulary), embedding_size=8, hidden_size=8, dropout=0.0,
                             softmax="full", new_entity_scale=0.0)
    model = EntityNLM(config, list(vocabulary.counts)).eval()
    with torch.no_grad():  # known entities favoured by distance, so that the predictions vary
        model.heads.entity.bilinear.weight.normal_(0.0, 3.0)
        model.heads.entity.distance_weights.fill_(1.0)
    document = documents[0]
    found = slots(document, 1, 6)
    full = entitynlm_scores(model, [document], {document.id: found}, vocabulary, torch.device("cpu"))
    assert len(full) == len(found) and len({score.prediction() for score in full.values()}) > 1  # not constant
    for slot in found:
        alone = truncated(document, slot.token + 1)
        (left,) = entitynlm_scores(model, [alone], {document.id: [slot]}, vocabulary, torch.device("cpu")).values()
        assert left.best_known == full[document.id, slot.token].best_known
        assert left.new_margin == pytest.approx(full[document.id, slot.token].new_margin, abs=1e-5)


def test_mcnemar_counts_only_the_slots_one_predictor_gets_right():
    found = [Slot("d", t, 1, (1, 2), (0, 0), (0, 0), (1, 1), 1) for t in range(12)]
    always_right = {("d", t): 1 for t in range(12)}
    always_wrong = {("d", t): 2 for t in range(12)}
    assert entity_prediction.mcnemar_p(found, always_right, always_wrong) == pytest.approx(2 * 0.5**12)
    assert entity_prediction.mcnemar_p(found, always_right, always_right) == 1.0


def test_the_new_entity_bias_moves_predictions_towards_new_and_is_tuned_on_dev():
    unsure = EntityScores(best_known=7, new_margin=-0.6)
    assert unsure.prediction() == 7 and unsure.prediction(1.0) == NEW
    assert EntityScores(None, float("inf")).prediction(-100.0) == NEW
    dev = [Slot("d", t, NEW if t < 3 else 7, (7,), (0,), (0,), (1,), 1) for t in range(1, 5)]
    scores = {("d", t): EntityScores(7, -0.6 if t < 3 else -2.0) for t in range(1, 5)}
    bias, curve = tune_new_bias(dev, scores)
    assert bias == 0.75 and curve[bias] == 1.0 and curve[0.0] == 0.5


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    common = ["--model", "entitynlm", "--corpus", "sample", "--epochs", "1", "--embedding-size", "16",
              "--hidden-size", "16", "--batch-tokens", "1000", "--device", "cpu"]
    assert train.main([*common, "--keep-singletons", "--out", str(root / "with")]) == 0
    assert train.main([*common, "--out", str(root / "without")]) == 0
    return root / "with" / "model.pt", root / "without" / "model.pt"


def test_the_command_reports_every_predictor(tiny_models, tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = ["--checkpoint", str(tiny_models[0]), "--corpus", "sample", "--device", "cpu", "--json", str(out)]
    assert entity_prediction_command.main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result["accuracy"]) == {"always-new", "shallow features", "EntityNLM",
                                       "EntityNLM, new-entity bias tuned on dev"}
    documents, _ = preprocess_documents(load_corpus("sample", "test").documents,
                                        PreprocessConfig(drop_singletons=False))
    assert result["slots"] == sum(len(slots(document)) for document in documents)
    assert result["accuracy"]["always-new"]["all"] == pytest.approx(100 * result["new_slots"] / result["slots"])
    assert all(0 <= row["all"] <= 100 for row in result["accuracy"].values())
    assert 0 < result["p_entitynlm_vs_shallow"] <= 1
    assert "EntityNLM" in capsys.readouterr().out


def test_a_model_trained_without_singletons_is_refused(tiny_models, capsys):
    argv = ["--checkpoint", str(tiny_models[1]), "--corpus", "sample", "--device", "cpu"]
    assert entity_prediction_command.main(argv) == 2
    assert "--keep-singletons" in capsys.readouterr().err


def test_the_inscript_test_split_has_the_protocol_s_slots(data_dir):
    if not (data_dir / "inscript").is_dir():
        pytest.skip(f"corpus 'inscript' unavailable: {data_dir / 'inscript'} does not exist")
    documents, _ = preprocess_documents(load_corpus("inscript", "test", data_dir).documents,
                                        PreprocessConfig(drop_singletons=False))
    found = [slots(document) for document in documents]
    assert len(documents) == 182 and sum(map(len, found)) == 5_418
    assert max(map(len, found)) == 30 and sum(len(story) == 30 for story in found) == 169
