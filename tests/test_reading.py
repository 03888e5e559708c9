"""Training the Coref-GRU readers through ``python -m inference.train`` on hand-made bAbI files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from coref.io.checkpoint import Checkpoint
from inference.commands import train
from inference.commands.reading import parse_args
from inference.training import coref_gru as reading
from tests.test_babi import TASK11, TASK13, TASK16, write_task

TINY = ["--embedding-size", "8", "--hidden-size", "8", "--device", "cpu"]


@pytest.fixture()
def babi_dir(tmp_path: Path) -> Path:
    """Task 11 (extractive: every answer is in its story) and task 13, each story three times in training."""
    for task, text in ((11, TASK11), (13, TASK13)):
        name = {11: "qa11_basic-coreference", 13: "qa13_compound-coreference"}[task]
        write_task(tmp_path, f"{name}_train.txt", text * 6)
        write_task(tmp_path, f"{name}_test.txt", text)
    return tmp_path


def test_task_names_are_checked():
    for good in ("babi:13", "wikihop", "lambada"):
        assert reading.parse_task(good) == good
    for bad in ("babi:0", "babi:21", "lambada:1", "babi:x"):
        with pytest.raises(ValueError, match="expected babi:N"):
            reading.parse_task(bad)


def test_extractive_and_classification_tasks_and_their_chains(babi_dir):
    data = reading.ReadingData.babi(11, str(babi_dir))
    assert data.classes is None  # every answer occurs in its story: attention-sum over the story
    example = data.splits["test"][0]
    assert data.words[example.answer] == "bedroom"
    assert [list(chain) for chain in example.clusters] == [[(0, 1), (9, 10)]]  # mary ... she
    assert data.max_chains == 3  # the sequential chain, mary, daniel (the second question of the story)


@pytest.mark.parametrize("model", sorted(reading.READERS))
def test_every_reader_trains_through_the_shared_command_and_resumes(model, babi_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--model", model, "--task", "babi:13", "--data-dir", str(babi_dir), "--out", str(out), "--patience", "5",
            *TINY]
    assert train.main([*argv, "--epochs", "2"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == model and summary["answer"] in ("candidates", "classes")
    assert 0.0 <= summary["test_accuracy"] <= 1.0 and summary["epochs"] >= 1
    saved = reading.load(out / "model.pt")
    assert saved["training"]["test_accuracy"] == summary["test_accuracy"]
    if summary["epochs"] == 2 and summary["best_dev_accuracy"] < 1.0:
        assert train.main([*argv, "--epochs", "3", "--resume"]) == 0
        assert reading.load(out / "last.pt")["training"]["state"]["epoch"] == 3
    assert train.main([*argv, "--epochs", "4", "--lr", "0.5", "--resume"]) == 2  # another run's options
    assert "was trained with --lr 0.01 (now 0.5)" in capsys.readouterr().err


def test_the_loss_falls_on_task_11(babi_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--model", "ga_cgru", "--task", "babi:11", "--data-dir", str(babi_dir), "--out", str(out),
                       "--epochs", "4", "--patience", "10", "--lr", "0.05", *TINY]) == 0
    history = reading.load(out / "last.pt")["training"]["state"]["history"]
    assert history[-1]["train_nll"] < history[0]["train_nll"]


def test_noun_chains_are_trained_on_stored_and_kept_on_resume(babi_dir, tmp_path, capsys):
    """``--chains nouns`` reads task 16's swans as one chain; the checkpoint records the rule, the data a
    checkpoint reads (the API's too) has it, and --resume refuses the other rule."""
    write_task(babi_dir, "qa16_basic-induction_train.txt", TASK16 * 6)
    write_task(babi_dir, "qa16_basic-induction_test.txt", TASK16)
    names, nouns = (reading.ReadingData.babi(16, str(babi_dir), chains=rule) for rule in ("names", "nouns"))
    assert names.splits["test"][0].clusters == [[(0, 1), (10, 11)], [(5, 6)], [(14, 15)]]  # julius, brian, greg
    assert nouns.splits["test"][0].clusters[1] == [(3, 4), (17, 18)]  # swan ... swan
    assert (names.max_chains, nouns.max_chains) == (4, 6)  # the sequential chain + 3 names (+ swan, frog)
    out = tmp_path / "run"
    argv = ["--model", "ga_cgru", "--task", "babi:16", "--data-dir", str(babi_dir), "--out", str(out), *TINY]
    assert train.main([*argv, "--chains", "nouns", "--epochs", "1"]) == 0
    checkpoint = reading.load(out / "model.pt")
    assert checkpoint["chains"] == "nouns"
    assert reading.checkpoint_data(checkpoint, str(babi_dir)).splits["test"] == nouns.splits["test"]
    capsys.readouterr()
    assert train.main([*argv, "--epochs", "2", "--resume"]) == 2
    assert "was trained with --chains nouns (now names)" in capsys.readouterr().err


def test_the_one_hot_baseline_matches_the_c_gru_parameter_count(babi_dir):
    data = reading.ReadingData.babi(13, str(babi_dir))
    args = parse_args(["--model", "ga_gru_onehot", "--task", "babi:13", "--out", "x"])
    onehot = reading.GatedAttentionReader(reading.reader_config(args, data))
    cgru = reading.GatedAttentionReader(reading.reader_config(dataclasses.replace(args, model="ga_cgru"), data))
    count = sum(p.numel() for p in cgru.parameters())
    assert abs(sum(p.numel() for p in onehot.parameters()) - count) / count < 0.05


def test_an_earlier_run_is_refused_and_a_bad_checkpoint_named(babi_dir, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "last.pt").write_bytes(b"not a checkpoint")
    argv = ["--model", "bi_gru", "--task", "babi:11", "--data-dir", str(babi_dir), "--out", str(out), *TINY]
    with pytest.raises(ValueError, match="holds an earlier run"):
        reading.train_reader(parse_args(argv))
    with pytest.raises(ValueError, match="not an entitylm reader checkpoint"):
        reading.train_reader(parse_args([*argv, "--resume"]))


def trained_with_defaults(folder: Path) -> None:
    """A stand-in for a run's model.pt: the benchmark reads the run's options back from it (none but defaults)."""
    Checkpoint("ga_gru", {}, {}, {}, {"args": {}}).save(folder / "model.pt")


def test_the_benchmark_reports_avg_max_by_dev_and_failed_tasks(tmp_path):
    from benchmarks import coref_gru

    args = coref_gru.build_parser().parse_args(["--models", "ga_gru", "--tasks", "1", "2", "--seeds", "0", "1",
                                                "--out", str(tmp_path), "--collect-only"])
    runs = {(1, 0): (1.0, 0.98), (1, 1): (0.9, 0.99), (2, 0): (0.5, 0.40), (2, 1): (0.7, 0.60)}  # (dev, test)
    for (task, seed), (dev, test) in runs.items():
        folder = coref_gru.run_folder(tmp_path, "ga_gru", task, seed)
        folder.mkdir(parents=True)
        (folder / "train.json").write_text(json.dumps({"best_dev_accuracy": dev, "test_accuracy": test}))
        trained_with_defaults(folder)
    result = coref_gru.collect(args)["models"]["ga_gru"]
    assert result["tasks"]["1"] == {"avg": pytest.approx(0.985), "max": 0.98, "seeds": 2,  # max: by dev, not test
                                    "train_args": ""}
    assert result["tasks"]["2"]["max"] == 0.60
    assert result["failed_tasks"] == 1 and result["max"] == pytest.approx((0.98 + 0.60) / 2)
    table = coref_gru.markdown_table(coref_gru.collect(args))
    assert "| 1 | 0.985 | 0.980 |" in table and "| failed (max < 0.95) (2 tasks every model ran) | 1 |  |" in table
    assert "| mean (2 tasks every model ran) | 0.742 | 0.790 |" in table and "| seeds (fewest) | 2 |  |" in table
    assert coref_gru.main(["--models", "ga_gru", "--tasks", "1", "2", "--seeds", "0", "1", "--out", str(tmp_path),
                           "--collect-only", "--results", str(tmp_path / "results"), "--name", "named"]) == 0
    assert json.loads((tmp_path / "results" / "named.json").read_text())["models"]["ga_gru"] == result
    assert (tmp_path / "results" / "named.md").read_text().startswith("|")


def test_the_wikihop_sample_runs_through_the_reader(data_dir):
    """The demo of the module docstring, on two questions and an untrained tiny reader: no accuracy claim."""
    if not (data_dir / "wikihop_sample").is_dir():
        pytest.skip(f"WikiHop sample unavailable: {data_dir / 'wikihop_sample'} does not exist")
    data = reading.ReadingData.of("wikihop", str(data_dir))
    assert len(data.splits["train"]) + len(data.splits["dev"]) <= 50 and data.splits["dev"] == data.splits["test"]
    examples = data.splits["dev"][:2]
    for example in examples:
        assert example.answer in {example.document[position] for position in example.candidates}
        assert all(start >= end_before for chain in example.clusters
                   for (_, end_before), (start, _) in zip(chain, chain[1:]))  # chains the C-GRU can read
    config = reading.ReaderConfig(len(data.words), embedding_size=8, hidden_size=8, answer="candidates",
                                  max_chains=data.max_chains)
    model = reading.GatedAttentionReader(config)
    batch = reading.make_reading_batch(examples, data.max_chains)
    log_likelihood = model.log_likelihood(batch)
    assert log_likelihood.shape == (2,) and bool(log_likelihood.isfinite().all())
    candidates = [{example.document[position] for position in example.candidates} for example in examples]
    assert all(int(word) in found for word, found in zip(model.predict(batch), candidates))


LAMBADA_DEV = [  # the last word is the answer; the last sentence, without it, the query
    "mary went to the park . she saw a dog there . the dog barked at mary",
    "john took the ball . he gave it to sue . then sue threw the ball",
    "the cat sat on the mat . it was warm . the cat liked the mat",
    "tom met anna at the station . he smiled . she waved back at tom",
    "a storm came . the boat rocked . the sailors held the boat",
    "bob read a book . it was long . he finished the book",
    "the king spoke to the queen . she listened . he loved the queen",
    "kate baked bread . it smelled good . everyone ate the bread",
    "the dog chased the cat . the cat ran up a tree . the dog barked at the cat",
    "sam lost his key . he looked everywhere . finally he found the key",
]
LAMBADA_TEST = ["zed opened the door . he walked in . everyone looked at zed",  # zed: unseen in training
                "the bird sang . it was morning . she opened the window"]  # window: not in the context


@pytest.fixture()
def lambada_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Ten development passages and two test ones; every passage's chain is its first word and its second
    sentence's first word (the pipeline's models are not needed)."""
    folder = tmp_path / "lambada"
    folder.mkdir()
    (folder / "lambada_development_plain_text.txt").write_text("\n".join(LAMBADA_DEV) + "\n")
    (folder / "lambada_test_plain_text.txt").write_text("\n".join(LAMBADA_TEST) + "\n")

    def chains(splits):
        return {split: [[[(0, 1), (example.tokens.index(".") + 1, example.tokens.index(".") + 2)]]
                         for example in examples] for split, examples in splits.items()}

    monkeypatch.setattr(reading, "lambada_chains", chains)
    return tmp_path


def test_lambada_passages_become_reading_questions(lambada_dir):
    data = reading.ReadingData.of("lambada", str(lambada_dir))
    assert data.max_chains == reading.LAMBADA_CHAINS and data.classes is None
    assert len(data.splits["train"]) == 9 and len(data.splits["dev"]) == 1 and len(data.splits["test"]) == 2
    words = data.words
    zed, window = data.splits["test"]
    # The document is context + query; the query starts with @begin; candidates are the context's words.
    assert [words[i] for i in zed.document][-4:] == [".", "everyone", "looked", "at"]  # no answer
    assert [words[i] for i in zed.query] == ["@begin", "everyone", "looked", "at"]
    assert zed.answer == zed.document[0] == words.index("@unk1")  # zed, unseen in training, reads as @unk1
    context = "zed opened the door . he walked in .".split()
    assert [context[i] for i in zed.candidates] == ["zed", "opened", "door", "he", "walked"]
    assert list(zed.clusters) == [[(0, 1), (5, 6)]]
    assert data.in_context == {"dev": [True], "test": [True, False]}
    for example in data.splits["train"]:  # training keeps the answerable passages only
        assert example.answer in {example.document[i] for i in example.candidates}


def test_lambada_trains_and_reports_accuracy_in_context(lambada_dir, tmp_path, capsys):
    out = tmp_path / "run"
    assert train.main(["--model", "ga_cgru", "--corpus", "lambada", "--data-dir", str(lambada_dir),
                       "--out", str(out), "--epochs", "1", "--json", str(tmp_path / "report.json"), *TINY]) == 0
    summary = json.loads(capsys.readouterr().out)
    report = json.loads((out / "test.json").read_text())
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert report["test_in_context"] == [True, False] and len(report["test_correct"]) == 2
    assert report["test_correct"][1] is False  # its answer is on no candidate position
    assert summary["test_accuracy"] == report["test_accuracy"] == sum(report["test_correct"]) / 2
    assert summary["test_accuracy_in_context"] == float(report["test_correct"][0])
    args = parse_args(["--model", "ga_gru", "--task", "lambada", "--out", "x"])
    assert (args.hidden_size, args.batch_size, args.lr, args.dropout) == (256, 64, 0.0005, 0.2)  # Appendix B
    assert args.halve_every == 2 and args.halve_per_epochs


def test_mcnemar_and_the_lambada_table(tmp_path):
    from benchmarks import coref_gru

    assert coref_gru.mcnemar([True] * 10 + [False] * 5, [False] * 10 + [True] * 5) == {
        "only_first": 10, "only_second": 5, "p": pytest.approx(0.30175781)}  # 2 P(X <= 5), X ~ Bin(15, 1/2)
    args = coref_gru.build_parser().parse_args(["--tasks", "--lambada-out", str(tmp_path), "--out",
                                                str(tmp_path / "babi"), "--collect-only"])
    runs = {"ga_gru": [True, False, False, True], "ga_cgru": [True, True, True, False]}
    for model, right in runs.items():
        folder = tmp_path / model / "seed0"
        folder.mkdir(parents=True)
        (folder / "test.json").write_text(json.dumps({
            "test_accuracy": sum(right) / 4, "test_accuracy_in_context": sum(right[:3]) / 3,
            "test_in_context": [True, True, True, False], "test_correct": right}))
        trained_with_defaults(folder)
    lambada = coref_gru.collect(args)["lambada"]
    assert lambada["models"]["ga_cgru"]["in_context"] == 1.0 and lambada["models"]["ga_gru"]["overall"] == 0.5
    assert lambada["mcnemar"]["0"]["in_context"]["only_second"] == 2
    assert "| ga_cgru | 1 | 0.7500 | 1.0000 |" in coref_gru.lambada_table(lambada)
