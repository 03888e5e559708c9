"""The Kneser-Ney n-gram baseline: proper distributions, Chen & Goodman's discounts, agreement with nltk."""

from __future__ import annotations

import json
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from coref.corpora.preprocess import BOS, Vocabulary, preprocess_documents
from coref.corpora.registry import load_corpus
from generative.baselines.ngram import KneserNeyConfig, KneserNeyLM, modified_discounts
from generative.layers.batch import token_stream

BOS_ID = 0
FALLBACK = (0.5, 1.0, 1.5)


def markov_streams(vocab_size: int, lengths: list[int], seed: int) -> list[list[int]]:
    """Documents from one random second-order Markov chain over the words 1 .. vocab_size - 1.

    Each context's distribution is peaked and its mean is Zipfian, so that, as in text, the count-of-counts
    n1..n4 are non-zero and modified Kneser-Ney discounts can be estimated at the lower orders.
    """
    rng = np.random.default_rng(seed)
    words = vocab_size - 1
    zipf = 1.0 / np.arange(1, words + 1)
    transition = rng.dirichlet(0.1 * words * zipf / zipf.sum(), size=(words + 1, words + 1))
    streams = []
    for length in lengths:
        previous, stream = (0, 0), []
        for _ in range(length):
            word = int(rng.choice(words, p=transition[previous])) + 1
            stream.append(word)
            previous = (previous[1], word)
        streams.append(stream)
    return streams


def contexts_to_check(model: KneserNeyLM, streams: list[list[int]], seed: int) -> list[list[int]]:
    """Contexts of every kind: from the streams (seen at every order), random (mostly unseen), short, long."""
    rng = np.random.default_rng(seed)
    width = max(model.order - 1, 1)
    padded = [[BOS_ID] * width + stream for stream in streams]
    seen = [p[t : t + width] for p in padded for t in range(0, len(p) - width, 7)]
    unseen = rng.integers(0, model.vocab_size, size=(30, width)).tolist()
    return [*seen, *unseen, [], [BOS_ID] * width, seen[-1][-1:], seen[-1][-2:], seen[0] + seen[1]]


VOCAB_SIZE = 100  # 99 words and <s> (id 0)


@pytest.fixture(scope="module")
def markov() -> tuple[list[list[int]], list[list[int]]]:
    """Train and held-out documents of the same Markov chain."""
    documents = markov_streams(VOCAB_SIZE, [800, 700, 900, 400, 300], seed=0)
    return documents[:3], documents[3:]


def test_modified_discounts_hand_example() -> None:
    # n1..n4 = 10, 4, 2, 1: Y = 10/18, D1 = 1 - 2Y 4/10 = 5/9, D2 = 2 - 3Y 2/4 = 7/6, D3+ = 3 - 4Y 1/2 = 17/9
    discounts = modified_discounts({1: 10, 2: 4, 3: 2, 4: 1, 7: 5})
    assert discounts == pytest.approx([Fraction(5, 9), Fraction(7, 6), Fraction(17, 9)], abs=1e-15)
    assert modified_discounts({1: 10, 2: 4, 3: 2}) is None  # n4 = 0: D3+ undefined
    assert modified_discounts({1: 10, 2: 1, 3: 100, 4: 1}) is None  # D2 = 2 - 250 < 0


