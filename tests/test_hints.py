"""The proposal that follows the coreference pipeline (issue 27), SMC resampling after any token, and E sampled
on given mentions: each keeps the estimator exact, checked against the enumerated marginal of a tiny model."""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import pyro
import pytest
import torch

from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.resolution.hints import pipeline_hints
from coref.resolution.pipeline import bundled_pipeline
from coref.resolution.rerank import DEFAULT_GRID
from generative.entitynlm.hints import CorefHints, StreamHint
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.state import Annotation
from inference.algorithms.resolver import link_pairs
from inference.algorithms.smc import particle_gibbs, sample_structures
from inference.evaluation.posterior_resolver import Calibration
from tests.test_entitynlm import EOS, WORDS, exact_log_marginal, tiny_batch, tiny_models

# WORDS = [4, 0, 5, 4]: the pipeline "reads" a two-token mention at 0 and a one-token one at 3, linked
HINT = StreamHint(start=torch.tensor([0, 3]), length=torch.tensor([2, 1]), linked=torch.tensor([True, True]),
                  antecedents=torch.tensor([[-1], [0]]), probabilities=torch.tensor([[1.0, 0.0], [0.2, 0.8]]))


def hinted(batch, weight: float, epsilon: float = 0.02) -> CorefHints:
    return CorefHints.of(batch, [HINT] * batch.size, weight, epsilon)


@pytest.mark.parametrize("resample", ["never", "token"])
@pytest.mark.parametrize("lookahead", [0.0, 0.7])
def test_the_hinted_proposal_keeps_the_estimate_exact(resample, lookahead):
    model, proposal = tiny_models()
    exact, _, _ = exact_log_marginal(model, WORDS)
    batch = tiny_batch([{"words": WORDS}])
    pyro.set_rng_seed(3)
    # 60,000 particles: the estimate's spread over seeds is then about 0.01, a third of the tolerance
    system = EntityNLMParticles(model, proposal, batch, 60_000, hints=hinted(batch, 0.7), lookahead=lookahead)
    sampled = sample_structures(system, EOS, resample, ess_threshold=0.5, history=False)
    assert sampled.log_marginal.item() == pytest.approx(exact.item(), abs=0.03)


def test_a_strong_hint_proposes_the_pipelines_structure():
    model, proposal = tiny_models()
    batch = tiny_batch([{"words": WORDS}])
    pyro.set_rng_seed(0)
    system = EntityNLMParticles(model, proposal, batch, 2_000, hints=hinted(batch, 0.99, 0.001))
    sampled = sample_structures(system, EOS, "never")
    R, E, L = (value[:, 0] for value in (sampled.R, sampled.E, sampled.L))
    followed = (R == torch.tensor([1, 1, 0, 1])).all(1) & (L[:, 0] == 2) & (E[:, 0] == 1)
    assert followed.float().mean() > 0.9
    # the second mention continues the first one's entity with the ranker's 0.8 (times the hint's share)
    same = (E[followed, 3] == 1).float().mean()
    assert 0.7 < same < 0.9
    unhinted = sample_structures(EntityNLMParticles(model, proposal, batch, 2_000), EOS, "never")
    assert ((unhinted.R[:, 0] == torch.tensor([1, 1, 0, 1])).all(1)).float().mean() < 0.5


def test_a_hint_must_leave_the_proposal_a_share():
    batch = tiny_batch([{"words": WORDS}])
    with pytest.raises(ValueError, match="weight"):
        hinted(batch, 1.0)


def test_given_mentions_sample_only_entities_and_weigh_by_the_exact_conditional():
    model, proposal = tiny_models()
    given = {"R": [1, 1, 0, 1], "E": [1, 1, 0, 1], "L": [2, 1, 1, 1]}
    batch = tiny_batch([{"words": WORDS, **given}])
    _, every, joint = exact_log_marginal(model, WORDS)
    consistent = [i for i, (R, _, L) in enumerate(every) if R == given["R"] and L == given["L"]]
    exact = torch.logsumexp(joint[consistent], 0)  # log p(x, R, L): E summed out
    pyro.set_rng_seed(2)
    system = EntityNLMParticles(model, proposal, batch, 20_000, hints=hinted(batch, 0.5),
                                mentions=Annotation.mentions_of(batch))
    sampled = sample_structures(system, EOS, "token")
    assert (sampled.R[:, 0] == torch.tensor(given["R"])).all()
    assert (sampled.L[:, 0] == torch.tensor(given["L"])).all()
    assert len(set(sampled.E[:, 0, 3].tolist())) == 2  # the last mention: the first's entity, or a new one
    assert sampled.log_marginal.item() == pytest.approx(exact.item(), abs=0.03)


