"""The shared language-model commands: the registry, per-token-group perplexity and the entity cloze."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from coref.corpora.anonymise import ENTITY_TOKENS
from coref.document import Document, Mention
from generative.layers.batch import TokenStream, make_batch
from generative.registry import LANGUAGE_MODELS, model_kind
from inference.commands import perplexity as perplexity_command
from inference.data import prepared_documents
from inference.evaluation import perplexity
from inference.evaluation.entity_cloze import clozes, mean_quantile
from inference.training.checkpoint import Checkpoint, language_model, pretrained


def stream(R, E, L) -> TokenStream:
    return TokenStream(list(range(len(R))), [0] * len(R), list(R), list(E), list(L))


def test_token_groups_follow_the_papers_definitions():
    # tokens: [A A] x [B] y [A] z </s>  -- A's second mention reappears; x, y, z follow mentions
    s = stream(R=[1, 1, 0, 1, 0, 1, 0, 0], E=[1, 1, 0, 2, 0, 1, 0, 0], L=[2, 1, 1, 1, 1, 1, 1, 1])
    groups = perplexity.token_groups(s)
    assert groups["reappearing_entities"].tolist() == [0, 0, 0, 0, 0, 1, 0, 0]
    assert groups["following_entities"].tolist() == [0, 0, 1, 0, 1, 0, 1, 0]
    assert groups["non_entities"].tolist() == [0, 0, 1, 0, 1, 0, 1, 1]
    breakdowns = perplexity.token_breakdowns(s)
    assert breakdowns["following_occurrence"] == [None, None, "1", None, "1", None, "2", None]
    assert breakdowns["antecedent_entities"] == ["0", "0", None, "1", None, "1", None, None]
    assert breakdowns["position"][0] == "1-20"


def test_adjacent_mentions_of_one_entity_are_two_mentions():
    # [A] [A]: the second is a new mention (L = 1 ended the first), so it reappears
    groups = perplexity.token_groups(stream(R=[1, 1, 0], E=[1, 1, 0], L=[1, 1, 1]))
    assert groups["reappearing_entities"].tolist() == [0, 1, 0]


def test_group_table_is_exp_of_the_mean_negative_log_probability():
    s = stream(R=[1, 0, 1, 0], E=[1, 0, 1, 0], L=[1, 1, 1, 1])
    log_probs = np.log([0.5, 0.25, 0.125, 0.5])
    table = perplexity.group_table([s], [log_probs])
    assert table["all"]["perplexity"] == pytest.approx(math.exp(-log_probs.mean()))
    assert table["reappearing_entities"] == {"perplexity": pytest.approx(8.0), "tokens": 1}
    assert table["non_entities"]["tokens"] == 2


def test_the_registry_builds_and_loads_every_model():
    assert set(LANGUAGE_MODELS) == {"entitynlm", "rnnlm", "dntm"}
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        model_kind("gpt")
    checkpoint = Checkpoint.load(pretrained("rnnlm.pt"))
    assert type(language_model(checkpoint)).__name__ == "RNNLM"


def test_the_bundled_rnnlm_keeps_its_perplexity_through_the_shared_command(capsys):
    # the same figure the main job prints for it (docs/entitynlm.md: 155.51 on the embedded sample)
    assert perplexity_command.main(["--checkpoint", str(pretrained("rnnlm.pt"))]) == 0
    assert "all                           155.51" in capsys.readouterr().out


def anonymised(*sentences: str) -> Document:
    """A document of whitespace-separated sentences whose <unkK> tokens are one-token mentions of entity K."""
    tokens, spans = [], []
    for sentence in sentences:
        words = sentence.split()
        spans.append((len(tokens), len(tokens) + len(words)))
        tokens.extend(words)
    mentions = [Mention(i, i + 1, ENTITY_TOKENS.index(token) + 1) for i, token in enumerate(tokens)
                if token in ENTITY_TOKENS]
    return Document("d", tokens, spans, mentions)


def test_clozes_are_sentences_with_an_entity_seen_in_an_earlier_sentence():
    document = anonymised("<unk1> met <unk2> .", "<unk3> saw <unk2> .", "<unk4> left .", "<unk1> and <unk3> .")
    found = clozes(document)
    assert [(c.sentence, c.answer, c.candidates) for c in found] == [(1, 2, (1, 2)), (3, 1, (1, 2, 3, 4))]
    filled = found[1].filled(4)
    assert filled.tokens[found[1].slot] == "<unk4>" and len(filled.sentences) == 4
    assert Mention(found[1].slot, found[1].slot + 1, 4) in filled.mentions


def test_mean_quantile_on_a_hand_made_case():
    # cloze 1: the answer beats both others (1); cloze 2: it beats two of three and ties the third (2/3)
    scores = [{1: -1.0, 2: -3.0, 3: -2.0}, {1: -5.0, 2: -4.0, 3: -4.0, 4: -6.0}]
    assert mean_quantile(scores, [1, 2]) == pytest.approx((1 + 2 / 3) / 2)


def test_the_benchmark_reports_mean_and_standard_error_over_seeds(tmp_path):
    from benchmarks import dntm

    assert dntm.mean_and_error([1.0, 2.0, 3.0]) == {"mean": 2.0, "standard_error": pytest.approx(1 / math.sqrt(3)),
                                                     "seeds": 3}
    assert dntm.mean_and_error([5.0])["standard_error"] is None
    args = dntm.build_parser().parse_args(["--corpus", "c", "--seeds", "0", "1", "--variants", "baseline",
                                           "--out", str(tmp_path), "--collect-only"])
    groups = {name: {"perplexity": value, "tokens": 1} for name, value in zip(perplexity.GROUPS, (10, 20, 30, 40))}
    figures = {figure: {"1": {"perplexity": 5.0, "tokens": 1}} for figure in dntm.FIGURES}
    bundled = Checkpoint.load(pretrained("rnnlm.pt"))
    for seed, quantile in ((0, 0.5), (1, 0.7)):
        folder = dntm.run_folder(tmp_path, "c", "baseline", seed)
        folder.mkdir(parents=True)
        (folder / "perplexity.json").write_text(json.dumps({"groups": {**groups, **figures}}))
        (folder / "cloze.json").write_text(json.dumps({"mean_quantile": quantile}))
        # the run's model.pt, which the benchmark reads the training options and the parameter count from
        dataclasses.replace(bundled, training={"args": {}}).save(folder / "model.pt")
    entry = dntm.collect(args)["variants"]["baseline"]
    assert entry["all"]["mean"] == 10 and entry["all"]["standard_error"] == 0
    assert entry["parameters"] == sum(tensor.numel() for tensor in bundled.weights["model"].values()
                                      if tensor.is_floating_point())
    assert entry["mean_quantile"]["mean"] == pytest.approx(0.6) and entry["mean_quantile"]["seeds"] == 2


def test_the_rnnlms_token_log_probs_scored_a_few_steps_at_a_time_sum_to_its_likelihood(
        monkeypatch: pytest.MonkeyPatch):
    checkpoint = Checkpoint.load(pretrained("rnnlm.pt"))
    model = language_model(checkpoint)
    documents = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    batch = make_batch(documents, checkpoint.vocabulary)  # two documents of unequal length: padding at the end
    with torch.no_grad():
        whole = model.token_log_probs(batch)
        monkeypatch.setattr("generative.layers.softmax.LOG_PROB_STEPS", 7)  # the softmax scores pieces of 7 steps
        pieces = model.token_log_probs(batch)
        assert torch.allclose(pieces, whole, atol=1e-5)
        assert torch.allclose(pieces.sum(-1), model.log_likelihood(batch), atol=1e-3)