def test_order_one_is_the_smoothed_unigram() -> None:
    stream = [1, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5]  # counts 1, 1, 2, 3, 4: n1..n4 = 2, 1, 1, 1
    model = KneserNeyLM.fit([stream], vocab_size=7, bos=BOS_ID, config=KneserNeyConfig(order=1))
    d1, d2, d3 = 0.5, 0.5, 1.0  # Y = 1/2, D1 = 1 - 2Y/2, D2 = 2 - 3Y, D3+ = 3 - 4Y
    assert model.discounts == [pytest.approx((d1, d2, d3), abs=1e-15)]
    gamma = (2 * d1 + d2 + 2 * d3) / 11
    counts = [0, 1, 1, 2, 3, 4, 0]
    expected = [0.0] + [(c - [0, d1, d2, d3, d3][c]) / 11 + gamma / 6 for c in counts[1:]]
    np.testing.assert_allclose(model.distribution([5, 5]), expected, rtol=1e-12)
    unsmoothed = KneserNeyLM.fit([stream], vocab_size=7, bos=BOS_ID, config=KneserNeyConfig(order=1, discount=0.0))
    np.testing.assert_allclose(unsmoothed.distribution([]), np.array(counts) / 11, rtol=1e-12)


def test_lower_orders_discount_continuation_counts(markov) -> None:
    train, _ = markov
    model = KneserNeyLM.fit(train, vocab_size=VOCAB_SIZE, bos=BOS_ID, config=KneserNeyConfig(order=3))
    assert model.fallback_orders == []
    trigrams = Counter(tuple(([BOS_ID] * 2 + s)[t : t + 3]) for s in train for t in range(len(s)))
    bigram_continuations = Counter(trigram[1:] for trigram in trigrams)  # N1+(. v w): distinct words before v w
    unigram_continuations = Counter(bigram[1:] for bigram in bigram_continuations)
    for order, counts in enumerate([unigram_continuations, bigram_continuations, trigrams], start=1):
        assert model.discounts[order - 1] == modified_discounts(Counter(counts.values()))


@pytest.mark.parametrize("order", [1, 2, 3, 5])
@pytest.mark.parametrize("discount", ["modified", 0.8])
def test_every_context_gives_a_distribution(markov, order: int, discount) -> None:
    train, held_out = markov
    config = KneserNeyConfig(order=order, discount=discount, discount_fallback=FALLBACK)
    model = KneserNeyLM.fit(train, VOCAB_SIZE + 2, BOS_ID, config)  # the last two words are never seen
    for context in contexts_to_check(model, train + held_out, seed=order):
        p = model.distribution(context)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert p[BOS_ID] == 0.0 and (np.delete(p, BOS_ID) > 0).all()


def test_log_prob_reads_the_document_history(markov) -> None:
    train, held_out = markov
    model = KneserNeyLM.fit(train, VOCAB_SIZE, BOS_ID, KneserNeyConfig(discount_fallback=FALLBACK))
    stream = held_out[0]
    padded = [BOS_ID] * 4 + stream
    expected = [math.log(model.probability(padded[: t + 4], w)) for t, w in enumerate(stream)]
    np.testing.assert_allclose(model.log_prob(stream), expected, rtol=1e-15)
    assert model.perplexity(held_out) == pytest.approx(
        math.exp(-sum(model.log_prob(s).sum() for s in held_out) / sum(map(len, held_out)))
    )


def test_higher_order_beats_unigram(markov) -> None:
    train, held_out = markov

    def perplexity(order: int) -> float:
        config = KneserNeyConfig(order, discount_fallback=FALLBACK)
        return KneserNeyLM.fit(train, VOCAB_SIZE, BOS_ID, config).perplexity(held_out)

    unigram = perplexity(1)
    assert perplexity(3) < 0.9 * unigram and perplexity(5) < 0.9 * unigram


def test_state_dict_round_trip(markov) -> None:
    train, held_out = markov
    model = KneserNeyLM.fit(train, VOCAB_SIZE + 2, BOS_ID, KneserNeyConfig(order=4, discount_fallback=FALLBACK))
    restored = KneserNeyLM.from_state_dict(json.loads(json.dumps(model.state_dict())))
    assert restored.config == model.config and restored.discounts == model.discounts
    for stream in held_out:
        np.testing.assert_array_equal(restored.log_prob(stream), model.log_prob(stream))