def test_the_new_entity_bias_shifts_the_odds_of_a_new_entity_by_itself_and_the_sampler_targets_that_model():
    model, proposal = tiny_models()
    R, L = [1, 1, 0, 1], [2, 1, 1, 1]
    linked, new = ((R, [1, 1, 0, 1], L), (R, [1, 1, 0, 2], L))  # the last mention: the first's entity, or new
    _, every, joint = exact_log_marginal(model, WORDS)
    model.heads.entity.new_entity_bias = 1.5
    _, _, biased = exact_log_marginal(model, WORDS)

    def log_odds(scores: torch.Tensor) -> float:
        return (scores[every.index(new)] - scores[every.index(linked)]).item()

    # the two differ in the last E alone, whose normaliser they share: the odds move by the bias exactly
    assert log_odds(biased) == pytest.approx(log_odds(joint) + 1.5, abs=1e-4)
    assert not torch.allclose(biased, joint)  # the earlier choices' normalisers move too
    # the sampler on the given mentions: its weighted share of "new" is the biased model's posterior
    posterior_new = torch.softmax(biased[[every.index(linked), every.index(new)]], 0)[1].item()
    unbiased_new = torch.softmax(joint[[every.index(linked), every.index(new)]], 0)[1].item()
    batch = tiny_batch([{"words": WORDS, "R": R, "E": [1, 1, 0, 1], "L": L}])
    pyro.set_rng_seed(2)
    system = EntityNLMParticles(model, proposal, batch, 20_000, mentions=Annotation.mentions_of(batch))
    sampled = sample_structures(system, EOS, "never")
    share_new = (torch.softmax(sampled.log_weights[:, 0], 0) * (sampled.E[:, 0, 3] == 2)).sum().item()
    assert abs(posterior_new - unbiased_new) > 0.1
    assert share_new == pytest.approx(posterior_new, abs=0.02)


def test_particle_gibbs_on_given_mentions_starts_from_their_structure_and_keeps_the_best():
    model, proposal = tiny_models()
    given = {"R": [1, 1, 0, 1], "E": [1, 1, 0, 2], "L": [2, 1, 1, 1]}  # the pipeline's clusters: two entities
    batch = tiny_batch([{"words": WORDS, **given}])
    _, every, joint = exact_log_marginal(model, WORDS)
    start_joint = joint[every.index((given["R"], given["E"], given["L"]))]
    pyro.set_rng_seed(0)
    start = partial(EntityNLMParticles, model, proposal, batch, 3, mentions=Annotation.mentions_of(batch))
    chain = particle_gibbs(start, EOS, 4, "token", reference=Annotation.of(batch))
    assert chain.particles == 12 and chain.E[0, 0].tolist() == given["E"]  # the first pass keeps the start
    assert chain.log_joint[0, 0].item() == pytest.approx(start_joint.item(), abs=1e-4)
    assert chain.log_joint.max().item() >= start_joint.item() - 1e-4  # the MAP is at least as likely as the start


def test_token_resampling_resamples_between_sentence_ends():
    model, proposal = tiny_models()
    batch = tiny_batch([{"words": WORDS}])
    pyro.set_rng_seed(0)
    sentence = sample_structures(EntityNLMParticles(model, proposal, batch, 200), EOS, "sentence", ess_threshold=1.0)
    token = sample_structures(EntityNLMParticles(model, proposal, batch, 200), EOS, "token", ess_threshold=1.0)
    assert sentence.resamplings.item() == 0  # no sentence end before the last token
    assert token.resamplings.item() == len(WORDS) - 1


def test_pipeline_hints_are_encodable_and_distributions():
    document = load_corpus("sample", "test").documents[0]
    (hint,) = pipeline_hints(bundled_pipeline(), [document])
    assert len(hint) > 0
    assert all(first[1] <= second[0] for first, second in zip(hint.spans, hint.spans[1:]))  # outermost, disjoint
    assert all(end - start <= 25 for start, end in hint.spans)
    assert np.allclose(hint.probabilities.sum(1), 1.0)
    index = np.arange(len(hint))[:, None]
    assert ((hint.antecedents < index) | (hint.antecedents == -1)).all()
    assert (hint.clusters[hint.linked] > 0).all()
    kept = list(range(1, len(hint)))
    restricted = hint.restricted(kept, hint.spans[1:])
    assert np.allclose(restricted.probabilities.sum(1), 1.0)
    assert not (restricted.antecedents == -1).all() or len(hint) < 3
    response = hint.response(Document("d", document.tokens, document.sentences))
    assert len(response.mentions) == int(hint.linked.sum())


def set_partitions(size: int):
    """Every partition of ``size`` items as labels (restricted growth strings)."""
    if size == 0:
        yield []
        return
    for rest in set_partitions(size - 1):
        for label in range(max(rest, default=-1) + 2):
            yield [*rest, label]


