"""The class-factored softmax: its classes, its normalisation, broadcasting, sampling, and use as a Pyro site; and the
categorical the samplers draw from (normalised by log_softmax, drawn by the inverse CDF)."""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from generative.layers.categorical import Categorical
from generative.layers.softmax import ClassFactoredCategorical, ClassFactoredSoftmax, WordClasses, make_softmax

torch.set_flush_denormal(True)

COUNTS = [40, 0, 12, 12, 3, 90, 1, 7, 25, 2, 5, 1, 9, 60, 4, 2, 18, 1, 3, 6]  # V = 20, not sorted
HIDDEN = 6


def softmaxes() -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        make_softmax("class", HIDDEN, COUNTS),
        make_softmax("class", HIDDEN, COUNTS, 1),
        make_softmax("class", HIDDEN, COUNTS, len(COUNTS)),
        make_softmax("full", HIDDEN, COUNTS),
    ]


# ---- classes ------------------------------------------------------------------------------------------------


def check_partition(classes: WordClasses, counts: list[int], num_classes: int) -> None:
    """Every word in exactly one slot; classes non-empty, contiguous in order of decreasing count."""
    size = len(counts)
    assert classes.num_classes == num_classes
    assert torch.equal(classes.members[classes.word_class, classes.position], torch.arange(size))
    assert int(classes.member_mask.sum()) == size
    assert bool(classes.member_mask[:, 0].all())  # no empty class
    assert int(classes.member_mask.sum(-1).max()) == classes.max_class_size
    by_count = sorted(range(size), key=lambda w: (-counts[w], w))
    assert classes.word_class[by_count].tolist() == sorted(classes.word_class.tolist())
    for c in range(num_classes):
        in_class = [w for w in by_count if classes.word_class[w] == c]
        assert classes.members[c][classes.member_mask[c]].tolist() == in_class


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=60).filter(any), st.data())
def test_classes_partition_the_vocabulary(counts: list[int], data: st.DataObject) -> None:
    num_classes = data.draw(st.integers(1, len(counts)))
    check_partition(WordClasses.from_counts(counts, num_classes), counts, num_classes)
    check_partition(WordClasses.from_counts(counts, num_classes, power=1.0), counts, num_classes)


