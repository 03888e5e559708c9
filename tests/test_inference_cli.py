"""The training and marginal-perplexity commands, end to end on the embedded sample corpus with tiny models."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from inference.commands import marginal_ppl, refine, train
from inference.training.checkpoint import Checkpoint, CheckpointError

TINY = ["--embedding-size", "16", "--hidden-size", "16", "--batch-tokens", "1000", "--seed", "0"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """Tiny EntityNLM, RNNLM and 3-gram checkpoints trained on the sample corpus."""
    root = tmp_path_factory.mktemp("runs")
    runs = {
        "entitynlm": ["--model", "entitynlm", "--epochs", "2", *TINY],
        "rnnlm": ["--model", "rnnlm", "--epochs", "2", *TINY],
        "ngram": ["--model", "ngram", "--order", "3", "--discount-fallback"],
    }
    for name, options in runs.items():
        assert train.main([*options, "--out", str(root / name), "--device", "cpu"]) == 0
    return {name: root / name / "model.pt" for name in runs}


def test_training_writes_checkpoints_that_carry_vocabulary_and_options(trained):
    checkpoint = Checkpoint.load(trained["entitynlm"])
    assert checkpoint.kind == "entitynlm" and checkpoint.config["hidden_size"] == 16
    assert set(checkpoint.weights) == {"model", "proposal", "bidirectional_proposal"}
    assert checkpoint.training["args"]["corpus"] == "sample" and len(checkpoint.training["state"]["history"]) == 2
    assert checkpoint.preprocess.lowercase and len(checkpoint.vocabulary) > 100
    history = checkpoint.training["state"]["history"]
    assert history[1]["train_nll"]["model"] < history[0]["train_nll"]["model"]  # it learns


def test_resume_continues_where_the_last_epoch_ended(tmp_path):
    out = tmp_path / "run"
    common = ["--model", "rnnlm", *TINY, "--out", str(out), "--device", "cpu"]
    assert train.main([*common, "--epochs", "1"]) == 0
    assert train.main([*common, "--epochs", "2", "--resume"]) == 0
    resumed = Checkpoint.load(out / "last.pt").training["state"]["history"]
    straight = tmp_path / "straight"
    assert train.main(["--model", "rnnlm", *TINY, "--out", str(straight), "--device", "cpu", "--epochs", "2"]) == 0
    uninterrupted = Checkpoint.load(straight / "last.pt").training["state"]["history"]
    assert [h["epoch"] for h in resumed] == [1, 2]
    assert resumed[1]["dev_nll"]["model"] == pytest.approx(uninterrupted[1]["dev_nll"]["model"], rel=1e-5)


def test_an_out_folder_of_another_run_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["--model", "rnnlm", *TINY, "--out", str(out), "--device", "cpu", "--epochs", "1"]
    assert train.main(common) == 0
    assert train.main(common) == 2  # a new run would leave the earlier one's last.pt beside its model.pt
    assert "holds an earlier run (model.pt, last.pt); pass --resume" in capsys.readouterr().err
    assert train.main([*common, "--resume", "--dropout", "0.5"]) == 2  # resuming mixes two configurations
    assert "last.pt: was trained with --dropout 0.2 (now 0.5)" in capsys.readouterr().err
    assert len(Checkpoint.load(out / "last.pt").training["state"]["history"]) == 1


def write_lambada_dev(root: Path) -> Path:
    """A data folder holding two LAMBADA development passages (lowercased, tokenised), as ``--extra-text
    lambada-dev`` reads them."""
    (root / "lambada").mkdir(parents=True)
    (root / "lambada" / "lambada_development_plain_text.txt").write_text(
        "he looked at the cake . `` nineteen , '' she said\nthe cat sat on the mat .\n", encoding="utf-8")
    return root


def test_init_fine_tunes_and_keeps_the_start_where_training_only_harms_dev(trained, tmp_path, capsys):
    """--init starts from the checkpoint's weights and vocabulary, and its dev score is the one to beat: with a
    learning rate that wrecks the model, the weights kept are the start's."""
    start = Checkpoint.load(trained["rnnlm"])
    out = tmp_path / "tuned"
    argv = ["--model", "rnnlm", "--epochs", "1", *TINY, "--init", str(trained["rnnlm"]), "--lr", "50",
            "--out", str(out), "--device", "cpu"]
    assert train.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["initial_dev_nll"] == summary["best_dev_nll"] == start.training["state"]["best"]
    tuned = Checkpoint.load(out / "model.pt")
    assert tuned.vocabulary.fingerprint == start.vocabulary.fingerprint
    assert all(torch.equal(tuned.weights["model"][name], value) for name, value in start.weights["model"].items())
    last = Checkpoint.load(out / "last.pt").training["state"]
    assert last["history"][0]["dev_nll"]["model"] > last["best"]["model"]  # the epoch harmed dev; the start kept