def test_the_rankers_tree_score_is_each_partitions_best_tree_and_greedy_decoding_scores_highest():
    from coref.resolution.hints import CorefHint

    rng = np.random.default_rng(0)
    size, top = 6, 3
    antecedents = np.full((size, top), -1)
    probabilities = np.zeros((size, top + 1))
    for j in range(size):  # the top earlier mentions of each, by a random softmax; the rest of the mass to "new"
        listed = rng.permutation(j)[:top]
        weights = rng.dirichlet(np.ones(len(listed) + 2))
        antecedents[j, :len(listed)] = listed
        probabilities[j, 1:len(listed) + 1] = weights[:len(listed)]
        probabilities[j, 0] = 1 - probabilities[j, 1:].sum()
    greedy = np.argmax(probabilities, 1)
    clusters = np.arange(size)
    for j in range(size):  # the greedy clusters: each mention joins its most probable antecedent's
        if greedy[j] > 0:
            clusters[j] = clusters[antecedents[j, greedy[j] - 1]]
    hint = CorefHint([(2 * j, 2 * j + 1) for j in range(size)], np.ones(size), antecedents, probabilities,
                     np.ones(size, dtype=bool), clusters)

    def best_tree(labels):  # by hand: each mention's most probable arc from its cluster, or "new" for its first
        total = 0.0
        for j in range(size):
            if not any(labels[i] == labels[j] for i in range(j)):
                total += math.log(probabilities[j, 0])
                continue
            mates = [probabilities[j, k + 1] for k in range(top)
                     if antecedents[j, k] >= 0 and labels[antecedents[j, k]] == labels[j]]
            total += math.log(max(mates) if mates else probabilities[j][probabilities[j] > 0].min())
        return total

    partitions = np.array(list(set_partitions(size)))
    assert len(partitions) == 203  # Bell(6)
    scores = hint.tree_log_scores(partitions)
    np.testing.assert_allclose(scores, [best_tree(labels) for labels in partitions])
    best = partitions[np.argmax(scores)]
    assert all((best[i] == best[j]) == (clusters[i] == clusters[j]) for i in range(size) for j in range(size))
    assert hint.tree_log_scores(clusters * 7 + 1)[0] == pytest.approx(scores.max())  # labels are only names


def test_calibration_error_and_pairs():
    assert link_pairs(4, 2)[0].tolist() == [0, 0, 1, 1, 2]
    assert link_pairs(4, 2)[1].tolist() == [1, 2, 2, 3, 3]
    rng = np.random.default_rng(0)
    probabilities = rng.random(200_000)
    calibrated = Calibration(probabilities, rng.random(200_000) < probabilities)
    assert calibrated.ece < 0.01
    overconfident = Calibration(np.ones(1000), np.arange(1000) < 600)
    assert overconfident.ece == pytest.approx(0.4)
    assert overconfident.table() == [{"low": 0.9, "high": 1.0, "pairs": 1000, "predicted": 1.0, "observed": 0.6}]


def test_the_main_job_samples_with_hints_and_token_resampling(tmp_path, capsys):
    from inference.commands import marginal_ppl

    out = tmp_path / "result.json"
    argv = ["--particles", "8", "--baseline", "none", "--device", "cpu", "--resample", "token",
            "--hint-weight", "0.5", "--hint-temperature", "2", "--lookahead", "0", "--json", str(out)]
    assert marginal_ppl.main(argv) == 0
    result = json.loads(out.read_text())
    assert (result["resample"], result["hint_weight"], result["hint_temperature"]) == ("token", 0.5, 2.0)
    assert all(row["resamplings"] > 0 for row in result["per_document"])
    assert math.isfinite(result["perplexity"])
    plain = tmp_path / "plain.json"
    assert marginal_ppl.main(["--preset", "paper", "--sampler", "smc", "--particles", "8", "--baseline", "none",
                              "--device", "cpu", "--json", str(plain)]) == 0
    assert json.loads(plain.read_text())["perplexity"] != result["perplexity"]
    looked = tmp_path / "lookahead.json"
    assert marginal_ppl.main([*argv[:-1], str(looked), "--lookahead", "0.8"]) == 0
    with_lookahead = json.loads(looked.read_text())
    assert with_lookahead["lookahead"] == 0.8 and result["lookahead"] == 0.0
    assert math.isfinite(with_lookahead["perplexity"]) and with_lookahead["perplexity"] != result["perplexity"]


def test_the_main_job_runs_on_the_threads_asked_for_with_the_same_numbers(tmp_path, monkeypatch):
    """``--threads N`` sets torch's threads for the run; the settled sampler's numbers do not depend on them."""
    from inference.commands import marginal_ppl

    before, seen, run = torch.get_num_threads(), [], marginal_ppl.run
    monkeypatch.setattr(marginal_ppl, "run", lambda args: seen.append(torch.get_num_threads()) or run(args))
    estimates = {}
    for threads in (1, 2):
        out = tmp_path / f"{threads}.json"
        argv = ["--particles", "8", "--baseline", "none", "--device", "cpu", "--resample", "token", "--hint-weight",
                "0.5", "--lookahead", "0.8", "--threads", str(threads), "--json", str(out)]
        try:
            assert marginal_ppl.main(argv) == 0
        finally:
            torch.set_num_threads(before)
        result = json.loads(out.read_text())
        assert result["threads"] == threads  # beside the seconds they were measured on
        estimates[threads] = [row["log_likelihood"] for row in result["per_document"]]
    assert seen == [1, 2]
    assert estimates[1] == estimates[2]