def test_default_is_about_sqrt_v_classes_and_deterministic() -> None:
    counts = [1000 // (rank + 1) for rank in range(400)]
    classes = WordClasses.from_counts(counts)
    assert classes.num_classes == 20
    check_partition(classes, counts, 20)
    again = WordClasses.from_counts(counts)
    assert all(torch.equal(a, b) for a, b in zip(classes.buffers(), again.buffers(), strict=True))


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_bins_have_about_equal_mass(power: float) -> None:
    """With no word heavier than a bin, each bin's mass is 1/C of the total within one word's mass."""
    counts = [50 + (7 * w) % 31 for w in range(300)]
    classes = WordClasses.from_counts(counts, 10, power)
    mass = torch.tensor(counts, dtype=torch.float64) ** power
    per_class = torch.zeros(10, dtype=torch.float64).index_add_(0, classes.word_class, mass)
    assert torch.allclose(per_class, mass.sum() / 10, atol=float(mass.max()))


def test_frequent_words_get_classes_of_their_own() -> None:
    classes = WordClasses.from_counts([1000, 900, 10, 9, 8, 7, 6, 5, 4, 3], 4, power=1.0)
    assert classes.word_class.tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("counts, num_classes", [([3, 2], 3), ([3, 2], 0), ([0, 0], 1), ([1, -1], 1)])
def test_invalid_classes_are_errors(counts: list[int], num_classes: int) -> None:
    with pytest.raises(ValueError):
        WordClasses.from_counts(counts, num_classes)


def test_unknown_softmax_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown softmax"):
        make_softmax("hierarchical", HIDDEN, COUNTS)
    with pytest.raises(ValueError, match="class-factored"):
        make_softmax("full", HIDDEN, COUNTS, 4)


# ---- the distribution ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("softmax", softmaxes())
def test_probabilities_over_the_vocabulary_sum_to_one(softmax: torch.nn.Module) -> None:
    v = 3 * torch.randn(4, 3, HIDDEN)
    every_word = torch.arange(len(COUNTS)).view(-1, 1, 1)
    log_probs = softmax(v).log_prob(every_word)
    assert log_probs.shape == (len(COUNTS), 4, 3)
    assert torch.allclose(log_probs.logsumexp(0), torch.zeros(4, 3), atol=1e-5)
    assert torch.allclose(softmax(v).logits, log_probs.permute(1, 2, 0), atol=1e-5)


def test_class_factored_is_the_product_of_class_and_word_softmaxes() -> None:
    """The factorisation written out for one vector, word by word."""
    softmax = make_softmax("class", HIDDEN, COUNTS)
    v = torch.randn(HIDDEN)
    classes = softmax.word_classes
    class_log_probs = torch.log_softmax(softmax.classes.weight @ v + softmax.classes.bias, -1)
    word_logits = softmax.words.weight @ v + softmax.words.bias
    for word in range(len(COUNTS)):
        in_class = classes.word_class == classes.word_class[word]
        expected = class_log_probs[classes.word_class[word]] + word_logits[word] - word_logits[in_class].logsumexp(0)
        assert torch.allclose(softmax(v).log_prob(torch.tensor(word)), expected, atol=1e-6)


@pytest.mark.parametrize("softmax", softmaxes())
@pytest.mark.parametrize("batch", [(5,), (5, 7)])
def test_one_observation_broadcasts_over_particles(softmax: torch.nn.Module, batch: tuple[int, ...]) -> None:
    """(P, *batch, H) vectors against (*batch,) words equals scoring each particle on its own."""
    v = torch.randn(4, *batch, HIDDEN)
    words = torch.randint(len(COUNTS), batch)
    log_probs = softmax(v).log_prob(words)
    assert log_probs.shape == (4, *batch)
    for particle in range(4):
        assert torch.allclose(log_probs[particle], softmax(v[particle]).log_prob(words), atol=1e-6)
    full = softmax(v).logits.gather(-1, words.expand(4, *batch).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(log_probs, full, atol=1e-5)


@pytest.mark.parametrize("kind", ["class", "full"])
@pytest.mark.parametrize("shapes", [((3, 11), (3, 11)), ((2, 3, 11), (3, 11)), ((1, 11), (11,)), ((3, 11), (3, 1))])
def test_many_steps_are_scored_a_piece_at_a_time_with_the_same_values_and_gradients(
        monkeypatch: pytest.MonkeyPatch, kind: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """Beyond LOG_PROB_STEPS steps (the last batch dimension) log_prob scores pieces, so a book's gathered class
    rows, or its full softmax's logits, are not held at once: the same log-probabilities and gradients as one
    pass, for words that broadcast against particles, and a word shared along the steps (not cut)."""
    softmax = make_softmax(kind, HIDDEN, COUNTS)
    v_shape, word_shape = shapes
    v = torch.randn(*v_shape, HIDDEN, requires_grad=True)
    words = torch.randint(len(COUNTS), word_shape)
    whole = softmax(v).log_prob(words)
    (whole_grad,) = torch.autograd.grad(whole.sum(), v)
    monkeypatch.setattr("generative.layers.softmax.LOG_PROB_STEPS", 4)
    scored = []
    kind_of = type(softmax(v))
    piece = kind_of._log_prob
    monkeypatch.setattr(kind_of, "_log_prob",
                        lambda self, *args: scored.append(args[1].shape) or piece(self, *args))
    pieces = softmax(v).log_prob(words)
    assert len(scored) == (3 if word_shape[-1] == 11 else 1)  # 4 + 4 + 3 steps
    (pieces_grad,) = torch.autograd.grad(pieces.sum(), v)
    assert pieces.shape == whole.shape
    assert torch.allclose(pieces, whole, atol=1e-6) and torch.allclose(pieces_grad, whole_grad, atol=1e-6)


@pytest.mark.parametrize("shapes", [((7,), (1,)), ((4, 1), (1,)), ((3,), ()), ((2, 3), (1, 1)), ((1,), (1,))])
def test_one_word_at_many_vectors_is_scored_by_products_with_the_general_values_and_gradients(
        shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    """A word of one element against a batch of vectors (a sampler's contexts) takes the path of two matrix
    products: the values and gradients of the general path (the word expanded to the batch) and of the logits."""
    softmax = make_softmax("class", HIDDEN, COUNTS)
    v_shape, word_shape = shapes
    v = torch.randn(*v_shape, HIDDEN, requires_grad=True)
    for word in range(len(COUNTS)):  # a word of each class, padded or not
        one = torch.full(word_shape, word)
        by_products = softmax(v).log_prob(one)
        (by_products_grad,) = torch.autograd.grad(by_products.sum(), v)
        general = softmax(v).log_prob(one.expand(np.broadcast_shapes(v_shape, word_shape)).clone())
        (general_grad,) = torch.autograd.grad(general.sum(), v)
        assert by_products.shape == general.shape
        torch.testing.assert_close(by_products, general)
        torch.testing.assert_close(by_products_grad, general_grad)
        torch.testing.assert_close(by_products, softmax(v).logits[..., word].expand(general.shape))


def test_gradient_reaches_only_the_observed_class() -> None:
    softmax = make_softmax("class", HIDDEN, COUNTS)
    words = torch.tensor([5, 5, 13])
    softmax(torch.randn(2, 3, HIDDEN)).log_prob(words).sum().backward()
    touched = softmax.words.weight.grad.abs().sum(-1) > 0
    in_observed_classes = torch.isin(softmax.word_classes.word_class, softmax.word_classes.word_class[words])
    assert torch.equal(touched, in_observed_classes)


@pytest.mark.parametrize("softmax", softmaxes())
def test_sampling_frequencies_match_probabilities(softmax: torch.nn.Module) -> None:
    torch.manual_seed(1)
    distribution = softmax(torch.randn(HIDDEN))
    samples = distribution.sample((20_000,))
    assert samples.shape == (20_000,)
    observed = torch.bincount(samples, minlength=len(COUNTS))
    expected = distribution.logits.detach().double().exp() * len(samples)
    assert float(expected.min()) > 5  # enough per cell for the chi-square approximation
    assert chisquare(observed, expected * len(samples) / expected.sum()).pvalue > 1e-3


def test_sample_shape_is_sample_then_batch() -> None:
    softmax = make_softmax("class", HIDDEN, COUNTS)
    samples = softmax(torch.randn(3, 2, HIDDEN)).sample((5,))
    assert samples.shape == (5, 3, 2)
    assert int(samples.min()) >= 0 and int(samples.max()) < len(COUNTS)


@pytest.mark.parametrize("softmax", softmaxes())
def test_masked_pyro_site_in_a_plate(softmax: torch.nn.Module) -> None:
    """``X`` as EntityNLM emits it: (P, B, T) under particles and documents plates, padding masked out."""
    v = torch.randn(4, 3, 5, HIDDEN)
    words = torch.randint(len(COUNTS), (3, 5))
    mask = torch.arange(5) < torch.tensor([[5], [2], [4]])

    def model() -> None:
        with pyro.plate("particles", 4, dim=-2), pyro.plate("documents", 3, dim=-1):
            pyro.sample("X", softmax(v).mask(mask).to_event(1), obs=words)

    trace = pyro.poutine.trace(model).get_trace()
    trace.compute_log_prob()
    expected = torch.where(mask, softmax(v).log_prob(words), 0.0).sum(-1)
    assert trace.nodes["X"]["log_prob"].shape == (4, 3)
    assert torch.allclose(trace.nodes["X"]["log_prob"], expected)
    assert torch.allclose(trace.log_prob_sum(), expected.sum())


def test_expand_for_a_plate() -> None:
    """A distribution with fewer batch dimensions than its plates is expanded, as Pyro does at a site."""
    softmax = make_softmax("class", HIDDEN, COUNTS)
    v = torch.randn(HIDDEN)
    expanded = softmax(v).expand(torch.Size([4, 3]))
    assert expanded.batch_shape == (4, 3)
    assert torch.allclose(expanded.log_prob(torch.tensor(7)), softmax(v).log_prob(torch.tensor(7)).expand(4, 3))


def test_words_outside_the_vocabulary_are_rejected() -> None:
    softmax = ClassFactoredSoftmax(HIDDEN, COUNTS)
    distribution = ClassFactoredCategorical(torch.randn(2, HIDDEN), softmax, validate_args=True)
    assert distribution.support.upper_bound == len(COUNTS) - 1
    with pytest.raises(ValueError, match="support"):
        distribution.log_prob(torch.tensor([0, len(COUNTS)]))


# ---- the categorical normalised by log_softmax ----------------------------------------------------------------


def test_the_log_softmax_categorical_is_pyros_categorical() -> None:
    """The same log-densities (to rounding), probabilities, expansion and support as ``dist.Categorical``; the probs
    form is Pyro's own, and bad logits are still refused."""
    logits = torch.randn(3, 4, 7) * 5
    logits[0, 0, 2] = -1e4  # an unavailable slot, as eq. 4 marks them
    ours, pyros = Categorical(logits=logits), dist.Categorical(logits=logits)
    values = torch.randint(0, 7, (3, 4))
    torch.testing.assert_close(ours.log_prob(values), pyros.log_prob(values))
    torch.testing.assert_close(ours.probs, pyros.probs)
    assert ours.batch_shape == pyros.batch_shape and ours.event_shape == pyros.event_shape
    expanded = ours.expand((2, 3, 4))
    assert isinstance(expanded, Categorical) and expanded.batch_shape == (2, 3, 4)
    torch.testing.assert_close(expanded.log_prob(values), pyros.expand((2, 3, 4)).log_prob(values))
    assert ours.sample((5,)).shape == (5, 3, 4) and ours.sample().dtype == torch.long
    assert torch.equal(ours.enumerate_support(), pyros.enumerate_support())
    probs = torch.softmax(logits, -1)
    torch.testing.assert_close(Categorical(probs=probs).logits, dist.Categorical(probs=probs).logits)
    with pytest.raises(ValueError):
        Categorical(logits=torch.tensor(0.0))
    with pytest.raises(ValueError):
        Categorical(logits=torch.tensor([0.0, float("nan")]), validate_args=True)


@pytest.mark.parametrize("form", ["logits", "probs"])
def test_the_log_softmax_categorical_draws_from_its_distribution(form: str) -> None:
    """Draws by the inverse cumulative distribution follow the probabilities (chi-square), never an impossible
    category (probability 0 first, inside and last, and eq. 4's -1e4 logits)."""
    torch.manual_seed(3)
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0], [0.5, 0.0, 0.25, 0.25, 0.0, 0.0]])
    impossible = torch.where(probs > 0, probs.log(), torch.tensor(-1e4))
    categorical = Categorical(probs=probs) if form == "probs" else Categorical(logits=impossible)
    drawn = categorical.sample((40_000,))  # (n, 2)
    for row in range(2):
        counts = torch.bincount(drawn[:, row], minlength=6)
        possible = probs[row] > 0
        assert not counts[~possible].any()
        assert chisquare(counts[possible].numpy(), (probs[row][possible] * 40_000).numpy()).pvalue > 1e-3