def test_extra_text_joins_the_training_text_without_changing_the_vocabulary(trained, tmp_path):
    data = write_lambada_dev(tmp_path / "data")
    runs = {}
    for name, more in (("plain", []), ("extra", ["--extra-text", "lambada-dev", "--data-dir", str(data)])):
        out = tmp_path / name
        assert train.main(["--model", "rnnlm", "--epochs", "1", *TINY, "--init", str(trained["rnnlm"]), *more,
                           "--out", str(out), "--device", "cpu"]) == 0
        record = Checkpoint.load(out / "last.pt").training["state"]["history"][0]
        runs[name] = record["train_tokens_per_second"] * record["seconds"]
    # the two passages' 8 and 6 words once punctuation is dropped, and </s> after each of their 3 sentences
    assert runs["extra"] - runs["plain"] == pytest.approx(8 + 6 + 3, abs=1e-3)


@pytest.mark.parametrize(("argv", "says"), [
    (["--model", "entitynlm", "--extra-text", "lambada-dev"], "--model entitynlm cannot train on"),
    (["--model", "ngram", "--init", "{rnnlm}"], "the n-gram is counted"),
    (["--model", "rnnlm", "--hidden-size", "8", "--init", "{rnnlm}"], "(hidden_size): pass the options"),
    (["--model", "rnnlm", "--init", "{entitynlm}"], "a entitynlm checkpoint, not a rnnlm one"),
])
def test_what_extra_text_and_init_cannot_do_is_refused_in_one_line(argv, says, trained, tmp_path, capsys):
    argv = [a.format(rnnlm=trained["rnnlm"], entitynlm=trained["entitynlm"]) for a in argv]
    common = ["--embedding-size", "16", "--batch-tokens", "1000", "--epochs", "1", "--device", "cpu"]
    capsys.readouterr()
    assert train.main([*common, *argv, "--out", str(tmp_path / "x")]) == 2
    assert says in capsys.readouterr().err.strip().splitlines()[-1]


