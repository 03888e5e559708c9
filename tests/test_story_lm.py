"""The MNEMELM story LMs: training through ``python -m inference.train`` (and resuming), checkpoints, the
language-modelling evaluation and prompted generation, with tiny models on the embedded ``sample`` corpus."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from coref.corpora.stories import load_stories
from coref.io.checkpoint import FORMAT, VERSION
from generative.mneme import MnemeConfig, MnemeExample, MnemeLM, make_batch
from inference.algorithms import generate
from inference.commands import generate as generate_command
from inference.commands import mneme_eval as mneme_eval_command
from inference.commands import train
from inference.evaluation import entity_usage
from inference.evaluation import mneme as mneme_eval
from inference.training import mneme as story_lm

TINY = ["--corpus", "sample", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--chunk", "8",
        "--segment", "16", "--cache", "32", "--vocab-size", "150", "--batch-tokens", "300", "--warmup", "0",
        "--lr", "3e-3", "--device", "cpu"]


def trained(out: Path, model: str, *extra: str) -> Path:
    """Train a tiny ``model`` on the sample into ``out``; its model.pt."""
    assert train.main(["--model", model, "--out", str(out), *TINY, *extra]) == 0
    return out / "model.pt"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Tiny vanilla and D-MNEMELM checkpoints of two epochs, and a D-MNEMELM with another vocabulary."""
    root = tmp_path_factory.mktemp("story_lms")
    return {"vanilla": trained(root / "vanilla", "vanilla", "--epochs", "2"),
            "d_mneme": trained(root / "d_mneme", "d_mneme", "--epochs", "2"),
            "other_words": trained(root / "other", "d_mneme", "--epochs", "1", "--vocab-size", "100")}


# ---- words and stories ------------------------------------------------------------------------------------------


def test_the_vocabulary_keeps_case_caps_and_reads_other_words_as_unk():
    stories = load_stories("sample", "train")
    vocabulary = story_lm.StoryVocabulary.build(stories, 50)
    assert vocabulary.words[:4] == story_lm.SPECIALS and len(vocabulary) == 54
    assert vocabulary.index("<pad>") == 0 and vocabulary.index("no-such-word") == vocabulary.index("<unk>")
    everything = story_lm.StoryVocabulary.build(stories, 10_000)
    words = {word for story in stories for word in story.tokens}
    assert set(everything.words[4:]) == words  # the prompts' words are the stories' own
    assert "The" in everything.words and "the" in everything.words  # case kept
    assert everything.unknown(["The", "Zyx", "Zyx", "the"]) == ["Zyx"]
    with pytest.raises(ValueError, match="starts with"):
        story_lm.StoryVocabulary(("<unk>", "<pad>", "<sep>", "<eos>"))


def test_a_story_is_its_prompt_its_tokens_and_eos():
    story = load_stories("sample", "train")[0]
    vocabulary = story_lm.StoryVocabulary.build([story], 10_000)
    example = story_lm.encode_story(story, vocabulary)
    assert len(example.story) == len(story.tokens) + 1 and example.story[-1] == vocabulary.eos_id
    assert [vocabulary.words[i] for i in example.story[:-1]] == list(story.tokens)
    assert list(example.entity_labels[:-1]) == list(story.entity_labels) and example.entity_labels[-1] == ()
    assert example.mention_mask[-1] is False and sum(example.mention_mask) == sum(story.mention_mask)
    assert vocabulary.words[example.prompt[0]] == "<sep>" and max(example.prompt_entity) == len(story.entities) - 1


def test_batches_hold_similar_lengths_within_the_token_budget():
    stories = load_stories("sample", "train") + load_stories("sample", "dev")
    vocabulary = story_lm.StoryVocabulary.build(stories, 10_000)
    examples = [story_lm.encode_story(story, vocabulary) for story in stories]
    batches = story_lm.story_batches(examples, 200)
    assert sum(batch.size for batch in batches) == len(examples)
    assert all(batch.story.numel() <= 200 or batch.size == 1 for batch in batches)
    widths = [batch.story.shape[1] for batch in batches]
    assert widths == sorted(widths)


def test_corpora_are_checked_and_dev_is_the_gold_corpora():
    assert story_lm.dev_corpus("litbank+lambada+inscript") == "litbank+inscript"
    assert story_lm.dev_corpus("lambada") == "lambada"
    with pytest.raises(ValueError, match="unknown story corpus 'nope'"):
        story_lm.corpus_parts("sample+nope")


