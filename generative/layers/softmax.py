"""Output layers over the vocabulary: the class-factored softmax of EntityNLM (paper eq. 6) and the full softmax.

The class-factored softmax ("cfsm", Goodman 2001; Baltescu & Blunsom 2015) splits the vocabulary into C
classes and predicts a word in two steps::

    p(w | v) = p(class(w) | v) * p(w | class(w), v)
             = softmax(W_c v + b_c)[class(w)] * softmax over the words of class(w) of (W v + b)

Scoring an observed word normalises over the C classes and the S words of one class only, O(C + S) instead of
O(V): that is what makes 100 particles per document affordable in importance sampling. Both stages have
biases, as DyNet's ``ClassFactoredSoftmaxBuilder`` (the paper's code); a one-word class has probability 1
inside its class.

The classes are frequency bins (Mikolov et al. 2011): the words sorted by training count and cut into C
contiguous bins of about equal mass, about sqrt(V) classes. The mass of a word is its count to a power: 1 is
the plain frequency binning of Mikolov et al. (2011); 0.5, the default of Mikolov's RNNLM toolkit, balances
the class sizes (on LitBank's 10K vocabulary the largest class has 228 words with sqrt counts and 1,571 with
raw counts, and the cost of a class-factored step grows with the largest class, to which all classes are
padded).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pyro.distributions as dist
import torch
from pyro.distributions import TorchDistribution, constraints
from torch import nn
from torch.distributions.utils import lazy_property
from torch.nn import functional as F

LOG_PROB_STEPS = 1024  # the time steps (the last batch dimension) an observed word's log_prob scores at once


def _pick(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x[..., index]`` elementwise, with the batch shapes of ``x[..., 0]`` and ``index`` broadcast."""
    # NumPy's shape arithmetic: torch.broadcast_shapes (torch 2.13) takes about 30 us a call, NumPy's about 1
    shape = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(index.shape))
    return x.expand(*shape, x.shape[-1]).gather(-1, index.expand(shape).unsqueeze(-1)).squeeze(-1)