def test_the_posterior_on_the_pipelines_mentions_is_scored_and_calibrated(tmp_path, capsys):
    from inference.commands import posterior

    out, figure = tmp_path / "result.json", tmp_path / "reliability.png"
    argv = ["--evaluate", "--given-mentions", "pipeline", "--particles", "6", "--method", "smc", "--device", "cpu",
            "--hint-weight", "0.3", "--lookahead", "0.5", "--sweeps", "2", "--reliability", str(figure),
            "--local-search", "2", "--ranker-weight", "1000", "--json", str(out)]
    assert posterior.main(argv) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    grid = {row["weight"]: row["conll_f1"] for row in result["map_by_ranker_weight"]}
    assert len(grid) == len(DEFAULT_GRID) and result["ranker_weight"] == 1000
    assert result["particle_map"]["conll_f1"] == grid[1000.0]  # climbed from the MAP at its ranker weight
    assert grid["inf"] == result["pipeline"]["conll_f1"]  # the ranker alone: its greedy partition, Gibbs's start
    assert "MAP CoNLL F1 by ranker weight" in printed and 0 < result["p_value_vs_pipeline"] <= 1
    assert result["local_search"] == 2 and f"made {result['moved_by_local_search']} single-mention moves" in printed
    assert "particles' MAP" in printed and 0 <= result["particle_map"]["conll_f1"] <= 1
    assert result["mentions"] > 0 and result["calibration"]["pairs"] > 0 and result["lookahead"] == 0.5
    assert result["sweeps"] == 2
    assert 0 <= result["calibration"]["ece"] <= 1
    assert sum(row["pairs"] for row in result["calibration"]["bins"]) == result["calibration"]["pairs"]
    assert "posterior MAP" in printed and "expected calibration error" in printed
    assert figure.read_bytes()[:4] == b"\x89PNG"
    plain = tmp_path / "plain.json"  # weight 0, no search: the posterior's own MAP
    assert posterior.main([*argv[:argv.index("--reliability")], "--json", str(plain)]) == 0
    result = json.loads(plain.read_text())
    assert result["ranker_weight"] == 0 and "particle_map" not in result
    assert result["posterior_map"]["conll_f1"] == result["map_by_ranker_weight"][0]["conll_f1"]
    detected = tmp_path / "detected.json"  # every detected span given: the posterior also decides singletons
    argv[argv.index("--given-mentions") + 1] = "detected"
    assert posterior.main([*argv[:argv.index("--reliability")], "--json", str(detected)]) == 0
    alone = json.loads(detected.read_text())
    assert alone["given_mentions"] == "detected" and result["given_mentions"] == "pipeline"
    assert alone["mentions"] > result["mentions"]  # the sample's pipeline leaves some spans alone
    assert alone["pipeline"] == result["pipeline"]  # its answer, singletons dropped, is the same


def test_local_link_probabilities_are_the_models_conditionals():
    from coref.document import Mention
    from generative.layers.batch import make_batch
    from inference.algorithms.resolver import local_links, local_log_conditionals
    from inference.algorithms.scoring import noise_free
    from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained

    checkpoint = noise_free(Checkpoint.load(pretrained("entitynlm.pt")))
    model = entitynlm_modules(checkpoint, "cpu")[0]
    words = "anna met tom . she gave him the book and he thanked her".split()
    labels = [1, 2, 1, 2, 2, 1]
    spans = [(0, 1), (2, 3), (4, 5), (6, 7), (10, 11), (12, 13)]
    document = Document("d", words, [(0, 4), (4, 13)], [Mention(s, e, c) for (s, e), c in zip(spans, labels)])
    links = local_links(model, checkpoint, document, "cpu", window=30)
    probabilities = links.probabilities()
    earlier, later = link_pairs(len(spans), 30)
    j = 4  # "he": join anna's cluster, tom's, or a new one; scored independently by the model's log-likelihood
    moved = [[*labels[:j], cluster, *labels[j + 1:]] for cluster in (1, 2, 3)]
    candidates = [document.replace(mentions=[Mention(s, e, c) for (s, e), c in zip(spans, row)]) for row in moved]
    with torch.no_grad():
        exact = torch.softmax(model.log_likelihood(make_batch(candidates, checkpoint.vocabulary)).double(), 0)
    for i in range(j):
        (pair,) = np.flatnonzero((earlier == i) & (later == j))
        assert probabilities[pair] == pytest.approx(float(exact[labels[i] - 1]), rel=1e-4)
    own = local_log_conditionals(model, checkpoint, document, "cpu")  # each mention's own cluster, exactly
    assert own[j].item() == pytest.approx(float(exact[labels[j] - 1].log()), abs=1e-4)
    flat = links.probabilities(temperature=1e6)  # tempered without bound: each of j's 3 candidates alike
    assert flat[(earlier == 0) & (later == j)] == pytest.approx(1 / 3, rel=1e-4)


