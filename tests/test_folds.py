"""Cross-fitting: every document of a split in exactly one fold, whatever the order it is read in; the detector
and the resolver trained with a fold held out record it; and the coref wake given K such pipelines labels each train
document with the mentions of the pipeline that never saw it."""

from __future__ import annotations

import argparse
import json

import pytest

from coref.corpora.folds import Fold
from coref.corpora.registry import load_corpus
from coref.resolution.mentions import MentionDetector
from coref.resolution.pipeline import CorefPipeline
from coref.resolution.ranker import MentionRanker
from inference.algorithms.refine import (
    cross_fit_mention_documents,
    cross_fit_pipelines,
    pipeline_mention_documents,
)
from inference.commands import mentions, refine, resolver
from inference.data import prepared_documents
from inference.training.checkpoint import Checkpoint, pretrained


@pytest.mark.parametrize("count", [2, 3])
def test_each_document_lies_in_one_fold_whatever_the_order(count):
    documents = load_corpus("sample", "train", None).documents
    folds = [Fold(index, count) for index in range(count)]
    assert all(sum(fold.holds(document) for fold in folds) == 1 for document in documents)
    for fold in folds:
        outside = fold.outside(documents)
        assert [d.key for d in fold.outside(documents[::-1])] == [d.key for d in outside[::-1]]
        assert {d.key for d in outside} == {d.key for d in documents if not fold.holds(d)}
    assert 0 < len(folds[0].outside(documents)) < len(documents)  # the sample's folds are not empty


@pytest.mark.parametrize("text", ["2/2", "1", "a/b", "0/1", "-1/2"])
def test_a_bad_fold_is_refused_while_parsing(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected F/K"):
        Fold.parse(text)


@pytest.fixture(scope="module")
def fold_models(tmp_path_factory):
    """A detector and a resolver on its mentions for each fold F/2 of the sample's train split, by the commands."""
    root = tmp_path_factory.mktemp("folds")
    models = []
    for index in range(2):
        detector, ranker = root / f"detector{index}.pt", root / f"resolver{index}.pt"
        assert mentions.main(["train", "--corpus", "sample", "--epochs", "1", "--hidden-size", "8", "--layers", "1",
                              "--held-out-fold", f"{index}/2", "--out", str(detector)]) == 0
        assert resolver.main(["train", "--corpus", "sample", "--epochs", "1", "--detector", str(detector),
                              "--held-out-fold", f"{index}/2", "--out", str(ranker)]) == 0
        models.append((str(detector), str(ranker)))
    return models


def test_the_models_of_a_fold_are_trained_without_it_and_say_so(fold_models, capsys, tmp_path):
    held_out = sum(Fold(0, 2).holds(d) for d in load_corpus("sample", "train", None).documents)
    assert mentions.main(["train", "--corpus", "sample", "--epochs", "1", "--hidden-size", "8", "--layers", "1",
                          "--held-out-fold", "0/2", "--out", str(tmp_path / "d.pt")]) == 0
    assert f"sample: {6 - held_out} training documents (fold 0/2 held out)" in capsys.readouterr().out
    for index, (detector, ranker) in enumerate(fold_models):
        assert MentionDetector.load(detector).info["held_out_fold"] == f"{index}/2"
        assert MentionRanker.load(ranker).settings["held_out_fold"] == f"{index}/2"
    detector = fold_models[0][0]
    argv = ["train", "--corpus", "sample", "--epochs", "1", "--detector", detector, "--held-out-fold", "1/2",
            "--out", str(tmp_path / "r.pt")]
    assert resolver.main(argv) != 0
    assert f"{detector} was trained with fold 0/2 held out, not 1/2" in capsys.readouterr().err


def test_cross_fit_pipelines_pair_each_fold_once(fold_models):
    (detector0, resolver0), (detector1, resolver1) = fold_models
    pipelines = cross_fit_pipelines([detector1, detector0], [resolver1, resolver0])
    assert {str(fold) for fold in pipelines} == {"0/2", "1/2"}
    with pytest.raises(ValueError, match="trained with different folds held out"):
        cross_fit_pipelines([detector0, detector1], [resolver1, resolver0])
    with pytest.raises(ValueError, match="must hold out the folds 0/2, 1/2, one pair each"):
        cross_fit_pipelines([detector0, detector0], [resolver0, resolver0])


def test_each_train_document_gets_the_mentions_of_the_pipeline_of_its_fold():
    checkpoint = Checkpoint.load(pretrained("entitynlm.pt"))
    documents = prepared_documents("sample", "train", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    bundled = CorefPipeline.load()
    stricter = CorefPipeline(bundled.detector, MentionRanker(bundled.ranker.weights,
                                                             {**bundled.ranker.settings, "mention_threshold": 0.9}))
    pipelines = {Fold(0, 2): bundled, Fold(1, 2): stricter}
    labelled = cross_fit_mention_documents(pipelines, "sample", "train", None, documents, checkpoint.preprocess)
    assert [pair[0].key for pair in labelled] == [d.key for d in documents]
    alone = {fold: pipeline_mention_documents(pipeline, "sample", "train", None, documents, checkpoint.preprocess)
             for fold, pipeline in pipelines.items()}
    for position, pair in enumerate(labelled):
        fold = next(fold for fold in pipelines if fold.holds(pair[0]))
        assert pair == alone[fold][position]  # the gold's entities and the pipeline's, of its fold's mentions
    assert any(a != b for a, b in zip(*alone.values()))  # the two pipelines differ somewhere


def test_the_refine_command_trains_on_cross_fit_mentions(fold_models, tmp_path, capsys):
    (detector0, resolver0), (detector1, resolver1) = fold_models
    out = tmp_path / "cross-fit.pt"
    argv = ["--checkpoint", str(pretrained("entitynlm.pt")), "--wake", "coref", "--coref-mentions", "pipeline",
            "--coref-objective", "local", "--cross-fit-detectors", detector0, detector1,
            "--cross-fit-resolvers", resolver0, resolver1, "--steps", "1", "--eval-every", "1", "--eval-pieces", "2",
            "--particles", "2", "--out", str(out), "--device", "cpu"]
    assert refine.main(argv) == 0
    options = Checkpoint.load(out).training["refinement"]["args"]
    assert list(options["cross_fit_detectors"]) == [detector0, detector1]
    assert set(json.loads(capsys.readouterr().out)["pipeline_mentions"]) == {"train", "dev"}