def test_marginal_perplexity_with_baselines(trained, tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = ["--checkpoint", str(trained["entitynlm"]), "--baseline", str(trained["rnnlm"]),
            "--baseline", str(trained["ngram"]), "--particles", "20", "--sampler", "is", "--device", "cpu",
            "--json", str(out)]
    assert marginal_ppl.main(argv) == 0
    result = json.loads(out.read_text())
    for key in ("corpus", "split", "documents", "tokens", "particles", "log_likelihood", "perplexity",
                "elbo_perplexity", "baselines", "ess", "psis_khat", "seconds"):
        assert key in result
    assert (result["corpus"], result["split"], result["documents"], result["particles"]) == ("sample", "test", 2, 20)
    assert result["tokens"] == sum(row["tokens"] for row in result["per_document"])
    assert math.isclose(result["perplexity"], math.exp(-result["log_likelihood"] / result["tokens"]))
    assert result["perplexity"] <= result["elbo_perplexity"] + 1e-6  # log-mean-exp >= mean
    assert all(1 <= ess <= 20 for ess in result["ess"])
    assert set(result["baselines"]) == {"rnnlm", "ngram"}
    assert "EntityNLM perplexity (importance sampling)" in capsys.readouterr().out


def test_the_document_cache_reaches_every_baseline(trained, tmp_path):
    """``--document-cache``: the RNNLM and the n-gram baselines both read the cache (a lower perplexity on the
    sample, whose documents repeat their words), and the result records its weight."""
    results = {}
    for weight in ("0", "0.2"):
        out = tmp_path / f"{weight}.json"
        assert marginal_ppl.main(["--checkpoint", str(trained["entitynlm"]), "--baseline", str(trained["rnnlm"]),
                                  "--baseline", str(trained["ngram"]), "--particles", "4", "--device", "cpu",
                                  "--document-cache", weight, "--json", str(out)]) == 0
        results[weight] = json.loads(out.read_text())
    assert results["0.2"]["document_cache"] == 0.2 and results["0"]["document_cache"] == 0
    for name in ("rnnlm", "ngram"):
        assert results["0.2"]["baselines"][name] < results["0"]["baselines"][name]


def test_marginal_perplexity_by_smc(trained, tmp_path, capsys):
    out = tmp_path / "result.json"
    argv = ["--checkpoint", str(trained["entitynlm"]), "--baseline", "none", "--particles", "20", "--device", "cpu",
            "--sampler", "smc", "--json", str(out)]
    assert marginal_ppl.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["sampler"] == "smc" and result["elbo_perplexity"] is None
    assert math.isclose(result["perplexity"], math.exp(-result["log_likelihood"] / result["tokens"]))
    assert all(1 <= row["ess"] <= 20 and row["resamplings"] >= 0 for row in result["per_document"])
    assert "EntityNLM perplexity (SMC)" in capsys.readouterr().out


def strict_json(path: Path) -> dict:
    """Parse a JSON file, refusing the NaN and Infinity that Python's json writes but JSON does not allow."""
    def refuse(constant: str):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_both_samplers_side_by_side_equal_each_sampler_alone(trained, tmp_path, capsys):
    common = ["--checkpoint", str(trained["entitynlm"]), "--baseline", "none", "--particles", "20", "--device", "cpu"]
    results = {}
    for sampler in ("is", "smc", "both"):
        assert marginal_ppl.main([*common, "--sampler", sampler, "--json", str(tmp_path / f"{sampler}.json")]) == 0
        results[sampler] = strict_json(tmp_path / f"{sampler}.json")  # N = 20: every k-hat is null, with a note
    both = results["both"]
    assert both["sampler"] == "both" and set(both["samplers"]) == {"is", "smc"}
    for sampler in ("is", "smc"):  # each column is that sampler's run alone with the same seed
        alone = results[sampler]
        assert both["samplers"][sampler]["perplexity"] == alone["perplexity"]
        assert [row[sampler] for row in both["per_document"]] == \
            [{k: v for k, v in row.items() if k not in ("document", "part", "tokens")} for row in alone["per_document"]]
    assert both["samplers"]["is"]["elbo_perplexity"] == results["is"]["elbo_perplexity"]
    for row in both["per_document"]:
        assert row["smc"]["resamplings"] >= 0 and 1 <= row["smc"]["stage_ess"] <= 20
        for statistics in (row["is"], row["smc"]):
            assert statistics["psis_khat"] is None and "fewer than 5" in statistics["psis_khat_note"]
    out = capsys.readouterr().out
    assert "importance sampling (IS)" in out and "ESS</s>" in out and "n/a: a k-hat ArviZ could not fit" in out
    assert "EntityNLM perplexity (importance sampling)" in out and "EntityNLM perplexity (SMC)" in out


def test_the_same_seed_gives_the_same_estimate(trained, tmp_path):
    results = []
    for run in range(2):
        out = tmp_path / f"{run}.json"
        argv = ["--checkpoint", str(trained["entitynlm"]), "--baseline", "none", "--particles", "10",
                "--device", "cpu", "--json", str(out)]
        assert marginal_ppl.main(argv) == 0
        results.append(json.loads(out.read_text())["log_likelihood"])
    assert results[0] == results[1]


def test_several_particle_counts_and_seeds_print_the_convergence_table(trained, tmp_path, capsys):
    """Issue 27, item 4: --particles 3,6 --seeds 2 runs every (N, seed), each exactly the single run it stands
    for, and tabulates them by N with the spread over seeds and the change from the previous N."""
    out, single = tmp_path / "convergence.json", tmp_path / "single.json"
    common = ["--checkpoint", str(trained["entitynlm"]), "--baseline", "none", "--device", "cpu"]
    assert marginal_ppl.main([*common, "--particles", "6,3", "--seeds", "2", "--seed", "4", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["particles"] == [3, 6] and result["seeds"] == [4, 5] and len(result["runs"]) == 4
    first, second = result["rows"]
    assert (first["particles"], second["particles"]) == (3, 6) and first["change_from_previous"] is None
    assert len(second["perplexity_by_seed"]) == 2
    assert second["spread"] == max(second["perplexity_by_seed"]) - min(second["perplexity_by_seed"])
    assert math.isclose(second["change_from_previous"], second["mean_perplexity"] / first["mean_perplexity"] - 1)
    assert "median ESS" in printed and "perplexity by seed" in printed
    assert marginal_ppl.main([*common, "--particles", "6", "--seed", "5", "--json", str(single)]) == 0
    alone = json.loads(single.read_text())
    assert alone["perplexity"] == second["perplexity_by_seed"][1]


def test_a_baseline_with_another_vocabulary_is_refused(trained, tmp_path, capsys):
    other = tmp_path / "other"
    assert train.main(["--model", "rnnlm", "--epochs", "1", *TINY, "--vocab-size", "50", "--out", str(other),
                       "--device", "cpu"]) == 0
    argv = ["--checkpoint", str(trained["entitynlm"]), "--baseline", str(other / "model.pt"), "--device", "cpu"]
    assert marginal_ppl.main(argv) == 2
    assert "uses another vocabulary" in capsys.readouterr().err


def test_bad_checkpoints_and_devices_give_one_line_errors(trained, tmp_path, capsys):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="garbage.pt: not an entitylm checkpoint"):
        Checkpoint.load(garbage)
    assert marginal_ppl.main(["--checkpoint", str(tmp_path / "missing.pt")]) == 2
    assert "no such checkpoint file" in capsys.readouterr().err
    assert marginal_ppl.main(["--checkpoint", str(trained["rnnlm"]), "--baseline", "none"]) == 2
    assert "an entitynlm checkpoint is needed" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert marginal_ppl.main(["--checkpoint", str(trained["entitynlm"]), "--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().err


def test_refinement_evaluates_keeps_the_best_and_resumes(trained, tmp_path, capsys):
    out = tmp_path / "refined.pt"
    argv = ["--checkpoint", str(trained["entitynlm"]), "--proposal", "bidirectional", "--out", str(out),
            "--steps", "2", "--particles", "4", "--chunk", "40", "--eval-every", "1", "--device", "cpu"]
    assert refine.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["proposal"] == "bidirectional" and summary["steps"] == 2
    for figures in (summary["before"], summary["best"]):
        assert 0 < figures["ess_fraction"] <= 1 and figures["log_likelihood_per_token"] < 0
    assert summary["best"]["log_likelihood_per_token"] >= summary["before"]["log_likelihood_per_token"]
    refined, original = Checkpoint.load(out), Checkpoint.load(trained["entitynlm"])
    assert refined.weights["proposal"].keys() == original.weights["proposal"].keys()
    assert len(refined.training["refinement"]["history"]) == 3  # before, and after each step
    assert refine.main([*argv[:-4], "--steps", "3", "--eval-every", "1", "--device", "cpu"]) == 0  # resumes
    assert "resumed from" in capsys.readouterr().err
    assert len(Checkpoint.load(out).training["refinement"]["history"]) == 4
    assert refine.main([*argv[:-6], "--steps", "4", "--device", "cpu"]) == 2  # another --chunk: another refinement
    assert "refined.pt.state: a refinement with other options: --chunk 40 (now 100)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        refine.main([*argv[:-6], "--steps", "0", "--device", "cpu"])
    assert stop.value.code == 2 and "argument --steps: must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--particles", "0"], "argument --particles: must be at least 1, got 0"),
    (["--particles", "-5"], "argument --particles: must be at least 1, got -5"),
    (["--particles", "100,0"], "argument --particles: must be at least 1, got 0"),
    (["--seeds", "0"], "argument --seeds: must be at least 1, got 0"),
    (["--proposal-temperature", "0"], "argument --proposal-temperature: must be greater than 0, got 0"),
    (["--proposal-temperature", "-1"], "argument --proposal-temperature: must be greater than 0, got -1"),
])
def test_impossible_numbers_are_refused_in_one_line(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        marginal_ppl.main([*argv, "--device", "cpu", "--json", str(tmp_path / "out.json")])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error and not (tmp_path / "out.json").exists()


def test_one_particle_is_an_estimate_whose_khat_is_not_fitted(tmp_path):
    out = tmp_path / "out.json"
    assert marginal_ppl.main(["--particles", "1", "--sampler", "both", "--device", "cpu", "--json", str(out)]) == 0
    result = json.loads(out.read_text(), parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    for row in result["per_document"]:
        for sampler in ("is", "smc"):
            assert row[sampler]["ess"] == 1 and row[sampler]["psis_khat"] is None
            assert "fewer than 5" in row[sampler]["psis_khat_note"]


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, tmp_path, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(marginal_ppl, "run", interrupted)
    assert marginal_ppl.main(["--json", str(tmp_path / "out.json")]) == 130
    assert capsys.readouterr().err.strip() == "interrupted" and not (tmp_path / "out.json").exists()


def test_a_training_config_takes_one_proposal_by_name_and_checks_it(tmp_path):
    """In Python, ``proposals="forward"`` is one proposal, as ``--proposals forward`` is, not five letters."""
    from inference.training.train import LanguageModelTraining

    assert LanguageModelTraining("entitynlm", tmp_path, proposals="forward").proposals == ["forward"]
    with pytest.raises(ValueError, match="--proposals: invalid choice: 'sideways'"):
        LanguageModelTraining("entitynlm", tmp_path, proposals="sideways")
