"""A unigram cache of the document so far, mixed into a language model's word distribution (ours, off by default).

Every word seen earlier in a document is likelier again (Kuhn and De Mori 1990; Grave et al. 2017):

    p(x_t) = (1 - lambda) p_LM(x_t | ...) + lambda n_<t(x_t) / t      (the first token: p_LM alone),

n_<t(x) the times x occurred among the document's t tokens before it (sentence ends included, as every model here
predicts them). The cache reads only the words, never the latent structure, so for a deterministic LM it is a
mixture of its per-token probabilities (:func:`cache_shares` and :func:`mixed_log_prob`, on whole documents), and
in EntityNLM it enters eq. 6 at every token (:class:`DocumentCache`, one step at a time, by a running count per
document), where the importance weights see it. It is the control for EntityNLM's copy of each entity's words:
repetition with no entities (``benchmarks/cache_baseline.py``, ``python -m inference.marginal_ppl
--document-cache``).
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import TorchDistribution, constraints

from generative.layers.categorical import Categorical


def check_cache_weight(weight: float) -> float:
    """``weight`` (lambda) if it lies in [0, 1): at 1 or more the model's own distribution would vanish."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"the document cache's weight lambda must be in [0, 1), got {weight}")
    return weight


def cache_shares(words: torch.Tensor) -> torch.Tensor:
    """(B, T) n_<t(x_t) / t of each row's tokens (0 at t = 0): the share of the tokens before t that are x_t.

    Linear memory: each row's (word, position) pairs are sorted once, and a token's earlier occurrences are its
    rank among its word's. Padding lies after a row's tokens, so it never counts for them.
    """
    rows, steps = words.shape
    positions = torch.arange(steps, device=words.device)
    order = torch.sort(words * steps + positions, dim=1).indices  # by word, then position
    ranks = positions.expand(rows, steps)
    ordered = words.gather(1, order)
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]  # the first occurrence of each word in the sorted row
    group_start = torch.where(first, ranks, 0).cummax(1).values
    before = torch.empty_like(words).scatter_(1, order, ranks - group_start)  # earlier occurrences of x_t
    return before / positions.clamp(min=1)


def mixed_log_prob(own: torch.Tensor, share: torch.Tensor, started: torch.Tensor, weight: float) -> torch.Tensor:
    """log((1 - lambda) p_LM + lambda share) where the cache has ``started`` (a token before this one), the
    model's ``own`` log-probability elsewhere; the arguments broadcast. At lambda = 0, ``own``."""
    if not weight:
        return own
    cached = torch.logaddexp(own + math.log1p(-weight), share.log() + math.log(weight))
    return torch.where(started, cached, own)


def with_cache(log_probs: torch.Tensor, words: torch.Tensor, weight: float) -> torch.Tensor:
    """Per-token ``log_probs`` (..., B, T) of whole documents mixed with the cache of each row's ``words`` (B, T)
    before t at ``weight`` (unchanged at 0): the form for an LM scored in one pass."""
    if not weight:
        return log_probs
    started = torch.arange(words.shape[1], device=words.device) > 0
    return mixed_log_prob(log_probs, cache_shares(words), started, weight)


class DocumentCache:
    """The running unigram cache of each of B documents, read one step at a time: ``counts`` (B, V) of the words
    seen so far and ``seen`` (B,) their number; :meth:`add` appends a step's words, :meth:`mix` mixes it into a
    word distribution. B x V numbers, whatever the documents' length."""

    def __init__(self, weight: float, documents: int, vocab_size: int, device: torch.device) -> None:
        self.weight = check_cache_weight(weight)
        self.counts = torch.zeros((documents, vocab_size), device=device)
        self.seen = torch.zeros(documents, device=device)

    def add(self, words: torch.Tensor, mask: torch.Tensor) -> None:
        """The step's word of each document (B,), where ``mask`` (B,) says it has one."""
        self.counts.scatter_add_(1, words[:, None], mask[:, None].to(self.counts.dtype))
        self.seen = self.seen + mask

    def mix(self, words: TorchDistribution, documents: torch.Tensor | None = None) -> CacheMixture:
        """``words`` mixed with the cache: its batch ends with the B documents, or, given ``documents`` (K,), its
        K rows (batch (K, ...)) are theirs."""
        if documents is None:
            return CacheMixture(words, self.counts, self.seen, self.weight)
        extra = (1,) * (len(words.batch_shape) - 1)  # the row's own dimensions after K
        return CacheMixture(words, self.counts, self.seen, self.weight, documents.view(len(documents), *extra))


class CacheMixture(TorchDistribution):
    """(1 - lambda) ``words`` + lambda ``counts`` / ``seen`` where ``seen`` > 0, ``words`` alone elsewhere:
    ``counts`` (B, V) and ``seen`` (B,) the B documents' running cache, ``rows`` the document of each element of the
    batch of ``words`` (broadcast against it, as observed values may; by default the batch ends with the B
    documents). A word's count is read where it is observed, so no row copies its document's V counts."""

    arg_constraints: dict = {}

    def __init__(self, words: TorchDistribution, counts: torch.Tensor, seen: torch.Tensor, weight: float,
                 rows: torch.Tensor | None = None) -> None:
        self.words, self.counts, self.weight = words, counts, weight
        self.rows = torch.arange(len(counts), device=counts.device) if rows is None else rows
        self.seen = seen[self.rows]
        super().__init__(words.batch_shape, words.event_shape, validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        return self.words.support

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        share = self.counts[self.rows, value] / self.seen.clamp(min=1)  # rows and value broadcast
        return mixed_log_prob(self.words.log_prob(value), share, self.seen > 0, self.weight)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise ValueError("CacheMixture draws one value per row")
        own = self.words.sample()
        counts = self.counts[self.rows.expand(own.shape)]
        cached = Categorical(probs=counts + (counts.sum(-1, keepdim=True) == 0)).sample()  # uniform if empty
        caching = (self.seen > 0) & (torch.rand(own.shape, device=own.device) < self.weight)
        return torch.where(caching, cached, own)
