"""One checkpoint format: :func:`coref.io.checkpoint.load` reads it and every older format, converted on reading.

``tests/fixtures/checkpoints/`` holds one small checkpoint of each older format, trained with the code of the
commit before the format was unified (fb12ef2), and one run's folder (``entitynlm_run``: model.pt and last.pt
after one epoch); the numbers below are what that code computed for the same small inputs, so a converted
checkpoint must give a model that predicts exactly the same, and a resumed old run must go on as it did.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from coref.corpora.registry import load_corpus
from coref.io.checkpoint import FORMAT, VERSION, Checkpoint, CheckpointError, load
from coref.resolution.mentions import MentionDetector, without_crossing
from coref.resolution.pos import PosTagger
from coref.resolution.ranker import MentionRanker
from generative.coref_gru import ReadingExample, make_reading_batch
from generative.dntm import ContextEncoder
from generative.layers.batch import batches_by_length, token_stream
from generative.mneme import MnemeExample, make_batch
from inference.commands import train
from inference.data import language_model_documents
from inference.training.checkpoint import Checkpoint as LanguageModelCheckpoint
from inference.training.checkpoint import entitynlm_modules, ngram_model
from inference.training.context_encoder import read_context_encoder
from inference.training.coref_gru import load_reader
from inference.training.mneme import load_story_lm

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"
OLD_FORMATS = {  # fixture -> (its kind, the format tag it was written with)
    "entitynlm.pt": ("entitynlm", 1),
    "ngram.pt": ("ngram", 1),
    "reader.pt": ("ga_gru", "entitylm-reader-1"),
    "story_lm.pt": ("d_mneme", "entitylm-story-lm-1"),
    "context_encoder.pt": ("context_encoder", "entitylm-context-encoder/1"),
    "mention_detector.pt": ("mention_detector", "entitylm-mention-detector"),
    "pos_tagger.pt": ("pos_tagger", "entitylm-pos-tagger"),
    "mention_ranker.npz": ("mention_ranker", "entitylm-mention-ranker"),
}


@pytest.fixture(scope="module")
def sample_dev():
    return load_corpus("sample", "dev", None).documents


@pytest.mark.parametrize("name", OLD_FORMATS)
def test_every_older_format_loads_and_saves_again_unchanged(name, tmp_path):
    checkpoint = load(FIXTURES / name)
    assert (checkpoint.kind, checkpoint.version) == (OLD_FORMATS[name][0], 1)
    checkpoint.save(tmp_path / "again.pt")
    again = load(tmp_path / "again.pt")
    assert again.version == VERSION and torch.load(tmp_path / "again.pt", weights_only=True)["format"] == FORMAT
    assert (again.kind, again.config, again.vocabulary, again.data) == (
        checkpoint.kind, checkpoint.config, checkpoint.vocabulary, checkpoint.data)
    for key, weights in checkpoint.weights.items():
        for parameter, tensor in (weights.items() if isinstance(weights, dict) else [(key, weights)]):
            if isinstance(tensor, torch.Tensor):
                stored = again.weights[key][parameter] if isinstance(weights, dict) else again.weights[key]
                assert torch.equal(stored, tensor), (key, parameter)


def test_the_older_detector_tagger_and_ranker_predict_as_before(sample_dev):
    detector = MentionDetector.load(FIXTURES / "mention_detector.pt")
    _, start, end, logits = detector.candidate_logits(sample_dev[:1])
    probabilities = 1 / (1 + np.exp(-logits))
    scored = {(first, stop): probability for first, stop, probability
              in zip(start.tolist(), end.tolist(), probabilities.tolist()) if probability >= detector.config.threshold}
    spans = sorted(scored)
    assert len(spans) == 264 and [list(span) for span in spans[:8]] == [
        [0, 1], [0, 3], [0, 4], [0, 5], [0, 6], [1, 4], [1, 5], [1, 6]]
    assert detector.predict(sample_dev[:1])[0] == sorted(without_crossing(scored))  # the more probable of crossing
    tagger = PosTagger.load(FIXTURES / "pos_tagger.pt")
    assert tagger.tag(sample_dev[:1])[0][:24] == [
        "NOUN", "NOUN", "DET", "NOUN", "ADP", "NOUN", "ADP", "DET", "DET", "NOUN", "PUNCT", "PRON", "AUX", "NOUN",
        "ADP", "ADP", "DET", "NOUN", "ADP", "PUNCT", "PUNCT", "CCONJ", "PRON", "NOUN"]
    ranker = MentionRanker.load(FIXTURES / "mention_ranker.npz")
    table = ranker.arc_scores(sample_dev[0])[1:9, :9]
    expected = [[0.0], [0.0, -48.488889], [0.0, 5.822222, 11.933333], [0.0, 154.41111, 156.277777, 112.844444],
                [0.0, 131.299999, 160.422222, 134.966666, 30.255555],
                [0.0, -33.911111, -18.188888, 73.022223, -99.155554, -105.755554],
                [0.0, 41.71111, 64.177777, 181.744444, -53.444444, -49.188889, 192.588889],
                [0.0, 129.788888, 149.822222, 118.444444, 36.244444, 57.211111, 142.633333, 88.8]]
    for row, values in zip(table, expected):
        np.testing.assert_allclose(row[np.isfinite(row)], values, atol=1e-5)


def test_anything_else_is_one_line_naming_the_file(tmp_path):
    noise = tmp_path / "noise.pt"
    noise.write_bytes(random.Random(0).randbytes(1000))
    tagless = tmp_path / "tagless.pt"
    torch.save({"weights": {}}, tagless)
    for path, says in [(noise, "not an entitylm checkpoint: truncated"),
                       (tagless, "not an entitylm checkpoint \\(no entitylm format tag\\)"),
                       (tmp_path / "absent.pt", "no such checkpoint file")]:
        with pytest.raises(CheckpointError, match=f"{path}: {says}") as error:
            load(path)
        assert "\n" not in str(error.value)
    with pytest.raises(CheckpointError, match="ngram.pt: not a mention detector \\(a ngram checkpoint\\)"):
        load(FIXTURES / "ngram.pt", "mention detector", {"mention_detector"})


def test_half_precision_is_stored_half_and_read_back_as_float32(tmp_path):
    weights = {"model": {"w": torch.tensor([0.1, 0.2]), "steps": torch.tensor([3])}}
    Checkpoint("mention_detector", {}, {}, weights).save(tmp_path / "half.pt", half=True)
    assert torch.load(tmp_path / "half.pt", weights_only=True)["weights"]["model"]["w"].dtype == torch.float16
    read = load(tmp_path / "half.pt").weights["model"]
    assert read["w"].dtype == torch.float32 and torch.equal(read["w"], weights["model"]["w"].half().float())
    assert torch.equal(read["steps"], weights["model"]["steps"])


def test_the_older_language_models_reader_story_lm_and_encoder_compute_as_before(sample_dev):
    checkpoint = LanguageModelCheckpoint.load(FIXTURES / "entitynlm.pt")
    model, guide = entitynlm_modules(checkpoint)
    documents = language_model_documents("entity", "sample", "dev", None, checkpoint.preprocess,
                                         checkpoint.vocabulary, quiet=True)
    batch = batches_by_length(documents[:2], checkpoint.vocabulary, 10**6)[0]
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(0)
        assert [float(model.log_likelihood(batch).sum()), float(guide.log_likelihood(batch).sum())] == pytest.approx(
            [-657.0042114257812, -218.91952514648438], rel=1e-6)

    checkpoint = LanguageModelCheckpoint.load(FIXTURES / "ngram.pt")
    documents = language_model_documents("entity", "sample", "dev", None, checkpoint.preprocess,
                                         checkpoint.vocabulary, quiet=True)
    streams = [token_stream(document, checkpoint.vocabulary).words for document in documents]
    assert ngram_model(checkpoint).perplexity(streams) == pytest.approx(7.904649244872899, rel=1e-9)

    reader, _ = load_reader(FIXTURES / "reader.pt")
    example = ReadingExample(document=[3, 4, 5, 6, 7, 8, 4], query=[5, 6], answer=4, clusters=[[(0, 1), (6, 7)]])
    with torch.no_grad():
        logits = reader.answer_logits(make_reading_batch([example], reader.config.max_chains))[0][3:9]
    assert logits.tolist() == pytest.approx([-2.0116753578186035, -1.264737606048584, -1.946489930152893,
                                             -1.9288371801376343, -1.9184030294418335, -1.9038788080215454], rel=1e-6)

    story_lm, checkpoint = load_story_lm(FIXTURES / "story_lm.pt")
    story = MnemeExample(prompt=[5, 6, 7], prompt_entity=[0, -1, 1],
                         story=[8, 9, 10, 5, 11, checkpoint.vocabulary.eos_id],
                         entity_labels=[(0,), (), (), (1,), (), ()],
                         mention_mask=[True, False, False, True, False, False])
    with torch.no_grad():
        loss = story_lm.loss(make_batch([story]))
    assert [float(loss.nll), float(loss.kl)] == pytest.approx([4.20933198928833, 1.099730134010315], rel=1e-6)

    payload = read_context_encoder(FIXTURES / "context_encoder.pt")
    encoder = ContextEncoder(len(payload["vocabulary"]), payload["size"])
    encoder.load_state_dict(payload["state_dict"])
    tokens = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 11, 2, 0]])
    negatives = torch.tensor([[[12, 13]] * 5, [[14, 15]] * 5])
    with torch.no_grad():
        assert float(encoder.eval().completion_loss(tokens, torch.tensor([5, 4]), negatives)) == pytest.approx(
            1.9974522590637207, rel=1e-6)


def test_a_run_of_the_older_format_resumes_as_the_old_code_went_on(tmp_path, capsys):
    """``entitynlm_run`` is the old code's folder after epoch 1 of 1 (its last.pt kept the optimiser among the
    weights); resumed for a second epoch it gives what the old code's two-epoch run gave in its second."""
    out = tmp_path / "run"
    shutil.copytree(FIXTURES / "entitynlm_run", out)
    argv = ["--model", "entitynlm", "--corpus", "sample", "--epochs", "2", "--embedding-size", "8", "--hidden-size",
            "8", "--vocab-size", "60", "--batch-tokens", "400", "--out", str(out), "--resume"]
    assert train.main(argv) == 0
    second = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert second["epoch"] == 2
    # float32 arithmetic: the same run to 1e-6 (E's scores now come from the starting rows alone, rounded another way;
    # a resume that lost the optimiser's moments is off by 4e-4)
    assert second["train_nll"] == pytest.approx({"model": 4.852189813192355, "proposal": 1.5136510402420678,
                                                 "bidirectional_proposal": 1.496840863050465}, rel=1e-6)
    assert second["dev_nll"] == pytest.approx({"model": 4.535821702745226, "proposal": 1.5132026672363281,
                                               "bidirectional_proposal": 1.4866063859727647}, rel=1e-6)
    assert load(out / "last.pt").version == VERSION