def _by_steps(v: torch.Tensor, value: torch.Tensor,
              score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """``score(v, value)``, the time steps (the last batch dimension of ``v`` (..., T, H) and of ``value``) taken
    :data:`LOG_PROB_STEPS` at a time where there are more: a book's per-step work (a class's gathered rows, a full
    softmax's logits) is never held for all its steps at once. A value without that dimension (one word shared
    along the steps) is scored in one pass."""
    steps = v.shape[-2] if v.dim() > 1 else 1
    if steps > LOG_PROB_STEPS and value.dim() and value.shape[-1] == steps:
        return torch.cat([score(v[..., start:start + LOG_PROB_STEPS, :], value[..., start:start + LOG_PROB_STEPS])
                          for start in range(0, steps, LOG_PROB_STEPS)], dim=-1)
    return score(v, value)


class WordClasses(nn.Module):
    """A partition of the vocabulary into classes, as buffers that move with the model.

    ``word_class[w]`` is the class of word w and ``position[w]`` its index among the class's words;
    ``members[c, :]`` lists the words of class c (most frequent first), padded to the largest class, with
    ``member_mask`` marking the real entries.
    """

    word_class: torch.Tensor
    position: torch.Tensor
    members: torch.Tensor
    member_mask: torch.Tensor

    def __init__(self, word_class: torch.Tensor, position: torch.Tensor) -> None:
        super().__init__()
        num_classes = int(word_class.max()) + 1
        sizes = torch.bincount(word_class, minlength=num_classes)
        if bool((sizes == 0).any()):
            raise ValueError("every class must have at least one word")
        members = torch.zeros(num_classes, int(sizes.max()), dtype=torch.long)
        member_mask = torch.zeros(num_classes, int(sizes.max()), dtype=torch.bool)
        members[word_class, position] = torch.arange(len(word_class))
        member_mask[word_class, position] = True
        if int(member_mask.sum()) != len(word_class):
            raise ValueError("two words share a (class, position) slot")
        self.register_buffer("word_class", word_class)
        self.register_buffer("position", position)
        self.register_buffer("members", members)
        self.register_buffer("member_mask", member_mask)

    @classmethod
    def from_counts(cls, counts: Sequence[int], num_classes: int | None = None, power: float = 0.5) -> WordClasses:
        """Frequency bins: class k starts at the first word (by decreasing count, ties by id) that has at least
        k / C of the total mass ``count ** power`` before it, moved on where needed so that no class is empty.

        ``num_classes`` defaults to round(sqrt(V)). The most frequent words, heavier than a bin, get classes of
        their own.
        """
        counts = torch.as_tensor(counts, dtype=torch.float64)
        size = len(counts)
        num_classes = max(1, round(math.sqrt(size))) if num_classes is None else num_classes
        if not 1 <= num_classes <= size:
            raise ValueError(f"num_classes must be between 1 and the vocabulary size {size}, got {num_classes}")
        if bool((counts < 0).any()) or not bool((counts > 0).any()):
            raise ValueError("counts must be non-negative with at least one positive count")
        order = torch.argsort(-counts, stable=True)
        mass = counts[order] ** power
        mass_before = torch.cat([mass.new_zeros(1), mass.cumsum(0)[:-1]])
        k = torch.arange(1, num_classes)
        starts = torch.searchsorted(mass_before, k.double() / num_classes * mass.sum())
        # Class k needs k words before it and C - k from it on: starts[k] in [k, V - C + k], increasing.
        starts = k + torch.cummax(starts - k, 0).values.clamp(0, size - num_classes)
        ranks = torch.arange(size)
        sorted_class = torch.searchsorted(starts, ranks, right=True)
        first_rank = torch.cat([starts.new_zeros(1), starts])
        word_class = torch.empty(size, dtype=torch.long).scatter_(0, order, sorted_class)
        position = torch.empty(size, dtype=torch.long).scatter_(0, order, ranks - first_rank[sorted_class])
        return cls(word_class, position)

    @property
    def num_classes(self) -> int:
        return self.members.shape[0]

    @property
    def max_class_size(self) -> int:
        return self.members.shape[1]


class WordCategorical(TorchDistribution):
    """A categorical over the vocabulary of an output ``layer`` at hidden vectors ``v`` (..., H), with
    ``batch_shape = v.shape[:-1]``, usable as a Pyro sample site (``.mask``, ``.to_event``). :meth:`log_prob` of
    observed words scores :data:`LOG_PROB_STEPS` time steps at a time (:func:`_by_steps`), each piece by the
    kind's :meth:`_log_prob`."""

    arg_constraints = {"v": constraints.real_vector}

    def __init__(self, v: torch.Tensor, layer: nn.Module, validate_args: bool | None = None) -> None:
        self.v, self.layer = v, layer
        super().__init__(v.shape[:-1], validate_args=validate_args)

    @property
    def support(self) -> constraints.Constraint:
        return constraints.integer_interval(0, self.layer.vocab_size - 1)

    def expand(self, batch_shape: torch.Size, _instance: WordCategorical | None = None) -> WordCategorical:
        batch_shape = torch.Size(batch_shape)
        return type(self)(self.v.expand(batch_shape + self.v.shape[-1:]), self.layer, validate_args=self._validate_args)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        return _by_steps(self.v, value, self._log_prob)

    def _log_prob(self, v: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """log p(``value`` | ``v``) for ``v`` the distribution's own or a piece of its steps."""
        raise NotImplementedError


class ClassFactoredCategorical(WordCategorical):
    """The word distribution of a :class:`ClassFactoredSoftmax` at hidden vectors ``v`` of shape (..., H).

    :meth:`log_prob` costs O(C + S) per element; a ``value`` with fewer batch dimensions than ``v`` (one observed
    word shared by P particles) gathers its class's rows once and broadcasts them against ``v``. ``logits`` gives
    the full normalised log-distribution, O(V).
    """

    @lazy_property
    def class_log_probs(self) -> torch.Tensor:
        """log p(class | v), shape (..., C)."""
        return torch.log_softmax(self.layer.classes(self.v), dim=-1)

    def _in_class_logits(self, word_class: torch.Tensor, v: torch.Tensor | None = None) -> torch.Tensor:
        """Word logits within ``word_class`` (shape broadcastable with the batch) at ``v`` (the distribution's
        own when not given), (..., S); padding is -inf.

        The rows of W are gathered per element of ``word_class``, not per element of the batch, and contracted
        with ``v`` by a broadcasting einsum, which does not copy them along dimensions they lack.
        """
        classes = self.layer.word_classes
        members = classes.members[word_class]
        weight = F.embedding(members, self.layer.words.weight)  # W[members]; its backward is faster than indexing's
        logits = torch.einsum("...h,...sh->...s", self.v if v is None else v, weight) + self.layer.words.bias[members]
        return logits.masked_fill(~classes.member_mask[word_class], float("-inf"))

    def _log_prob(self, v: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """log p(``value`` | ``v``), each class's rows gathered for the elements of ``value`` at once."""
        if value.numel() == 1:
            return self._one_word_log_prob(v, value)
        classes = self.layer.word_classes
        word_class = classes.word_class[value]
        # log_softmax, not logits - logsumexp: one kernel instead of about eight small ops on the CPU
        in_class_log_prob = _pick(torch.log_softmax(self._in_class_logits(word_class, v), -1), classes.position[value])
        class_log_probs = self.class_log_probs if v is self.v else torch.log_softmax(self.layer.classes(v), dim=-1)
        return _pick(class_log_probs, word_class) + in_class_log_prob

    def _one_word_log_prob(self, v: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """log p(``value`` | ``v``) for one word (``value`` of one element, broadcast against the batch): both
        stages as one matrix product each over ``v``'s rows, its class's rows read once. The same numbers as the
        general path in a third of the operations: a sampler's step scores its document's word at every context
        (the lookahead's, e_current's), where the general path's small operations cost more than the products."""
        layer, classes = self.layer, self.layer.word_classes
        word = value.reshape(1)
        word_class = classes.word_class[word]  # (1,)
        # its class's rows by index_select of the (1,) class: indexing by an element reads it back to the host
        members, member_mask = (rows.index_select(0, word_class)[0] for rows in (classes.members, classes.member_mask))
        bias = layer.words.bias[members].masked_fill(~member_mask, float("-inf"))
        rows = v.reshape(-1, v.shape[-1])
        in_class = torch.addmm(bias, rows, layer.words.weight[members].T).log_softmax(-1)
        class_log_probs = torch.addmm(layer.classes.bias, rows, layer.classes.weight.T).log_softmax(-1)
        log_prob = (class_log_probs.index_select(-1, word_class)
                    + in_class.index_select(-1, classes.position[word]))[:, 0]
        shape = np.broadcast_shapes(tuple(v.shape[:-1]), tuple(value.shape))
        return log_prob.view(v.shape[:-1]).expand(shape)

    @torch.no_grad()
    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        """Two stages: a class from p(class | v), then a word from p(word | class, v)."""
        word_class = dist.Categorical(logits=self.class_log_probs).sample(sample_shape)
        position = dist.Categorical(logits=self._in_class_logits(word_class)).sample()
        return self.layer.word_classes.members[word_class, position]

    @lazy_property
    def logits(self) -> torch.Tensor:
        """log p(w | v) for every word, shape (..., V): O(V), for inspection and tests."""
        classes = self.layer.word_classes
        word_logits = self.layer.words(self.v)
        class_norm = word_logits[..., classes.members].masked_fill(~classes.member_mask, float("-inf")).logsumexp(-1)
        return (self.class_log_probs - class_norm)[..., classes.word_class] + word_logits


class ClassFactoredSoftmax(nn.Module):
    """Paper eq. 6's cfsm: v (..., H) -> :class:`ClassFactoredCategorical` over the vocabulary of ``counts``."""

    def __init__(self, input_size: int, counts: Sequence[int], num_classes: int | None = None) -> None:
        super().__init__()
        self.word_classes = WordClasses.from_counts(counts, num_classes)
        self.classes = nn.Linear(input_size, self.word_classes.num_classes)
        self.words = nn.Linear(input_size, len(counts))

    @property
    def vocab_size(self) -> int:
        return self.words.out_features

    def forward(self, v: torch.Tensor) -> ClassFactoredCategorical:
        return ClassFactoredCategorical(v, self)


class FullCategorical(WordCategorical):
    """softmax(W v + b) over the vocabulary at hidden vectors ``v`` (..., H) of a :class:`FullSoftmax`. Its
    :meth:`log_prob` of observed words computes the logits of a piece of the steps at a time, so a book's
    (steps, V) logits are never held at once; ``logits`` (..., V), normalised, are computed once where read whole
    (drawing, inspection, a shorter text)."""

    @lazy_property
    def logits(self) -> torch.Tensor:
        """log p(w | v) for every word, shape (..., V)."""
        return torch.log_softmax(self.layer.words(self.v), dim=-1)

    def _log_prob(self, v: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        logits = self.logits if v is self.v else torch.log_softmax(self.layer.words(v), dim=-1)
        return _pick(logits, value)

    @torch.no_grad()
    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        return dist.Categorical(logits=self.logits).sample(sample_shape)


class FullSoftmax(nn.Module):
    """The plain softmax over the whole vocabulary (paper eq. 1): v (..., H) -> :class:`FullCategorical` of
    W v + b."""

    def __init__(self, input_size: int, vocab_size: int) -> None:
        super().__init__()
        self.words = nn.Linear(input_size, vocab_size)

    @property
    def vocab_size(self) -> int:
        return self.words.out_features

    def forward(self, v: torch.Tensor) -> FullCategorical:
        return FullCategorical(v, self)


def make_softmax(
    kind: str, input_size: int, counts: Sequence[int], num_classes: int | None = None
) -> ClassFactoredSoftmax | FullSoftmax:
    """The output layer named ``kind``: ``"class"`` (class-factored, the paper's) or ``"full"``."""
    if kind == "class":
        return ClassFactoredSoftmax(input_size, counts, num_classes)
    if kind == "full":
        if num_classes is not None:
            raise ValueError("num_classes applies to the class-factored softmax only")
        return FullSoftmax(input_size, len(counts))
    raise ValueError(f"unknown softmax {kind!r}: expected 'class' or 'full'")
