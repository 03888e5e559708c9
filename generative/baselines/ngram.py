"""The paper's n-gram baseline: an interpolated modified Kneser-Ney 5-gram (Ji et al. 2017, §5.1, KenLM).

Chen & Goodman (1998, §3 and §4.1.6) define it; with ``c`` the count of an n-gram at order ``k``,

    p_k(w | h) = (c(h w) - D_k(c(h w))) / sum_v c(h v)  +  gamma_k(h) p_{k-1}(w | h'),
    gamma_k(h) = sum_v D_k(c(h v)) / sum_v c(h v),

where ``h'`` drops the oldest word of ``h``, ``D_k(c)`` is D1, D2 or D3+ for c = 1, 2, >= 3 (estimated per order
from the count-of-counts n1..n4, :func:`modified_discounts`), and ``p_0`` is uniform over the vocabulary. At
the highest order ``c`` is the raw count; below it is the continuation count N1+(. h w): the number of distinct
words seen before ``h w``, because a lower order only speaks when the longer context did not settle the word.
A context never seen at some order passes the whole mass to the order below (gamma = 1, no alpha term).

The model reads exactly the stream the neural models predict (:func:`generative.layers.batch.token_stream`: word ids,
``</s>`` after each sentence), with the history crossing sentence boundaries as the RNNLM's does and reset at
every document, where ``order - 1`` copies of ``<s>`` are padded on the left. ``<s>`` is context only: it is
never predicted, so the support (and the uniform distribution ``p_0``) is the vocabulary less ``<s>``. KenLM
itself cannot be used as it is: the pip package has no trainer (``lmplz``), and ``lmplz`` refuses ``<s>``,
``</s>`` and ``<unk>`` inside its input lines, which our streams carry as words.

Everything is determined by the raw counts of the ``order``-grams that end at each target, so that is what
:meth:`KneserNeyLM.state_dict` stores.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

Ngram = tuple[int, ...]


@dataclass(frozen=True)
class KneserNeyConfig:
    """The n-gram order and the discounting.

    ``discount="modified"`` estimates three discounts per order (Chen & Goodman's modified Kneser-Ney, as
    KenLM); a number in [0, 1] is one fixed discount for every count and order (plain interpolated Kneser-Ney,
    as ``nltk.lm.KneserNeyInterpolated``). When the count-of-counts of an order cannot give valid modified
    discounts (a count-of-count is zero, or a discount falls outside [0, c], as on tiny corpora), fitting
    fails unless ``discount_fallback`` gives (D1, D2, D3+) to use for that order instead (KenLM's
    ``--discount_fallback``, whose values are 0.5, 1, 1.5).
    """

    order: int = 5
    discount: str | float = "modified"
    discount_fallback: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        if self.order < 1:
            raise ValueError(f"order must be at least 1, got {self.order}")
        if isinstance(self.discount, str):
            if self.discount != "modified":
                raise ValueError(f"discount must be 'modified' or a number in [0, 1], got {self.discount!r}")
        elif not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"a fixed discount must lie in [0, 1] for probabilities to sum to 1, got {self.discount}")
        if self.discount_fallback is not None:
            object.__setattr__(self, "discount_fallback", tuple(float(d) for d in self.discount_fallback))
            if not _valid_discounts(self.discount_fallback):
                raise ValueError(f"discount_fallback must satisfy 0 <= D_c <= c, got {self.discount_fallback}")


def _valid_discounts(discounts: Sequence[float]) -> bool:
    """Whether D_c lies in [0, c] for c = 1, 2, 3, so that no discounted count is negative (KenLM's check)."""
    return len(discounts) == 3 and all(0.0 <= d <= c for c, d in enumerate(discounts, start=1))


def modified_discounts(count_of_counts: Mapping[int, int]) -> tuple[float, float, float] | None:
    """(D1, D2, D3+) of Chen & Goodman (1998, eq. 26) from n_r = the number of n-grams with count r.

    Y = n1 / (n1 + 2 n2),  D1 = 1 - 2Y n2/n1,  D2 = 2 - 3Y n3/n2,  D3+ = 3 - 4Y n4/n3.
    Returns None when they are undefined (some n_r, r = 1..4, is zero) or outside [0, c].
    """
    n1, n2, n3, n4 = (count_of_counts.get(r, 0) for r in (1, 2, 3, 4))
    if min(n1, n2, n3, n4) == 0:
        return None
    y = n1 / (n1 + 2 * n2)
    discounts = (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
    return discounts if _valid_discounts(discounts) else None


class _Order(NamedTuple):
    """One order k: alpha(w | h) = (c(h w) - D(c(h w))) / sum_v c(h v) by k-gram, and gamma(h) by context."""

    alpha: dict[Ngram, float]
    gamma: dict[Ngram, float]


def _target_ngrams(stream: Sequence[int], order: int, bos: int) -> Iterable[Ngram]:
    """The ``order``-gram ending at each target of ``stream``, the history padded with ``<s>``."""
    padded = [bos] * (order - 1) + list(stream)
    return zip(*(padded[i:] for i in range(order)))


class KneserNeyLM:
    """An interpolated (modified) Kneser-Ney n-gram model over word ids ``0 .. vocab_size - 1`` less ``bos``.

    Built from the raw counts of the ``order``-grams that end at the targets (:meth:`fit` counts them);
    ``discounts[k - 1]`` is (D1, D2, D3+) of order k, and ``fallback_orders`` the orders whose discounts are
    ``config.discount_fallback`` because the count-of-counts gave none.
    """

    def __init__(
        self, counts: Mapping[Ngram, int], vocab_size: int, bos: int, config: KneserNeyConfig = KneserNeyConfig()
    ) -> None:
        if not counts:
            raise ValueError("cannot build an n-gram model from no n-grams")
        if not 0 <= bos < vocab_size:
            raise ValueError(f"bos id {bos} is outside the vocabulary of {vocab_size} words")
        self.config, self.vocab_size, self.bos = config, vocab_size, bos
        # sorted, so that the model (its float sums included) depends on the counts only, not on their order
        self.counts = dict(sorted((tuple(int(w) for w in gram), int(c)) for gram, c in counts.items()))
        for gram, count in self.counts.items():
            if len(gram) != config.order or count < 1:
                raise ValueError(f"expected positive counts of {config.order}-grams, got {gram}: {count}")
            self._check_targets(gram[-1:])
        # order_counts[k - 1]: the count of every k-gram; raw at the highest order, continuation below it
        order_counts: list[Counter[Ngram]] = [Counter(self.counts)]
        for _ in range(config.order - 1):
            order_counts.insert(0, Counter(gram[1:] for gram in order_counts[0]))
        self.discounts: list[tuple[float, float, float]] = []
        self.fallback_orders: list[int] = []
        self._orders: list[_Order] = []
        for order, grams in enumerate(order_counts, start=1):
            discounts = self._discounts(order, grams)
            self.discounts.append(discounts)
            self._orders.append(self._discounted(grams, discounts))

    def _discounts(self, order: int, grams: Counter[Ngram]) -> tuple[float, float, float]:
        if self.config.discount != "modified":
            return (float(self.config.discount),) * 3
        count_of_counts = Counter(grams.values())
        discounts = modified_discounts(count_of_counts)
        if discounts is not None:
            return discounts
        if self.config.discount_fallback is None:
            n = [count_of_counts.get(r, 0) for r in (1, 2, 3, 4)]
            raise ValueError(
                f"no valid modified Kneser-Ney discounts for order {order} from count-of-counts n1..n4 = {n} "
                "(too little data?); set KneserNeyConfig.discount_fallback, e.g. (0.5, 1.0, 1.5) as KenLM"
            )
        self.fallback_orders.append(order)
        return self.config.discount_fallback

    @staticmethod
    def _discounted(grams: Counter[Ngram], discounts: tuple[float, float, float]) -> _Order:
        """alpha of every k-gram and gamma(h) = sum_v D(c(h v)) / sum_v c(h v) of every context h."""
        discount = {gram: discounts[min(count, 3) - 1] for gram, count in grams.items()}
        total: defaultdict[Ngram, int] = defaultdict(int)
        discounted: defaultdict[Ngram, float] = defaultdict(float)
        for gram, count in grams.items():
            total[gram[:-1]] += count
            discounted[gram[:-1]] += discount[gram]
        alpha = {gram: (count - discount[gram]) / total[gram[:-1]] for gram, count in grams.items()}
        return _Order(alpha, {context: discounted[context] / total[context] for context in total})

    @classmethod
    def fit(
        cls, streams: Iterable[Sequence[int]], vocab_size: int, bos: int, config: KneserNeyConfig = KneserNeyConfig()
    ) -> KneserNeyLM:
        """Count the n-grams of the training ``streams`` (one per document) and build the model."""
        counts: Counter[Ngram] = Counter()
        for stream in streams:
            counts.update(_target_ngrams(stream, config.order, bos))
        return cls(counts, vocab_size, bos, config)

    @property
    def order(self) -> int:
        return self.config.order

    def _check_targets(self, words: Iterable[int]) -> None:
        for word in words:
            if not 0 <= word < self.vocab_size or word == self.bos:
                raise ValueError(f"target id {word} is not a predictable word (0..{self.vocab_size - 1} less <s>)")

    def probability(self, context: Sequence[int], word: int) -> float:
        """p(word | the last ``order - 1`` words of ``context``), interpolated up from the uniform distribution.

        A document's history starts with ``order - 1`` copies of ``<s>`` (see :meth:`log_prob`); a shorter
        ``context`` is read as that many words of history, which gives the estimate of a lower order.
        """
        if word == self.bos:
            return 0.0
        history = tuple(context)[-(self.order - 1) :] if self.order > 1 else ()
        p = 1.0 / (self.vocab_size - 1)
        for length, level in enumerate(self._orders):  # context lengths 0, 1, ..., order - 1
            suffix = history[len(history) - length :]
            gamma = level.gamma.get(suffix) if length <= len(history) else None
            if gamma is None:  # then every longer context is unseen as well: it is a suffix of theirs
                break
            p = level.alpha.get((*suffix, word), 0.0) + gamma * p
        return p

    def distribution(self, context: Sequence[int]) -> np.ndarray:
        """p(w | context) for every word id w (0 for ``<s>``), as a (vocab_size,) array; see :meth:`probability`."""
        return np.array([self.probability(context, word) for word in range(self.vocab_size)])

    def log_prob(self, stream: Sequence[int]) -> np.ndarray:
        """Natural-log probability of each target of one document's ``stream``, the history starting at ``<s>``."""
        self._check_targets(stream)
        padded = [self.bos] * (self.order - 1) + list(stream)
        return np.log([self.probability(padded[t : t + self.order - 1], w) for t, w in enumerate(stream)])

    def perplexity(self, streams: Iterable[Sequence[int]]) -> float:
        """exp(- total log-probability / number of targets) over the documents' ``streams``."""
        total, tokens = 0.0, 0
        for stream in streams:
            total += float(self.log_prob(stream).sum())
            tokens += len(stream)
        if tokens == 0:
            raise ValueError("perplexity of no tokens")
        perplexity = math.exp(-total / tokens)
        if not math.isfinite(perplexity):
            raise ValueError(f"perplexity is {perplexity}: some target has probability 0 (a discount of 0?)")
        return perplexity

    def state_dict(self) -> dict[str, Any]:
        """JSON-safe state: the config, the vocabulary size, ``<s>`` and the raw n-gram counts."""
        return {
            "config": asdict(self.config),
            "vocab_size": self.vocab_size,
            "bos": self.bos,
            "ngrams": [[*gram, count] for gram, count in self.counts.items()],
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> KneserNeyLM:
        """The model whose :meth:`state_dict` is ``state``."""
        counts = {tuple(row[:-1]): row[-1] for row in state["ngrams"]}
        return cls(counts, state["vocab_size"], state["bos"], KneserNeyConfig(**state["config"]))