def test_rejects_what_it_cannot_model(markov) -> None:
    train, _ = markov
    with pytest.raises(ValueError, match="discount_fallback"):
        KneserNeyLM.fit([[1, 2, 3, 1, 2]], 5, BOS_ID, KneserNeyConfig(order=2))
    model = KneserNeyLM.fit(train, VOCAB_SIZE, BOS_ID, KneserNeyConfig(order=2))
    for stream in ([1, BOS_ID, 2], [1, VOCAB_SIZE]):
        with pytest.raises(ValueError, match="not a predictable word"):
            model.log_prob(stream)
    with pytest.raises(ValueError, match="discount"):
        KneserNeyConfig(discount=1.5)


def test_sample_corpus_perplexity() -> None:
    documents, _ = preprocess_documents(load_corpus("sample", "train").documents)
    vocabulary = Vocabulary.build(documents)
    dev, _ = preprocess_documents(load_corpus("sample", "dev").documents)
    streams = [token_stream(document, vocabulary).words for document in documents]
    config = KneserNeyConfig(discount_fallback=FALLBACK)  # 418 training tokens: n3 = n4 = 0 from order 3 on
    model = KneserNeyLM.fit(streams, len(vocabulary), vocabulary.index(BOS), config)
    assert model.fallback_orders == [3, 4, 5]
    perplexity = model.perplexity([token_stream(document, vocabulary).words for document in dev])
    assert 1.0 < perplexity < len(vocabulary) - 1  # better than uniform over the words


class TestAgainstNltk:
    """With one fixed discount, our model is nltk's ``KneserNeyInterpolated`` but for the unigram level.

    nltk ends the recursion at the undiscounted continuation unigram N1+(. w) / N1+(. .), which gives unseen
    words probability 0; Chen & Goodman (and this module) discount it too and interpolate with the uniform
    distribution. The subclass below makes only that change, so every higher-order term (raw counts at the
    top, continuation counts below, gamma, unseen contexts handing all mass down) is nltk's own code. nltk is
    fed exactly the k-grams ending at the targets of the <s>-padded documents, as our model counts them.
    """

    @staticmethod
    def nltk_model(train: list[list[int]], order: int, discount: float, support: int):
        pytest.importorskip("nltk.lm", reason="nltk is a test dependency")
        from nltk.lm.models import InterpolatedLanguageModel
        from nltk.lm.smoothing import KneserNey

        class UniformBaseKneserNey(KneserNey):
            def unigram_score(self, word):
                continuation, total = self._continuation_counts(word)
                seen_words = len(self.counts.unigrams)
                return max(continuation - self.discount, 0) / total + self.discount * seen_words / total / support

        model = InterpolatedLanguageModel(UniformBaseKneserNey, order, params={"discount": discount, "order": order})
        ngrams = []
        for stream in train:
            padded = [str(w) for w in [BOS_ID] * (order - 1) + stream]
            ngrams.append(
                [tuple(padded[t + order - k : t + order]) for t in range(len(stream)) for k in range(1, order + 1)]
            )
        model.fit(ngrams, vocabulary_text=[str(w) for w in range(support + 1)])
        return model

    @pytest.mark.parametrize("order", [2, 3, 4])
    def test_probabilities_equal_nltk(self, order: int) -> None:
        documents = markov_streams(8, [120, 90, 60], seed=2)  # words 1..7: word 8 is never seen
        train, held_out = documents[:2], documents[2:]
        ours = KneserNeyLM.fit(train, vocab_size=9, bos=BOS_ID, config=KneserNeyConfig(order=order, discount=0.75))
        theirs = self.nltk_model(train, order, discount=0.75, support=8)
        for context in contexts_to_check(ours, train[:1] + held_out, seed=order):
            ours_p = ours.distribution(context)[1:]
            theirs_p = [theirs.score(str(w), [str(c) for c in context]) for w in range(1, 9)]
            np.testing.assert_allclose(ours_p, theirs_p, rtol=1e-9, atol=0)