def test_a_mention_alone_has_each_partition_once_among_its_local_moves():
    from coref.document import Mention
    from generative.layers.batch import make_batch
    from inference.algorithms.resolver import local_links, local_log_conditionals
    from inference.algorithms.scoring import noise_free
    from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained

    checkpoint = noise_free(Checkpoint.load(pretrained("entitynlm.pt")))
    model = entitynlm_modules(checkpoint, "cpu")[0]
    words = "anna met tom . she gave him the book and he thanked her".split()
    labels = [1, 2, 1, 3]  # "him" alone: joining anna's, tom's, or staying alone are its three partitions
    spans = [(0, 1), (2, 3), (4, 5), (6, 7)]
    document = Document("d", words, [(0, 4), (4, 13)], [Mention(s, e, c) for (s, e), c in zip(spans, labels)])
    links = local_links(model, checkpoint, document, "cpu", window=30)
    j = 3
    assert sorted(links.cluster[links.mention == j].tolist()) == [1, 2, 3]
    moved = [[*labels[:j], cluster] for cluster in (1, 2, 3)]
    candidates = [document.replace(mentions=[Mention(s, e, c) for (s, e), c in zip(spans, row)]) for row in moved]
    with torch.no_grad():
        exact = torch.softmax(model.log_likelihood(make_batch(candidates, checkpoint.vocabulary)).double(), 0)
    earlier, later = link_pairs(len(spans), 30)
    probabilities = links.probabilities()
    for i in range(j):
        (pair,) = np.flatnonzero((earlier == i) & (later == j))
        assert probabilities[pair] == pytest.approx(float(exact[labels[i] - 1]), rel=1e-4)
    assert local_log_conditionals(model, checkpoint, document, "cpu")[j].item() == pytest.approx(
        float(exact[2].log()), abs=1e-4)


def test_local_links_on_pieces_decide_every_pair_of_the_window_from_a_bounded_context():
    """A long text's local conditionals are scored on pieces (``--link-piece``), each read from the sentence of
    the window-th mention before its first: every pair of the window still decided, the work bounded."""
    from coref.document import Mention
    from inference.algorithms.resolver import link_pieces, local_links
    from inference.algorithms.scoring import noise_free
    from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained

    checkpoint = noise_free(Checkpoint.load(pretrained("entitynlm.pt")))
    model = entitynlm_modules(checkpoint, "cpu")[0]
    story = "anna met tom . she gave him the book and he thanked her .".split()  # 14 tokens
    cuts = [(0, 2), (2, 4), (4, 6), (6, 7), (7, 10), (10, 12), (12, 14)]  # a "sentence" per mention: cuts anywhere
    spans, labels = [(0, 1), (2, 3), (4, 5), (6, 7), (10, 11), (12, 13)], [1, 2, 1, 2, 2, 1]
    words, sentences, mentions = [], [], []
    for r in range(10):  # ten times over, each time with a third entity of its own for "the book"
        at = len(words)
        words += story
        sentences += [(at + s, at + e) for s, e in cuts]
        mentions += [Mention(at + s, at + e, c) for (s, e), c in zip([*spans, (7, 9)], [*labels, 3 + r])]
    document = Document("d", words, sentences, mentions)
    window, piece = 5, 30
    pieces = link_pieces(document, piece, window)
    assert len(pieces) >= 4
    for excerpt, first, offset in pieces:
        assert first >= window or offset == 0  # the window of its first mention is all there
        assert len(excerpt.tokens) <= piece + 3 + 14  # a piece, at most a sentence past it, and 5 mentions' context
        assert sorted(excerpt.mentions)[first:] and offset + len(excerpt.mentions) <= len(mentions)
    exact = local_links(model, checkpoint, document, "cpu", window=window)
    pieced = local_links(model, checkpoint, document, "cpu", window=window, piece_tokens=piece)
    np.testing.assert_array_equal(pieced.later, exact.later)
    np.testing.assert_array_equal(pieced.earlier_cluster, exact.earlier_cluster)
    np.testing.assert_array_equal(np.unique(pieced.mention), np.arange(len(mentions)))  # each moves once
    assert (pieced.probabilities(temperature=1e6) > 0).all()  # every pair's cluster is among its mention's moves
    excerpt, first, offset = pieces[2]  # a piece's moves are those of its excerpt, scored on it alone
    on_excerpt = local_links(model, checkpoint, excerpt, "cpu", window=window)
    own = on_excerpt.mention >= first
    mine = (pieced.mention >= offset + first) & (pieced.mention < offset + len(excerpt.mentions))
    np.testing.assert_allclose(pieced.score[mine], on_excerpt.score[own], atol=1e-4)
    whole = local_links(model, checkpoint, document, "cpu", window=window, piece_tokens=len(words))
    np.testing.assert_allclose(whole.score, exact.score, atol=1e-4)  # one piece: the exact computation


def test_link_rankings_name_each_move_by_its_clusters_latest_mention():
    from coref.document import Mention
    from inference.algorithms.resolver import LocalMoves, link_rankings

    words = "anna met tom . she gave him the book".split()
    document = Document("d", words, [(0, 4), (4, 9)],
                        [Mention(0, 1, 1), Mention(2, 3, 2), Mention(4, 5, 1), Mention(6, 7, 2)])
    moves = LocalMoves.of(document)
    links = moves.links(np.log(np.arange(1, len(moves.mention) + 1, dtype=float)))  # distinct scores
    probabilities = links.move_probabilities()
    rankings = link_rankings(document, links)
    assert [r.text for r in rankings] == ["anna", "tom", "she", "him"]
    first = rankings[0].antecedents  # anna stays first of its cluster, or leaves it alone: both a new entity
    assert len(first) == 1 and first[0].span is None and first[0].probability == pytest.approx(1.0)
    him = {a.text: a.probability for a in rankings[3].antecedents}
    at = {int(c): float(p) for c, p in zip(links.cluster[links.mention == 3], probabilities[links.mention == 3])}
    assert him == pytest.approx({"she": at[1], "tom": at[2], None: at[3]})  # cluster 1's latest is "she"
    assert [a.probability for a in rankings[3].antecedents] == sorted(him.values(), reverse=True)
    top = link_rankings(document, links, top=1)[3]
    assert len(top.antecedents) == 1 and top.remainder == pytest.approx(1 - max(him.values()))


