"""Pretraining the DNTM's context encoder (``python -m inference.pretrain_context``) and loading it into a DNTM
(``inference.training.train --context-encoder``), end to end on the embedded sample corpus with tiny sizes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from coref.corpora.anonymise import ENTITY_TOKENS, anonymised_corpus, anonymised_vocabulary, first_entity_id
from coref.corpora.preprocess import Vocabulary, apply_vocabulary
from coref.io.checkpoint import load
from generative.dntm import ContextEncoder, DNTMConfig, DynamicNeuralTextModel, sentence_batch
from generative.layers.batch import make_batch
from inference.commands import pretrain_context, train
from inference.commands.cli import HelpFormatter
from inference.data import read_passages, split_sentences
from inference.training import context_encoder
from inference.training.checkpoint import Checkpoint, CheckpointError
from inference.training.context_encoder import (
    encode_sentences,
    load_context_encoder,
    pad,
    read_context_encoder,
)

SIZE = 16
TINY = ["--context-size", str(SIZE), "--batch-sentences", "8", "--eval-every", "20", "--held-out", "0.2",
        "--device", "cpu", "--seed", "0"]


@pytest.fixture(scope="module")
def sample_vocabulary() -> Vocabulary:
    return anonymised_vocabulary(anonymised_corpus("sample", "train").documents)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("context") / "sample.pt"
    assert pretrain_context.main(["--corpus", "sample", "--out", str(out), "--steps", "60", *TINY]) == 0
    return out


def one_line_error(capsys) -> str:
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error, error
    return error


def last_line_error(capsys) -> str:
    """inference.training.train reports what the reader dropped before it fails: its error is the last line."""
    error = capsys.readouterr().err
    assert "Traceback" not in error and error.endswith("\n"), error
    last = error.splitlines()[-1]
    assert last.startswith("error: "), error
    return last


# ---- the command ------------------------------------------------------------------------------------------------


def test_pretraining_lowers_the_held_out_loss_and_keeps_the_best(pretrained, sample_vocabulary):
    checkpoint = load(pretrained)
    assert checkpoint.kind == "context_encoder" and checkpoint.config == {"size": SIZE}
    assert checkpoint.training["steps"] == 60
    assert Vocabulary.from_dict(checkpoint.vocabulary) == sample_vocabulary  # train.py's ids
    options = checkpoint.training["args"]
    assert options["corpus"] == "sample" and options["max_sentence_tokens"] == 32
    assert checkpoint.weights["model"]["embedding.weight"].shape == (len(sample_vocabulary), SIZE)
    assert set(checkpoint.weights["model"]) == set(ContextEncoder(1, 1).state_dict())
    history = checkpoint.training["history"]
    assert [record["step"] for record in history] == [0, 20, 40, 60]
    assert checkpoint.training["best"]["held_out_loss"] == min(record["held_out_loss"] for record in history)
    assert checkpoint.training["best"]["held_out_loss"] < history[0]["held_out_loss"] - 0.1  # it learns
    text = checkpoint.training["text"]["sample/train"]
    assert text["sentences"] == 39 and text["sentences_dropped"] == 0


def test_the_summary_is_json_and_the_same_seed_gives_the_same_run(tmp_path, capsys):
    argv = ["--corpus", "sample", *TINY, "--steps", "4", "--eval-every", "2"]
    assert pretrain_context.main([*argv, "--out", str(tmp_path / "a.pt")]) == 0
    first = json.loads(capsys.readouterr().out)
    assert pretrain_context.main([*argv, "--out", str(tmp_path / "b.pt")]) == 0
    second = json.loads(capsys.readouterr().out)
    assert first["best"] == second["best"] and first["sentences"] == {"train": 31, "held_out": 8}
    assert first["sentences_per_second"] > 0


def test_sentences_are_read_as_the_dntm_encoder_reads_them(sample_vocabulary):
    documents = [d.replace(mentions=[]) for d in anonymised_corpus("sample", "train").originals[:2]]
    rows, stats = encode_sentences(documents, sample_vocabulary, max_tokens=1000)
    tokens, lengths = sentence_batch(make_batch(documents, sample_vocabulary))
    assert stats["sentences"] == len(lengths) and torch.equal(pad(rows)[1], lengths)
    assert torch.equal(pad(rows)[0], tokens[:, : int(lengths.max())])
    longest = max(int(length) for length in lengths) - 1  # words, without </s>
    kept, fewer = encode_sentences(documents, sample_vocabulary, max_tokens=longest - 1)
    assert fewer["sentences_dropped"] >= 1 and len(kept) == len(rows) - fewer["sentences_dropped"]


def test_passages_are_cut_into_sentences(tmp_path):
    assert split_sentences(["a", "b", ".", "''", "c", "!", "d"]) == [(0, 4), (4, 6), (6, 7)]
    path = tmp_path / "passages.txt"
    path.write_text("`` hi . '' she said , 12 cats .\n\nno end here\n", encoding="utf-8")
    first, second = read_passages(path, "lambada-dev")
    assert first.tokens[:4] == ('"', "hi", ".", '"') and first.sentences == ((0, 4), (4, 10))
    assert second.id.endswith(":3") and second.sentences == ((0, 3),)


def test_lambada_development_passages_can_be_added(tmp_path, capsys):
    (tmp_path / "lambada").mkdir()
    (tmp_path / "lambada" / "lambada_development_plain_text.txt").write_text(
        "he looked at the cake . `` nineteen , '' she said\nthe cat sat on the mat .\n", encoding="utf-8")
    out = tmp_path / "c.pt"
    argv = ["--corpus", "sample", "--extra-text", "lambada-dev", "--data-dir", str(tmp_path), "--steps", "2", *TINY]
    assert pretrain_context.main([*argv, "--out", str(out)]) == 0
    text = json.loads(capsys.readouterr().out)["text"]
    assert text["lambada-dev"] == {"documents": 2, "sentences": 3, "sentences_dropped": 0, "words": 19,
                                   "unknown_words": text["lambada-dev"]["unknown_words"]}


@pytest.mark.parametrize(("argv", "says"), [
    (["--steps", "0"], "argument --steps: must be at least 1, got 0"),
    (["--negatives", "0"], "argument --negatives: must be at least 1"),
    (["--held-out", "0.5"], "argument --held-out: must be in (0, 0.5)"),
    (["--vocab-size", "10"], "argument --vocab-size: must be at least 55"),
])
def test_impossible_numbers_are_refused_in_one_line(argv, says, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        pretrain_context.main(["--corpus", "sample", "--out", str(tmp_path / "x.pt"), *argv])
    assert stop.value.code == 2 and says in one_line_error(capsys) and not list(tmp_path.iterdir())


def test_an_unwritable_out_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as stop:
        pretrain_context.main(["--corpus", "sample", "--out", str(tmp_path / "file" / "x.pt")])
    assert stop.value.code == 2 and "cannot be written" in one_line_error(capsys)


@pytest.mark.parametrize(("argv", "says"), [
    (["--corpus", "ontogum", "--data-dir", "{tmp}"], "ontogum"),
    (["--corpus", "nope"], "unknown corpus 'nope'"),
    (["--corpus", "sample", "--extra-text", "gigaword"], "--extra-text gigaword: unknown text"),
    (["--corpus", "sample", "--extra-text", "sample"], "--extra-text sample: its training split is already"),
    (["--corpus", "sample", "--extra-text", "lambada", "--data-dir", "{tmp}"], "no training novels in"),
    (["--corpus", "sample", "--extra-text", "lambada-dev", "--data-dir", "{tmp}"], "does not exist"),
    (["--corpus", "sample", "--extra-text", "lambada-dev", "--data-dir", "{tmp}/missing"], "missing"),
    (["--corpus", "sample", "--extra-text", "lambada-dev", "--data-dir", "{binary}"], "lambada:2: not UTF-8"),
    (["--corpus", "sample", "--max-sentence-tokens", "1"], "too little text"),
    (["--corpus", "sample", "--device", "cuda:99" if torch.cuda.is_available() else "cuda"], "--device cuda"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, says, tmp_path, capsys):
    binary = tmp_path / "binary"
    (binary / "lambada").mkdir(parents=True)
    (binary / "lambada" / "lambada_development_plain_text.txt").write_bytes(b"fine .\nnot \xff utf-8\n")
    argv = [a.replace("{tmp}", str(tmp_path / "empty")).replace("{binary}", str(binary)) for a in argv]
    (tmp_path / "empty").mkdir()
    if torch.cuda.is_available() and "--device" in argv:
        pytest.skip("this machine has CUDA")
    out = tmp_path / "out" / "x.pt"
    assert pretrain_context.main([*TINY[:-2], "--steps", "2", *argv, "--out", str(out)]) == 2
    error = one_line_error(capsys)
    assert error.startswith("error: ") and says.replace("lambada:2", "lambada_development_plain_text.txt:2") in error
    assert not out.parent.exists()


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, tmp_path, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(context_encoder, "anonymised_corpus", interrupted)
    assert pretrain_context.main(["--corpus", "sample", "--out", str(tmp_path / "x.pt")]) == 130
    assert capsys.readouterr().err.strip() == "interrupted" and not list(tmp_path.iterdir())


def test_help_shows_the_whole_description_and_every_option():
    parser = pretrain_context.build_parser()
    assert parser.description == pretrain_context.__doc__ and issubclass(parser.formatter_class, HelpFormatter)
    assert all(action.help for action in parser._actions if not isinstance(action, argparse._HelpAction))


# ---- loading it into a DNTM ---------------------------------------------------------------------------------------


def dntm(vocabulary: Vocabulary, placement: str = "both", embedding: int = SIZE, hidden: int = SIZE,
         context: int = SIZE) -> DynamicNeuralTextModel:
    config = DNTMConfig(vocab_size=len(vocabulary), embedding_size=embedding, hidden_size=hidden, dropout=0.0,
                        context_size=context, placement=placement, first_entity_id=first_entity_id(vocabulary))
    return DynamicNeuralTextModel(config)


def test_loading_freezes_the_encoder_and_gives_entities_unks_vector(pretrained, sample_vocabulary):
    model = dntm(sample_vocabulary)
    said = load_context_encoder(model, pretrained, sample_vocabulary)
    assert "frozen" in said and "input and output embeddings initialised" in said
    saved = load(pretrained).weights["model"]
    pretrained_embeddings = saved["embedding.weight"]
    first, unk = first_entity_id(sample_vocabulary), sample_vocabulary.unk_id
    entities = slice(first, first + len(ENTITY_TOKENS))
    others = torch.ones(len(sample_vocabulary), dtype=torch.bool)
    others[entities] = False
    for weight in (model.context_encoder.embedding.weight, model.embedding.weight, model.output.weight):
        assert torch.equal(weight[entities], pretrained_embeddings[unk].expand(len(ENTITY_TOKENS), SIZE))
        assert torch.equal(weight[others], pretrained_embeddings[others])
    assert torch.equal(model.context_encoder.lstm.weight_hh_l0, saved["lstm.weight_hh_l0"])
    assert not any(p.requires_grad for p in model.context_encoder.parameters())
    model.train(True)
    assert not model.context_encoder.training and model.lstm.training
    documents = anonymised_corpus("sample", "dev").documents[:2]
    batch = make_batch([apply_vocabulary(d, sample_vocabulary)[0] for d in documents], sample_vocabulary)
    (-model.log_likelihood(batch).sum()).backward()
    assert all(p.grad is None for p in model.context_encoder.parameters())
    assert model.merge.gru.weight_ih.grad is not None and model.embedding.weight.grad is not None


def test_sizes_that_differ_initialise_only_what_fits(pretrained, sample_vocabulary):
    model = dntm(sample_vocabulary, embedding=SIZE, hidden=2 * SIZE)
    before = model.output.weight.clone()
    assert "; input embeddings initialised" in load_context_encoder(model, pretrained, sample_vocabulary)
    assert torch.equal(model.output.weight, before)
    model = dntm(sample_vocabulary, embedding=8, hidden=8)
    assert "not initialised" in load_context_encoder(model, pretrained, sample_vocabulary)
    baseline = dntm(sample_vocabulary, placement="none")
    said = load_context_encoder(baseline, pretrained, sample_vocabulary)
    assert "frozen" not in said and "input and output embeddings initialised" in said


def test_another_vocabulary_or_size_is_refused_in_one_line(pretrained, sample_vocabulary):
    smaller = anonymised_vocabulary(anonymised_corpus("sample", "train").documents, max_size=100)
    with pytest.raises(CheckpointError, match="pretrained on another vocabulary .* first differ at id 100"):
        load_context_encoder(dntm(smaller), pretrained, smaller)
    with pytest.raises(CheckpointError, match=f"a context encoder of size {SIZE}, but --context-size is 32"):
        load_context_encoder(dntm(sample_vocabulary, context=32), pretrained, sample_vocabulary)


def test_a_file_that_is_no_context_encoder_is_refused_in_one_line(tmp_path, pretrained):
    (tmp_path / "random").write_bytes(b"\x00\x01 not torch")
    with pytest.raises(CheckpointError, match="random: not an entitylm context encoder"):
        read_context_encoder(tmp_path / "random")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="other.pt: not an entitylm context encoder"):
        read_context_encoder(tmp_path / "other.pt")
    checkpoint = load(pretrained)
    del checkpoint.weights["model"]["project.bias"]
    checkpoint.save(tmp_path / "broken.pt")
    with pytest.raises(CheckpointError, match="broken.pt: not a usable context encoder") as error:
        read_context_encoder(tmp_path / "broken.pt")
    assert "\n" not in str(error.value)


# ---- entitylm train --context-encoder -------------------------------------------------------------------------------


def test_training_a_dntm_on_the_pretrained_encoder_keeps_it_frozen(pretrained, tmp_path, capsys):
    out = tmp_path / "dntm"
    argv = ["--model", "dntm", "--embedding-size", str(SIZE), "--hidden-size", str(SIZE), "--context-size",
            str(SIZE), "--batch-tokens", "1000", "--epochs", "1", "--device", "cpu", "--out", str(out),
            "--context-encoder", str(pretrained)]
    assert train.main(argv) == 0
    assert "context encoder loaded and frozen" in capsys.readouterr().err
    checkpoint = Checkpoint.load(out / "last.pt")
    assert checkpoint.training["args"]["context_encoder"] == str(pretrained)
    weights, saved = checkpoint.weights["model"], load(pretrained).weights["model"]
    for name in ("lstm.weight_ih_l0", "project.weight"):
        assert torch.equal(weights[f"context_encoder.{name}"], saved[name])  # frozen: unchanged by training
    # Resuming with another encoder (or none) would mix two configurations.
    other = tmp_path / "other.pt"
    other.write_bytes(pretrained.read_bytes())
    for changed in (["--context-encoder", str(other)], []):
        resumed = [*argv[:-2], *changed, "--resume", "--epochs", "2"]
        assert train.main(resumed) == 2
        assert "was trained with --context-encoder" in last_line_error(capsys)


@pytest.mark.parametrize(("argv", "says"), [
    (["--model", "dntm", "--context-size", "32"], "a context encoder of size 16, but --context-size is 32"),
    (["--model", "dntm", "--vocab-size", "100"], "pretrained on another vocabulary"),
    (["--model", "rnnlm"], "--context-encoder: only --model dntm has a context encoder"),
])
def test_train_refuses_an_encoder_that_does_not_fit_in_one_line(argv, says, pretrained, tmp_path, capsys):
    out = tmp_path / "run"
    full = ["--embedding-size", str(SIZE), "--hidden-size", str(SIZE), "--context-size", str(SIZE), *argv,
            "--device", "cpu", "--out", str(out), "--context-encoder", str(pretrained)]
    assert train.main(full) == 2
    assert says in last_line_error(capsys) and not out.exists()