# ---- training ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["vanilla", "d_mneme"])
def test_training_lowers_the_loss_and_resumes(model, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["--model", model, "--out", str(out), *TINY, "--patience", "10", "--dropout", "0"]
    assert train.main([*argv, "--epochs", "3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == model and summary["epochs"] == 3 and summary["vocabulary"] == 154
    history = story_lm.StoryLMCheckpoint.load(out / "last.pt").training["state"]["history"]
    assert history[-1]["dev_nll"] < history[0]["dev_nll"] and history[-1]["train_nll"] < history[0]["train_nll"]
    assert (history[0]["train_kl"] > 0) == (model != "vanilla")
    assert train.main([*argv, "--epochs", "4", "--resume"]) == 0
    resumed = story_lm.StoryLMCheckpoint.load(out / "last.pt").training["state"]
    assert resumed["epoch"] == 4 and resumed["history"][:3] == history
    assert "resumed from" in capsys.readouterr().err
    assert train.main([*argv, "--epochs", "5", "--lr", "0.5", "--resume"]) == 2  # another run's options
    assert "was trained with --lr 0.003 (now 0.5)" in capsys.readouterr().err
    assert train.main([*argv, "--epochs", "5"]) == 2
    assert "holds an earlier run" in capsys.readouterr().err


def test_a_resumed_run_matches_an_uninterrupted_one(tmp_path, capsys):
    argv = ["--model", "d_mneme", *TINY, "--patience", "10"]
    assert train.main([*argv, "--out", str(tmp_path / "a"), "--epochs", "2"]) == 0
    assert train.main([*argv, "--out", str(tmp_path / "b"), "--epochs", "1"]) == 0
    assert train.main([*argv, "--out", str(tmp_path / "b"), "--epochs", "2", "--resume"]) == 0
    capsys.readouterr()
    weights = [story_lm.StoryLMCheckpoint.load(tmp_path / run / "last.pt").weights["model"] for run in "ab"]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_the_kl_weight_overrides_the_preset(tmp_path, capsys):
    path = trained(tmp_path / "run", "d_mneme", "--epochs", "1", "--kl-weight", "0.25")
    capsys.readouterr()
    assert story_lm.StoryLMCheckpoint.load(path).config.kl_weight == 0.25
    assert train.main(["--model", "vanilla", "--out", str(tmp_path / "v"), *TINY, "--kl-weight", "1"]) == 2
    assert "kl_weight supervises the memory attention" in capsys.readouterr().err


def test_a_model_started_from_a_base_lm_takes_its_vocabulary_and_weights(tmp_path, checkpoints, capsys):
    base = story_lm.StoryLMCheckpoint.load(checkpoints["vanilla"])
    path = trained(tmp_path / "run", "d_mneme", "--epochs", "1", "--vocab-size", "100", "--lr", "1e-9",
                   "--base", str(checkpoints["vanilla"]))  # --vocab-size is the base's, whatever it says
    started = story_lm.StoryLMCheckpoint.load(path)
    assert started.vocabulary.words == base.vocabulary.words and started.training["args"]["base"]
    near = [torch.allclose(started.weights["model"][name], weights, atol=1e-6)
            for name, weights in base.weights["model"].items()]
    assert all(near)  # a learning rate of 1e-9 leaves the base's weights where they were
    assert train.main(["--model", "d_mneme", "--out", str(tmp_path / "bad"), *TINY,
                       "--base", str(checkpoints["d_mneme"])]) == 2
    assert "must be a VANILLALM of the same sizes" in capsys.readouterr().err


def test_load_story_lm_round_trips(tmp_path):
    stories = load_stories("sample", "train")
    vocabulary = story_lm.StoryVocabulary.build(stories, 10_000)
    config = MnemeConfig.preset("d_mneme", len(vocabulary), d_model=16, layers=1, heads=2, d_ff=32, chunk=8,
                                segment=16, cache=32)
    torch.manual_seed(0)
    model = MnemeLM(config).eval()
    path = tmp_path / "model.pt"
    story_lm.StoryLMCheckpoint("d_mneme", config, vocabulary, 1000, {"model": model.state_dict()},
                               {"note": 1}).save(path)
    loaded, checkpoint = story_lm.load_story_lm(path)
    assert not loaded.training and checkpoint.config == config and checkpoint.vocabulary == vocabulary
    assert checkpoint.max_tokens == 1000 and checkpoint.training == {"note": 1}
    batch = story_lm.story_batches([story_lm.encode_story(story, vocabulary) for story in stories], 10_000)[0]
    assert torch.equal(loaded.token_log_probs(batch), model.token_log_probs(batch))
    torch.save({"format": FORMAT, "version": VERSION, "kind": "d_mneme"}, tmp_path / "incomplete.pt")
    with pytest.raises(ValueError, match="incomplete.pt: not an entitylm story LM checkpoint"):
        story_lm.load_story_lm(tmp_path / "incomplete.pt")


# ---- evaluation -------------------------------------------------------------------------------------------------


def evaluate(checkpoints: list[Path], out: Path, *extra: str) -> int:
    return mneme_eval_command.main(["--checkpoints", *map(str, checkpoints), "--corpus", "sample", "--cache-sizes",
                                    "300", "200", "8", "--out", str(out), "--device", "cpu", *extra])


def test_the_evaluation_writes_every_model_and_cache_size(checkpoints, tmp_path, capsys):
    out = tmp_path / "mneme.json"
    out.write_text(json.dumps({"generation": {"kept": True}}))
    assert evaluate([checkpoints["vanilla"], checkpoints["d_mneme"]], out, "--plots", str(tmp_path / "plots")) == 0
    assert "d_mneme" in capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["generation"] == {"kept": True}
    entry = results["language_modelling"]
    assert entry["settings"]["cache_sizes"] == [300, 200, 8] and entry["settings"]["sections"] == 10
    assert set(entry["models"]) == {"vanilla", "d_mneme"}
    for model in entry["models"].values():
        assert set(model["cache"]) == {"300", "200", "8"}
        full, cut = model["cache"]["300"], model["cache"]["8"]
        assert set(full) >= {"perplexity", "nll", "entity_nll", "other_nll", "stories", "tokens", "mention_tokens",
                             "section_entity_nll", "section_mention_tokens"}
        assert full["stories"] == 2 and full["tokens"] == 153 + 2  # the test stories and their <eos>
        assert full["mention_tokens"] == sum(full["section_mention_tokens"])
        assert full["mention_tokens"] * full["entity_nll"] + (full["tokens"] - full["mention_tokens"]) * \
            full["other_nll"] == pytest.approx(full["tokens"] * full["nll"])
        assert model["cache"]["200"] == full  # prompt and story fit in either cache: exactly the same reading
        assert cut["perplexity"] != full["perplexity"]
        assert model["section_degradation"]["200"] == [0.0] * 10 and len(model["section_degradation"]["8"]) == 10
    gain = entry["relative_improvement"]["d_mneme"]["8"]["perplexity"]
    vanilla, memory = (entry["models"][m]["cache"]["8"]["perplexity"] for m in ("vanilla", "d_mneme"))
    assert gain == pytest.approx(100 * (vanilla - memory) / vanilla)
    assert {path.name for path in (tmp_path / "plots").iterdir()} == {"mneme_figure3.png", "mneme_figure4.png"}


def test_sections_split_each_text_equally_and_leave_eos_out():
    mentions = [[1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0], [0, 1, 1, 1, 0]]  # 10 words and <eos>; 4 words and <eos>
    batch = make_batch([MnemeExample([1], [-1], [5] * len(m), mention_mask=m) for m in mentions])
    tally = mneme_eval.Tally(sections=2)
    tally.add(torch.arange(1.0, 12.0).expand(2, -1) * batch.story_mask, batch)
    metrics = tally.metrics()
    assert metrics["section_mention_tokens"] == [2, 3]  # words 0 | 9 of the first, 1 | 2, 3 of the second
    assert metrics["section_entity_nll"] == pytest.approx([(1 + 2) / 2, (10 + 3 + 4) / 3])  # NLL = position + 1
    assert metrics["tokens"] == 16 and metrics["mention_tokens"] == 5 and metrics["stories"] == 2


def test_the_evaluation_merges_models_of_the_same_settings(checkpoints, tmp_path, capsys):
    out = tmp_path / "mneme.json"
    assert evaluate([checkpoints["d_mneme"]], out) == 0
    assert json.loads(out.read_text())["language_modelling"]["relative_improvement"] == {}
    assert evaluate([checkpoints["vanilla"]], out) == 0
    entry = json.loads(out.read_text())["language_modelling"]
    assert set(entry["models"]) == {"vanilla", "d_mneme"} and "d_mneme" in entry["relative_improvement"]
    assert evaluate([checkpoints["vanilla"]], out, "--sections", "5") == 0  # other settings: a new entry
    assert set(json.loads(out.read_text())["language_modelling"]["models"]) == {"vanilla"}
    capsys.readouterr()


def test_the_evaluation_refuses_another_vocabulary_and_bad_results_files(checkpoints, tmp_path, capsys):
    out = tmp_path / "mneme.json"
    assert evaluate([checkpoints["d_mneme"], checkpoints["other_words"]], out) == 2
    error = capsys.readouterr().err.splitlines()
    assert len(error) == 1 and f"{checkpoints['other_words']} uses another vocabulary" in error[0]
    assert evaluate([checkpoints["d_mneme"], checkpoints["d_mneme"]], out) == 2
    assert "a second d_mneme checkpoint" in capsys.readouterr().err
    out.write_text("[1, 2]")
    assert evaluate([checkpoints["d_mneme"]], out) == 2
    assert f"{out}: not a JSON results file" in capsys.readouterr().err
    assert out.read_text() == "[1, 2]"


# ---- generation -------------------------------------------------------------------------------------------------


def generated(checkpoint: Path, capsys, *extra: str) -> tuple[str, str]:
    argv = ["--checkpoint", str(checkpoint), "--max-tokens", "12", "--device", "cpu", *extra]
    assert generate_command.main(argv) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_generation_is_seeded_and_warns_of_unknown_prompt_words(checkpoints, tmp_path, capsys):
    argv = ["--entities", "Sarah King", "the dog", "--samples", "2"]
    first, warning = generated(checkpoints["d_mneme"], capsys, *argv, "--json", str(tmp_path / "samples.json"))
    assert generated(checkpoints["d_mneme"], capsys, *argv)[0] == first
    assert generated(checkpoints["d_mneme"], capsys, *argv, "--seed", "1")[0] != first
    assert warning == "warning: prompt words outside the vocabulary read as <unk>: Sarah King\n"
    lines = first.splitlines()
    assert len(lines) == 2 and all(0 < len(line.split()) <= 12 for line in lines)
    result = json.loads((tmp_path / "samples.json").read_text())
    assert result["prompt"] == "<sep> Sarah King <sep> the dog <sep>" and result["entities"] == ["Sarah King",
                                                                                                 "the dog"]
    assert [sample["text"] for sample in result["samples"]] == lines and result["unknown_prompt_words"] == [
        "Sarah", "King"]


def test_generation_streams_word_by_word(checkpoints, monkeypatch):
    class Recorder(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.flushed: list[str] = []

        def flush(self) -> None:
            self.flushed.append(self.getvalue())

    recorder = Recorder()
    monkeypatch.setattr("sys.stdout", recorder)
    assert generate_command.main(["--checkpoint", str(checkpoints["vanilla"]), "--entities", "the dog",
                                  "--max-tokens", "6", "--top-p", "1", "--device", "cpu"]) == 0
    words = recorder.getvalue().split()
    assert words
    partial = [text for text in recorder.flushed if text and not text.endswith("\n")]
    assert len(partial) == len(words)  # one flush per word, before the line ends
    assert [len(text.split()) for text in partial] == list(range(1, len(words) + 1))


def test_generation_stops_at_eos(checkpoints, capsys, monkeypatch):
    model, checkpoint = story_lm.load_story_lm(checkpoints["vanilla"])
    eos = checkpoint.vocabulary.eos_id
    monkeypatch.setattr(MnemeLM, "logits", lambda self, hidden: torch.nn.functional.one_hot(
        torch.full(hidden.shape[:-1], eos), len(checkpoint.vocabulary)).float() * 100)
    words, ended = generate.sample_story(model, checkpoint.vocabulary, ["<sep>"], [-1], 5, 0.8, 1.0,
                                         torch.Generator().manual_seed(0), print)
    assert words == [] and ended


def test_generation_takes_a_corpus_story_prompt(checkpoints, tmp_path, capsys):
    story = load_stories("sample", "test")[0]
    generated(checkpoints["d_mneme"], capsys, "--story-id", story.id, "--corpus", "sample", "--json",
              str(tmp_path / "s.json"))
    result = json.loads((tmp_path / "s.json").read_text())
    assert result["story_id"] == story.id and result["entities"] == [" ".join(e) for e in story.entities]
    assert generate_command.main(["--checkpoint", str(checkpoints["d_mneme"]), "--story-id", "nope", "--corpus",
                          "sample"]) == 2
    assert "--story-id 'nope': no such story in sample test" in capsys.readouterr().err


# ---- generation metrics (Table 2) -------------------------------------------------------------------------------


def test_samples_are_as_long_as_their_stories_never_end_and_are_seeded(checkpoints):
    model, checkpoint = story_lm.load_story_lm(checkpoints["d_mneme"])
    stories = load_stories("sample", "test")

    def draw(seed: int) -> list[list[list[str]]]:
        return entity_usage.draw_stories(model, checkpoint.vocabulary, stories, 2, torch.Generator().manual_seed(seed),
                                         batch_size=3)

    drawn = draw(0)
    assert len(drawn) == 2 and all(len(sample) == len(stories) for sample in drawn)
    for sample in drawn:
        assert [len(words) for words in sample] == [len(story.tokens) for story in stories]
        assert all(not {story_lm.EOS, story_lm.PAD, "<sep>"} & set(words) for words in sample)
    assert draw(0) == drawn and draw(1) != drawn
    assert drawn[0] != drawn[1]  # two samples of one prompt differ


def test_the_annotator_resolves_drops_singletons_and_tags():
    annotator = entity_usage.Annotator.load()
    text = "Anna met her brother in Paris . She thanked him . A dog barked ."
    [(document, tags)] = annotator.annotate([text.split()], ["t"])
    assert len(document.sentences) == 3 and len(tags) == len(document.tokens)
    sizes = [len(cluster) for cluster in document.clusters()]
    assert sizes and min(sizes) >= 2  # entities mentioned once are not kept
    assert tags[document.tokens.index("met")] == "VERB"
    [(unknown, _)] = annotator.annotate([["The", "<unk>", "ran", "."]], ["u"])
    assert unknown.tokens == ("The", "UNK", "ran", ".")  # not "<", "unk", ">"


def test_the_coherence_gap_and_the_spread_over_sample_sets():
    rows = {"human": {"coherence": 5.0}, "vanilla": {"coherence": 3.0}, "d_mneme": {"coherence": 4.5},
            "s_mneme": {"coherence": None}}
    assert entity_usage.gap_closed(rows) == {"d_mneme": pytest.approx(0.75), "s_mneme": None}
    assert entity_usage.gap_closed({"vanilla": {"coherence": 3.0}}) == {}
    above = {**rows, "vanilla": {"coherence": 5.01}}  # vanilla already at the human stories' C: no gap
    assert entity_usage.gap_closed(above) == {"d_mneme": None, "s_mneme": None}
    story = {"sections": 10, "entities": 2, "mentions": 3.0, "prompt_entities": 2, "exact": 1, "subset": 2,
             "coherence": 4.0, "consistency": 50.0, "normalised_consistency": 20.0}
    result = entity_usage.summary([[story, {**story, "coherence": 2.0}], [{**story, "coherence": 6.0}]])
    assert result["stories"] == 3 and result["samples"] == 2 and result["coherence"] == pytest.approx(4.0)
    assert result["spread"]["coherence"] == pytest.approx(1.5)  # set means 3 and 6
    assert result["spread"]["entities"] == 0.0
    assert entity_usage.summary([[story]])["spread"]["coherence"] is None


def test_prompts_are_spread_over_the_split():
    stories = load_stories("sample", "train")
    assert mneme_eval.prompts_of(stories, None) == [s for s in stories if s.entities]
    chosen = mneme_eval.prompts_of(stories, 3)
    assert len(chosen) == 3 and chosen[0] == stories[0] and len(set(chosen)) == 3


def test_the_evaluation_writes_the_generation_metrics_with_the_human_row(checkpoints, tmp_path, capsys):
    out = tmp_path / "mneme.json"
    assert evaluate([checkpoints["vanilla"]], out) == 0
    capsys.readouterr()
    assert evaluate([checkpoints["vanilla"], checkpoints["d_mneme"]], out, "--skip-lm", "--samples", "2") == 0
    printed = capsys.readouterr().out
    assert "human" in printed and "PPL" not in printed
    results = json.loads(out.read_text())
    assert set(results["language_modelling"]["models"]) == {"vanilla"}  # kept, not re-run
    entry = results["generation"]
    assert entry["settings"]["samples"] == 2 and entry["settings"]["stories"] == 2
    assert set(entry["rows"]) == {"human", "vanilla", "d_mneme"}
    human, vanilla = entry["rows"]["human"], entry["rows"]["vanilla"]
    assert human["stories"] == 2 and human["samples"] == 1 and vanilla["stories"] == 4 and vanilla["samples"] == 2
    assert set(vanilla) >= {"entities", "mentions", "exact", "subset", "coherence", "consistency",
                            "normalised_consistency_of_means", "spread", "defined", "checkpoint"}
    assert set(entry["coherence_gap_closed"]) == {"d_mneme"}
    assert evaluate([checkpoints["vanilla"]], out, "--skip-lm") == 2
    assert "--skip-lm leaves nothing to do without --samples" in capsys.readouterr().err