def test_the_posterior_resolves_a_text_on_the_pipelines_mentions(tmp_path, capsys):
    from coref.io.conll import read_conll
    from coref.io.text import plain_document
    from inference.algorithms.posterior import GIVEN_MENTIONS_FILES, OUTPUT_FILES
    from inference.commands import posterior

    text = ("Anna met her brother Tom in Paris. She thanked him, and he smiled at her. "
            "Later Anna wrote to Tom about the city.")
    options = ["--text", text, "--hint-weight", "0.99", "--hint-temperature", "0.5", "--particles", "8", "--sweeps",
               "2", "--link-temperature", "3", "--device", "cpu"]
    out = tmp_path / "out"
    assert posterior.main([*options, "--given-mentions", "pipeline", "--link-piece", "10", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "log p(x, R, L)" in printed and "linked mentions given" in printed
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, *GIVEN_MENTIONS_FILES, "heatmap-text.png"])
    (best,), _ = read_conll(out / "map.conll")
    (pipeline,), _ = read_conll(out / "pipeline.conll")
    assert best.tokens == pipeline.tokens == plain_document(text).tokens  # the text's own tokens
    spans = sorted(m.span for m in pipeline.mentions)
    assert len(spans) >= 4 and sorted(m.span for m in best.mentions) == spans  # the pipeline's mentions, given
    links = json.loads((out / "links.json").read_text())["text"]
    assert [(row["start"], row["end"]) for row in links] == spans
    for row in links:
        listed = [a["probability"] for a in row["antecedents"]]
        assert row["mention_probability"] == 1 and sum(listed) + row["remainder"] == pytest.approx(1, abs=1e-5)
        assert all(a["antecedent"] is None or a["antecedent"]["end"] <= row["start"] for a in row["antecedents"])
    summary = json.loads((out / "summary.json").read_text())[0]
    assert summary["given_mentions"] == "pipeline" and summary["link_piece_tokens"] == 10
    assert summary["mentions"] == len(spans)
    import inference.api as elm  # the notebook's face of the same function: the same answer

    model = elm.load("entitynlm")
    state = torch.get_rng_state()
    resolved = model.resolve(text, particles=8, sweeps=2, link_piece=10)
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random state is left alone
    assert resolved.map.mentions == best.mentions and resolved.pipeline.mentions == pipeline.mentions
    assert [ranking.to_json() for ranking in resolved.links(3.0, 0.05, 5)] == links
    with pytest.raises(ValueError, match="given mentions are one of pipeline, detected"):
        model.resolve(text, mentions="gold")
    with pytest.raises(ValueError, match="sweeps must be an integer"):
        model.resolve(text, sweeps=0)

    def partition(document):
        clusters = {}
        for mention in document.mentions:
            clusters.setdefault(mention.entity, set()).add(mention.span)
        return {frozenset(cluster) for cluster in clusters.values()}

    ranked = tmp_path / "ranked"  # the ranker alone picks the pipeline's own clusters: Gibbs's start
    assert posterior.main([*options, "--given-mentions", "pipeline", "--ranker-weight", "1e6", "--out",
                           str(ranked)]) == 0
    (chosen,), _ = read_conll(ranked / "map.conll")
    assert partition(chosen) == partition(pipeline)
    detected = tmp_path / "detected"  # every detected span: the pipeline's singletons too
    assert posterior.main([*options, "--given-mentions", "detected", "--out", str(detected)]) == 0
    (alone,), _ = read_conll(detected / "pipeline.conll")
    assert {m.span for m in alone.mentions} > set(spans)


def test_the_local_search_climbs_to_a_structure_no_single_move_improves():
    from coref.document import Mention
    from inference.algorithms.resolver import LocalMoves, local_links
    from inference.algorithms.scoring import candidate_log_joint, noise_free
    from inference.evaluation.posterior_resolver import IMPROVEMENT, local_mode
    from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained

    checkpoint = noise_free(Checkpoint.load(pretrained("entitynlm.pt")))
    model = entitynlm_modules(checkpoint, "cpu")[0]
    words = "anna met tom . she gave him the book and he thanked her".split()
    spans = [(0, 1), (2, 3), (4, 5), (6, 7), (10, 11), (12, 13)]
    document = Document("d", words, [(0, 4), (4, 13)], [Mention(s, e, 1) for s, e in spans])  # one cluster

    def joint(structure: Document) -> float:
        moves = LocalMoves.of(structure)
        return candidate_log_joint(model, checkpoint, moves.document, [moves.partition_after([])], "cpu")[0]

    moves = LocalMoves.of(document)
    two_alone = [int(np.flatnonzero((moves.mention == j) & (moves.cluster == 2))[0]) for j in (1, 4)]  # new ones
    assert {frozenset({2}), frozenset({5})} <= moves.partition_after(two_alone)  # each alone in its own
    climbed, moved, found = local_mode(model, checkpoint, document, "cpu", rounds=100)
    assert moved > 0 and joint(climbed) > joint(document)
    assert [m.span for m in climbed.mentions] == spans
    links = local_links(model, checkpoint, climbed, "cpu")
    assert links.score.max() <= joint(climbed) + IMPROVEMENT  # a local mode: no single move raises the joint
    for name in ("mention", "cluster", "later", "earlier_cluster"):  # its own links are the climbed structure's
        np.testing.assert_array_equal(getattr(found, name), getattr(links, name))
    np.testing.assert_allclose(found.score, links.score, atol=1e-4)
    assert local_mode(model, checkpoint, climbed, "cpu", rounds=100)[1] == 0
    once, moved_once, its_links = local_mode(model, checkpoint, document, "cpu", rounds=1)  # stopped by rounds
    assert moved_once > 0 and joint(once) > joint(document)
    np.testing.assert_allclose(its_links.score, local_links(model, checkpoint, once, "cpu").score, atol=1e-4)
    no_mentions = Document("e", words, [(0, 4), (4, 13)], [])
    assert local_mode(model, checkpoint, no_mentions, "cpu", rounds=3)[1] == 0  # nothing to move, no error


def test_the_api_estimates_with_token_resampling_and_hints():
    import inference.api as elm

    model = elm.load("entitynlm")
    text = "Anna met her brother in Paris. She thanked him, and he smiled at her."
    plain = model.log_likelihood(text, "paper", sampler="smc", particles=10, seed=1)
    hinted = model.log_likelihood(text, particles=10, seed=1, lookahead=0.0)
    assert math.isfinite(hinted.log_p) and hinted.log_p != plain.log_p
    assert model.log_likelihood(text, particles=10, seed=1, lookahead=0.0) == hinted
    looked = model.log_likelihood(text, "paper", sampler="smc", particles=10, seed=1, resample="token",
                                  lookahead=0.8)
    assert math.isfinite(looked.log_p) and looked.log_p not in (plain.log_p, hinted.log_p)
    with pytest.raises(ValueError, match="lookahead"):
        elm.ProposalConfig(lookahead=1.0)


def test_the_lookahead_makes_the_weights_vary_less():
    """The model's own choice given each word (the estimate stays exact: the hinted test above, with it)."""
    model, proposal = tiny_models()
    batch = tiny_batch([{"words": WORDS}])
    spread = {}
    for share in (0.0, 0.9):
        pyro.set_rng_seed(5)
        system = EntityNLMParticles(model, proposal, batch, 4_000, lookahead=share)
        weights = sample_structures(system, EOS, "never", history=False)
        spread[share] = weights.log_weights.std().item()
    assert spread[0.9] < 0.8 * spread[0.0]


def test_the_lookahead_is_the_models_conditional_given_the_word():
    from generative.entitynlm.lockstep import ModelSites, ProposalSites
    from generative.entitynlm.lookahead import WordLookahead

    model, _ = tiny_models()  # sigma = 0: the candidate the model places is r_1 itself (eq. 7)
    batch = tiny_batch([{"words": WORDS}])
    states = model.encoder(batch)
    tracker = model.tracker(batch, 1, states, site=ModelSites(ProposalSites()))
    mention, (slots, entity), row_of = WordLookahead(model, tracker, states, batch, 0.5).choice(0)
    # at t = 0 no entity exists yet: R = 1 is the new one, the word read with the candidate the lookahead had the
    # model's table place (eq. 7); R = 0 with e_current
    assert tracker.prepared == 0 and int(tracker.entities.count) == 0
    h = states[:, 0]
    log_r = model.heads.mention_type(h).logits.log_softmax(-1)[0]  # eq. 3
    context = torch.stack([tracker.current[0, 0],
                           torch.nn.functional.normalize(model.heads.mention_type.entity_prototype, dim=-1)])
    log_x = model.softmax(h + model.entity_to_word(context)).log_prob(batch.words[:, 0].expand(2))  # eq. 6
    assert mention.item() == pytest.approx(torch.softmax(log_r + log_x, 0)[1].item(), rel=1e-5)
    assert row_of.tolist() == [[0]] and slots[0, 0].item() == 0 and entity[0, 0].item() == pytest.approx(1.0)
    # L: the model's own length distribution for the new entity (eq. 5), x_0 says nothing of it
    only_row = (torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long))
    length = WordLookahead(model, tracker, states, batch, 0.5).length_prior(0, torch.zeros((1, 1), dtype=torch.long),
                                                                            only_row)
    torch.testing.assert_close(length, model.heads.length(h, context[1:]).probs)
    with pytest.raises(ValueError, match="share"):
        WordLookahead(model, tracker, states, batch, 1.0)


def test_the_lookahead_reads_the_new_entity_the_model_placed_with_its_noise():
    """With sigma > 0 the lookahead's new entity is the candidate in the model's table, r_1 plus the noise the
    proposal drew (eq. 7), not r_1: it prepares the model's table before it reads it."""
    from generative.entitynlm.lockstep import ModelSites, ProposalSites
    from generative.entitynlm.lookahead import WordLookahead

    model, _ = tiny_models(new_entity_scale=0.5)
    batch = tiny_batch([{"words": WORDS}])
    states = model.encoder(batch)
    proposed = ProposalSites()
    proposed.values["new_entity"] = noise = torch.randn(1, 1, model.config.hidden_size)  # the proposal's draw
    tracker = model.tracker(batch, 1, states, site=ModelSites(proposed))
    mention, _, _ = WordLookahead(model, tracker, states, batch, 0.5).choice(0)
    prototype = model.heads.mention_type.entity_prototype
    candidate = torch.nn.functional.normalize(prototype + 0.5 * noise[0, 0], dim=-1)
    torch.testing.assert_close(tracker.entities.gather(torch.zeros((1, 1), dtype=torch.long))[0, 0], candidate)
    h = states[:, 0]
    log_r = model.heads.mention_type(h).logits.log_softmax(-1)[0]  # eq. 3
    context = torch.stack([torch.zeros_like(candidate), candidate])
    log_x = model.softmax(h + model.entity_to_word(context)).log_prob(batch.words[:, 0].expand(2))  # eq. 6
    assert mention.item() == pytest.approx(torch.softmax(log_r + log_x, 0)[1].item(), rel=1e-5)
    assert mention.item() != pytest.approx(
        torch.softmax(log_r + model.softmax(h + model.entity_to_word(torch.stack(
            [context[0], torch.nn.functional.normalize(prototype, dim=-1)]))).log_prob(batch.words[:, 0].expand(2)),
            0)[1].item(), rel=1e-3)  # r_1 alone would give another choice


def test_the_models_e_site_reads_the_lookaheads_eq_4_and_draws_and_weighs_the_same(monkeypatch):
    """The lookahead keeps eq. 4 of every row where a mention may start; the model's E site reads its rows from
    there instead of scoring them again: the same particles and weights as scoring them afresh."""
    from generative.entitynlm.model import EntityTracker

    model, proposal = tiny_models(new_entity_scale=0.3)
    batch = tiny_batch([{"words": WORDS}, {"words": WORDS[:7]}])

    def sampled():
        pyro.set_rng_seed(2)
        system = EntityNLMParticles(model, proposal, batch, 50, hints=hinted(batch, 0.5), lookahead=0.7)
        return sample_structures(system, EOS, "token")

    kept = sampled()
    assert kept.R.sum() > 0 and kept.E.max() > 1  # mentions of several entities: the E site read kept rows
    scored = EntityTracker.entity_logits

    def afresh(self, t, at, rows):  # what the lookahead kept is never read
        self.kept_entity_logits = None
        return scored(self, t, at, rows)

    monkeypatch.setattr(EntityTracker, "entity_logits", afresh)
    afresh = sampled()
    for name in ("R", "E", "L"):
        assert torch.equal(getattr(kept, name), getattr(afresh, name))
    torch.testing.assert_close(kept.log_weights, afresh.log_weights)
    torch.testing.assert_close(kept.log_marginal, afresh.log_marginal)


def test_copying_only_the_rows_read_later_changes_no_number(monkeypatch):
    """A resampling copies of each particle's memory of the pipeline's mentions only the rows a later step reads
    (:meth:`CorefHints.rows_read_later`): the same estimate as copying all of it."""
    import inference.api as elm

    model = elm.load("entitynlm")
    text = " ".join(["Anna met her brother in Paris. She thanked him, and he smiled at her."] * 6)

    def estimate():
        return model.log_likelihood(text, particles=10, seed=1, lookahead=0.0)

    windowed = estimate()
    monkeypatch.setattr(CorefHints, "rows_read_later", lambda self: [slice(None)] * self.row.shape[1])
    assert estimate() == windowed


def test_the_posterior_command_gives_its_new_entity_bias_to_the_sampled_model_and_the_link_scorer(monkeypatch,
                                                                                                  tmp_path):
    from inference.algorithms import resolver
    from inference.commands.posterior import main
    from inference.evaluation import posterior_resolver

    seen = []
    sampled, scored = resolver.posteriors, posterior_resolver.local_links

    def watched(function):
        return lambda model, *args, **kwargs: seen.append(model.heads.entity.new_entity_bias) or function(
            model, *args, **kwargs)

    monkeypatch.setattr(resolver, "posteriors", watched(sampled))
    monkeypatch.setattr(posterior_resolver, "local_links", watched(scored))
    out = tmp_path / "result.json"
    assert main(["--evaluate", "--given-mentions", "pipeline", "--corpus", "sample", "--split", "test",
                 "--particles", "4", "--hint-weight", "0.9", "--new-entity-bias", "1.5", "--json", str(out)]) == 0
    assert seen == [1.5] * 3  # the sampler's model, then the scorer of each test document's local links
    assert json.loads(out.read_text())["new_entity_bias"] == 1.5
