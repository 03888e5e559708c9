"""Coref-GRU (Dhingra et al. 2018): a GRU biased towards coreferent recency, and the readers built on it.

**Edges.** Coreference reaches the layer as edges, not as antecedent indices (reference notes §5.1). A document
of N tokens has C chains: chain 0 is the *sequential* chain, with an incoming and an outgoing edge at every real
token (relation 0); chains 1..C-1 are coreference clusters (relation 1). Between consecutive mentions of a
cluster, the first token of the later mention has an incoming edge and the last token of the earlier mention an
outgoing edge (:meth:`CorefEdges.from_clusters`).

**The layer** (:class:`CorefGRU`). The hidden state has R·Dr units, one Dr-slice per relation type (R = 2:
sequential, coreference), and a memory M (C × Dr) holds one slot per chain, zero at the start. At step t:

    α_c = exp(w_{r_c}ᵀ x_t) / Σ_{c' in in(t)} exp(w_{r_c'}ᵀ x_t)       for the chains c in in(t) (incoming at t)
    m_t = ||_r Σ_{c in in(t), r_c = r} α_c M_c                         (the "previous state", R·Dr)
    (1) r_t = σ(W_r x_t + b_ir + U_r m_t + b_hr)
    (2) z_t = σ(W_z x_t + b_iz + U_z m_t + b_hz)
    (3) h̃_t = tanh(W_h x_t + b_ih + r_t ⊙ (U_h m_t + b_hh))
    (4) h_t = (1 − z_t) ⊙ h̃_t + z_t ⊙ m_t
    M_c ← h_t[slice of r_c]                                             for the chains c outgoing at t

This is the paper's Appendix A with two relation slices, m_t = α φs(h_{t-1}) || (1 − α) φc(h_{y_t}), generalised
as in the public code to any number of chains (an attention vector w_r per relation type, renormalised over the
chains present, so α = 1 on the sequential chain when no coreference edge comes in). (1)-(4) are written in
``torch.nn.GRU``'s convention (z gates the old state, b_hh inside r ⊙ ·); the paper's h_t = (1 − z) m + z h̃ is the
same family with z ↔ 1 − z. Padding steps copy h and M. The attention α depends on x_t and the edges only, so it
is computed for all steps at once; the loop runs over time steps only, batched over documents and chains.

**No coreference = a GRU.** With the sequential chain alone, α = 1 and m_t = [h_{t-1}[:Dr]; 0]: the sequential
slice is read back and the coreference slice is not. So the relation-0 slice of the outputs is *exactly* a
``torch.nn.GRU(input_size, Dr)`` whose weights are the relation-0 row blocks of each gate and the first Dr columns
of the recurrent matrices (the other columns only ever multiply zeros); the relation-1 slice is a read-out
(1 − z) ⊙ h̃ of that GRU's state and the input, with no recurrence of its own. The whole output is a GRU's only
when that read-out is zero: with the relation-1 rows and biases of all gates zero, h̃ = 0 there and the outputs
are exactly [GRU(x); 0] (tested). With ``relations=1`` and no coreference edges the layer *is* ``nn.GRU``
with the same weights. An ``nn.GRU`` of R·Dr units is never reproduced: the paper's layer always drops the
coreference slice of h_{t-1} from the sequential path.

**Backward direction** (:class:`BiCorefGRU`): the same layer over each document reversed within its length, with
the edges reversed and incoming ↔ outgoing swapped (:meth:`CorefEdges.reversed`), so that a mention reads what the
*next* mention of its cluster stored.

**Readers.** :class:`GatedAttentionReader` (the GA reader, K layers, paper §3 and Appendix B) and
:class:`BiReader` (its one-layer version, the paper's "Bi-GRU"/"Bi-C-GRU" rows of Table 1), with the document
read by a BiGRU ("gru"), a Bi-C-GRU ("cgru") or a BiGRU given the coreference as extra one-hot input features
("gru_onehot", the "GRU + 1-hot" baseline; :meth:`CorefEdges.one_hot_features`). As Pyro programs they have one
observed site, ``answer``, in the ``examples`` plate. :func:`matched_hidden_size` sizes the 1-hot baseline to
the C-GRU model's parameter count (the paper compares models of equal size).

Design choices where the paper and the reference code are silent are listed at the classes that make them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from itertools import pairwise
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.nn import PyroModule, pyro_method
from torch import nn

RELATIONS = 2  # relation types: 0 = sequential (chain 0), 1 = coreference (chains 1..C-1)
RECURRENTS = ("gru", "cgru", "gru_onehot")  # how a reader's document encoder reads the document
ANSWERS = ("candidates", "classes")  # attention-sum over document positions, or a softmax over answer classes


def reverse_padded(values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(B, N, ...) values with each row's first ``lengths[b]`` steps reversed; the padding after them stays."""
    steps = torch.arange(values.shape[1], device=values.device)
    lengths = lengths.to(values.device)[:, None]
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)
    return values[torch.arange(values.shape[0], device=values.device)[:, None], index]


def steps_mask(lengths: torch.Tensor, steps: int) -> torch.Tensor:
    """(B, steps) bool: which steps are real tokens."""
    return torch.arange(steps, device=lengths.device) < lengths[:, None]


# ---- coreference as edges ---------------------------------------------------------------------------------------


def non_overlapping(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """A cluster's mentions as the C-GRU can read them: in order of position, each starting after the one before
    it ends (of nested or overlapping mentions the earlier, so the outermost, is kept); what
    :meth:`CorefEdges.from_clusters` requires of a resolver's clusters, which may nest ("[his wife [Mary]]")."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if not kept or start >= kept[-1][1]:
            kept.append((start, end))
    return kept


@dataclass(frozen=True)
class CorefEdges:
    """The chains of B documents of (up to) N tokens, batch-first, as the reference code's Ei/Eo/Ri/Ro.

    ``incoming[b, t, c]`` / ``outgoing[b, t, c]``: chain c has an incoming (read) / outgoing (write) edge at token t;
    ``relation_in`` / ``relation_out`` (long): the relation type of those edges (0 elsewhere). ``member[b, t, c]``:
    token t lies inside a mention of chain c (chain 0: every real token); the layer does not read it, the
    "GRU + 1-hot" baseline's features do. Padding has no edges and no membership.
    """

    incoming: torch.Tensor  # (B, N, C) bool, Ei
    outgoing: torch.Tensor  # (B, N, C) bool, Eo
    relation_in: torch.Tensor  # (B, N, C) long, Ri
    relation_out: torch.Tensor  # (B, N, C) long, Ro
    member: torch.Tensor  # (B, N, C) bool

    def __post_init__(self) -> None:
        shapes = {tuple(t.shape) for t in (self.incoming, self.outgoing, self.relation_in, self.relation_out,
                                           self.member)}
        if len(shapes) != 1 or len(next(iter(shapes))) != 3:
            raise ValueError(f"edge tensors must all be (B, N, C), got shapes {sorted(shapes)}")

    @property
    def num_chains(self) -> int:
        return self.incoming.shape[2]

    @classmethod
    def from_clusters(cls, lengths: Sequence[int] | torch.Tensor,
                      clusters: Sequence[Sequence[Sequence[tuple[int, int]]]], max_chains: int) -> CorefEdges:
        """The edges of B documents of the given ``lengths`` from their coreference clusters.

        ``clusters[b]`` is document b's list of clusters, each a list of mention spans (start, end), end exclusive,
        token indices within the document. Chain 0 is the sequential chain; cluster k becomes chain k + 1, so the
        result has ``max_chains`` chains and clusters beyond the first ``max_chains - 1`` are dropped (the
        reference code's cap: 50 on WikiHop, 15 on LAMBADA; the paper's bAbI stories need 13). Mentions are
        taken in order of position; for consecutive mentions (earlier, later) of a cluster the LAST token of the
        earlier one gets an outgoing edge and the FIRST token of the later one an incoming edge, both of relation
        1. A cluster's last mention writes nothing: no later mention would read it, and in the backward direction
        (:meth:`reversed`) its write would become a read of a slot nothing has written. Mentions of one cluster
        must not overlap (a later mention starting before the earlier one ends would read its chain before the
        earlier one writes it): a ValueError, as for spans outside the document.
        """
        lengths = [int(n) for n in lengths]
        if len(clusters) != len(lengths):
            raise ValueError(f"{len(clusters)} cluster lists for {len(lengths)} documents")
        if max_chains < 1:
            raise ValueError(f"max_chains must be at least 1 (the sequential chain), got {max_chains}")
        if not lengths or min(lengths) < 1:
            raise ValueError(f"documents need at least one token, got lengths {lengths}")
        size, steps = len(lengths), max(lengths)
        shape = (size, steps, max_chains)
        incoming, outgoing, member = (torch.zeros(shape, dtype=torch.bool) for _ in range(3))
        real = steps_mask(torch.tensor(lengths), steps)
        for edges in (incoming, outgoing, member):
            edges[:, :, 0] = real
        for b, document_clusters in enumerate(clusters):
            for k, spans in enumerate(document_clusters[: max_chains - 1]):
                chain = k + 1
                spans = sorted((int(start), int(end)) for start, end in spans)
                for start, end in spans:
                    if not 0 <= start < end <= lengths[b]:
                        raise ValueError(f"document {b}, cluster {k}: span ({start}, {end}) is not within its "
                                         f"{lengths[b]} tokens")
                    member[b, start:end, chain] = True
                for (_, earlier_end), (later_start, _) in pairwise(spans):
                    if later_start < earlier_end:
                        raise ValueError(f"document {b}, cluster {k}: overlapping mentions at token {later_start}")
                    outgoing[b, earlier_end - 1, chain] = True
                    incoming[b, later_start, chain] = True
        chain_relation = torch.ones(max_chains, dtype=torch.long)
        chain_relation[0] = 0
        return cls(incoming, outgoing, chain_relation * incoming, chain_relation * outgoing, member)

    def reversed(self, lengths: torch.Tensor) -> CorefEdges:
        """The edges of the backward direction: each document reversed within its length, incoming ↔ outgoing
        and their relations swapped (a write of the forward pass is a read of the backward one)."""

        def flip(values: torch.Tensor) -> torch.Tensor:
            return reverse_padded(values, lengths)

        return CorefEdges(flip(self.outgoing), flip(self.incoming), flip(self.relation_out), flip(self.relation_in),
                          flip(self.member))

    def one_hot_features(self, relations: int = RELATIONS) -> torch.Tensor:
        """(B, N, R + C - 1) float: the "GRU + 1-hot" baseline's extra input features of every token.

        The paper feeds coreference "as 1-hot vectors appended to the input word vectors" without saying which;
        here they are, per token: R flags "an edge of relation r comes in here" (relation 0 is on at every real
        token; relation 1 marks where the C-GRU would read an antecedent's memory), then C - 1 flags "the token
        is inside a mention of cluster c" (one-hot in the cluster's index; several at once only for nested
        mentions of different clusters). Cluster indices are the order of ``clusters`` given to
        :meth:`from_clusters`, so they are as canonical as the caller makes them (e.g. order of first mention).
        Padding is all zeros.
        """
        kinds = torch.arange(relations, device=self.incoming.device)
        arriving = (self.incoming[..., None] & (self.relation_in[..., None] == kinds)).any(2)  # (B, N, R)
        return torch.cat([arriving, self.member[..., 1:]], dim=-1).float()

    def to(self, device: torch.device | str) -> CorefEdges:
        return CorefEdges(*(getattr(self, f.name).to(device) for f in fields(self)))


def one_hot_size(max_chains: int, relations: int = RELATIONS) -> int:
    """The width of :meth:`CorefEdges.one_hot_features` for ``max_chains`` chains."""
    return relations + max_chains - 1


# ---- the layer ------------------------------------------------------------------------------------------------


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """softmax of ``scores`` over the entries where ``mask`` holds, 0 elsewhere (all 0 where none holds)."""
    scores = scores.masked_fill(~mask, float("-inf"))
    top = scores.detach().amax(dim, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    return weights / weights.sum(dim, keepdim=True).clamp(min=torch.finfo(weights.dtype).tiny)


class CorefGRU(nn.Module):
    """One direction of the C-GRU layer (eq. 1-4 of the module docstring), hidden size R·Dr.

    The parameters have ``torch.nn.GRU``'s names, shapes and gate order (r, z, n rows of ``weight_ih`` (3H, D),
    ``weight_hh`` (3H, H) and the biases; gate g's rows for relation slice s are g·H + s·Dr .. g·H + (s+1)·Dr) and
    its initialisation U(−1/√H, 1/√H); ``keys`` (R, D) are the attention vectors w_r, N(0, 0.1) as in the
    reference code.
    """

    def __init__(self, input_size: int, hidden_size: int, relations: int = RELATIONS) -> None:
        super().__init__()
        if relations < 1 or hidden_size % relations:
            raise ValueError(f"hidden size {hidden_size} is not a multiple of the {relations} relation types")
        self.input_size, self.hidden_size, self.relations = input_size, hidden_size, relations
        self.slot_size = hidden_size // relations  # Dr
        self.weight_ih = nn.Parameter(torch.empty(3 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(3 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(3 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(3 * hidden_size))
        self.keys = nn.Parameter(torch.empty(relations, input_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.hidden_size)
        for weight in (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh):
            nn.init.uniform_(weight, -bound, bound)
        nn.init.normal_(self.keys, std=0.1)

    def attention(self, inputs: torch.Tensor, incoming: torch.Tensor, relation: torch.Tensor) -> torch.Tensor:
        """(B, N, C) α: at every step a distribution over the chains with an incoming edge, ∝ exp(w_{r_c}ᵀ x_t);
        all zero at a step without any (padding)."""
        scores = (inputs @ self.keys.T).gather(-1, relation)  # w_{r_c}ᵀ x_t, (B, N, C)
        return masked_softmax(scores, incoming)

    def prepare(self, inputs: torch.Tensor, edges: CorefEdges, lengths: torch.Tensor) -> Prepared:
        """Everything of a run that does not depend on the recurrent state, for all steps at once."""
        size, steps, _ = inputs.shape
        real = steps_mask(lengths.to(inputs.device), steps)
        incoming = edges.incoming & real[..., None]
        alpha = self.attention(inputs, incoming, edges.relation_in)  # (B, N, C)
        read = alpha[..., None] * F.one_hot(edges.relation_in, self.relations).to(alpha.dtype)  # (B, N, C, R)
        return Prepared(
            read=read,
            input_gates=F.linear(inputs, self.weight_ih, self.bias_ih),  # W x_t + b_i
            write=(edges.outgoing & real[..., None])[..., None],  # (B, N, C, 1)
            write_slot=edges.relation_out[..., None].expand(size, steps, edges.num_chains, self.slot_size),
            real=real,
        )

    def forward(self, inputs: torch.Tensor, edges: CorefEdges,
                lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Run over (B, N, D) ``inputs``; returns the outputs h_t (B, N, R·Dr), a padding step repeating the state
        before it, and the attention mass per relation type Σ_{c: r_c = r} α_c (B, N, R), 0 at padding."""
        prepared = self.prepare(inputs, edges, lengths)
        return recur([self], [prepared])[0], prepared.read.sum(2)


@dataclass(frozen=True)
class Prepared:
    """A C-GRU run's state-independent tensors (:meth:`CorefGRU.prepare`), batch-first over (B, N, ...)."""

    read: torch.Tensor  # (B, N, C, R) α_c on relation r_c's column
    input_gates: torch.Tensor  # (B, N, 3H)
    write: torch.Tensor  # (B, N, C, 1) bool: chain c stores h_t at t
    write_slot: torch.Tensor  # (B, N, C, Dr) long: the relation slice of h_t that chain c stores
    real: torch.Tensor  # (B, N) bool


def recur(layers: Sequence[CorefGRU], runs: Sequence[Prepared]) -> list[torch.Tensor]:
    """The recurrence (1)-(4) of several layers of one size over their own inputs, in one loop over time: the
    runs are stacked along the batch and each multiplies its own U (a batched matmul), so a bidirectional
    layer pays one Python step per token, not two. Returns each run's outputs (B, N, R·Dr).

    The loop unbinds the steps rather than slicing [:, t]: the backward pass of a slice per step would write a
    whole (B, N, ...) gradient per step, quadratic in the length."""
    relations, slot, hidden = layers[0].relations, layers[0].slot_size, layers[0].hidden_size
    directions, size = len(layers), runs[0].real.shape[0]
    weight_hh = torch.stack([layer.weight_hh.T for layer in layers])  # (L, H, 3H)
    bias_hh = torch.stack([layer.bias_hh for layer in layers])[:, None, :]  # (L, 1, 3H)
    read, input_gates, write, write_slot, real = (torch.cat([getattr(run, name) for run in runs]).unbind(1)
                                                  for name in ("read", "input_gates", "write", "write_slot", "real"))
    chains = runs[0].read.shape[2]
    memory = runs[0].read.new_zeros(directions * size, chains, slot)  # M, one Dr slot per chain
    state = runs[0].read.new_zeros(directions * size, hidden)
    outputs = []
    for read_t, gates_t, slot_t, write_t, real_t in zip(read, input_gates, write_slot, write, real):
        previous = torch.einsum("bcr,bcd->brd", read_t, memory).reshape(directions * size, hidden)  # m_t
        recurrent = torch.baddbmm(bias_hh, previous.view(directions, size, hidden), weight_hh)
        new = gru_cell(gates_t, recurrent.view(directions * size, 3 * hidden), previous)
        stored = new.view(-1, relations, slot).gather(1, slot_t)  # h_t[slice of r_c], (L·B, C, Dr)
        memory = torch.where(write_t, stored, memory)
        state = torch.where(real_t[:, None], new, state)
        outputs.append(state)
    return list(torch.stack(outputs, dim=1).split(size))


def gru_cell(input_gates: torch.Tensor, recurrent_gates: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
    """eq. 1-4: h_t from W x_t + b_i, U m_t + b_h (both (B, 3H), gates r, z, n) and the previous state m_t."""
    reset_x, update_x, new_x = input_gates.chunk(3, dim=-1)
    reset_h, update_h, new_h = recurrent_gates.chunk(3, dim=-1)
    reset = torch.sigmoid(reset_x + reset_h)  # (1)
    update = torch.sigmoid(update_x + update_h)  # (2)
    candidate = torch.tanh(new_x + reset * new_h)  # (3)
    return (1 - update) * candidate + update * previous  # (4)


class BiCorefGRU(nn.Module):
    """The bidirectional C-GRU: a forward layer and a backward one (reversed documents, reversed and swapped
    edges), run in one loop over time (:func:`recur`); outputs [forward; backward] (B, N, 2·R·Dr), attention
    masses (B, N, 2, R), both in document order."""

    def __init__(self, input_size: int, hidden_size: int, relations: int = RELATIONS) -> None:
        super().__init__()
        self.forward_layer = CorefGRU(input_size, hidden_size, relations)
        self.backward_layer = CorefGRU(input_size, hidden_size, relations)

    def forward(self, inputs: torch.Tensor, edges: CorefEdges,
                lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layers = (self.forward_layer, self.backward_layer)
        runs = [self.forward_layer.prepare(inputs, edges, lengths),
                self.backward_layer.prepare(reverse_padded(inputs, lengths), edges.reversed(lengths), lengths)]
        forward, backward = recur(layers, runs)
        outputs = torch.cat([forward, reverse_padded(backward, lengths)], dim=-1)
        masses = [run.read.sum(2) for run in runs]
        return outputs, torch.stack([masses[0], reverse_padded(masses[1], lengths)], dim=2)


class BiGRU(nn.Module):
    """A plain bidirectional GRU over padded sequences: (B, N, D) -> (B, N, 2H), zero at padding. The backward
    GRU reads each sequence reversed up to its length, so it starts at the last real token. Two unpacked
    ``nn.GRU`` runs: on the CPU a packed sequence costs 4x more (its backward pass is quadratic in the length)."""

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.forward_gru = nn.GRU(input_size, hidden_size, batch_first=True)
        self.backward_gru = nn.GRU(input_size, hidden_size, batch_first=True)

    def forward(self, inputs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        lengths = lengths.to(inputs.device)
        forward = self.forward_gru(inputs)[0]
        backward = reverse_padded(self.backward_gru(reverse_padded(inputs, lengths))[0], lengths)
        return torch.cat([forward, backward], dim=-1) * steps_mask(lengths, inputs.shape[1])[..., None]


# ---- reading comprehension -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadingExample:
    """One question in plain Python: what :func:`make_reading_batch` reads.

    ``document`` and ``query``: token ids (non-empty). ``answer``: for the attention-sum head a word id that occurs
    in the document (at a candidate position), for the classes head a class id. ``clusters``: the document's
    coreference clusters, each a list of (start, end) token spans, end exclusive. ``candidates``: the document
    positions the attention-sum may choose from (WikiHop: the candidates' mentions, LAMBADA: the non-stopwords),
    None for every position.
    """

    document: Sequence[int]
    query: Sequence[int]
    answer: int
    clusters: Sequence[Sequence[tuple[int, int]]] = ()
    candidates: Sequence[int] | None = None


@dataclass(frozen=True)
class ReadingBatch:
    """B questions as padded tensors (padding id 0, lengths ≥ 1)."""

    document: torch.Tensor  # (B, N) long
    document_lengths: torch.Tensor  # (B,) long
    query: torch.Tensor  # (B, Q) long
    query_lengths: torch.Tensor  # (B,) long
    edges: CorefEdges  # the documents' chains, (B, N, C)
    answer: torch.Tensor  # (B,) long: a word id (attention-sum) or a class id (classes)
    candidates: torch.Tensor | None = None  # (B, N) bool, None: every real document token

    @property
    def size(self) -> int:
        return self.document.shape[0]

    @property
    def document_mask(self) -> torch.Tensor:
        return steps_mask(self.document_lengths, self.document.shape[1])

    @property
    def query_mask(self) -> torch.Tensor:
        return steps_mask(self.query_lengths, self.query.shape[1])

    def to(self, device: torch.device | str) -> ReadingBatch:
        return ReadingBatch(self.document.to(device), self.document_lengths.to(device), self.query.to(device),
                            self.query_lengths.to(device), self.edges.to(device), self.answer.to(device),
                            None if self.candidates is None else self.candidates.to(device))


def _pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = [len(row) for row in rows]
    if min(lengths) < 1:
        raise ValueError("documents and queries need at least one token")
    padded = torch.full((len(rows), max(lengths)), pad_id, dtype=torch.long)
    for b, row in enumerate(rows):
        padded[b, : len(row)] = torch.as_tensor(list(row), dtype=torch.long)
    return padded, torch.tensor(lengths)


def make_reading_batch(examples: Sequence[ReadingExample | Mapping[str, Any]], max_chains: int,
                       pad_id: int = 0) -> ReadingBatch:
    """A :class:`ReadingBatch` of ``examples`` (:class:`ReadingExample` or dicts with its field names), with
    ``max_chains`` chains (the sequential one included) per document."""
    examples = [e if isinstance(e, ReadingExample) else ReadingExample(**e) for e in examples]
    if not examples:
        raise ValueError("no examples")
    document, document_lengths = _pad([e.document for e in examples], pad_id)
    query, query_lengths = _pad([e.query for e in examples], pad_id)
    edges = CorefEdges.from_clusters(document_lengths, [e.clusters for e in examples], max_chains)
    candidates = None
    if any(e.candidates is not None for e in examples):
        candidates = torch.zeros(document.shape, dtype=torch.bool)
        for b, example in enumerate(examples):
            positions = range(len(example.document)) if example.candidates is None else example.candidates
            positions = list(positions)
            if not positions or not all(0 <= p < len(example.document) for p in positions):
                raise ValueError(f"example {b}: candidate positions {positions} are not within its document")
            candidates[b, positions] = True
    answer = torch.tensor([int(e.answer) for e in examples])
    return ReadingBatch(document, document_lengths, query, query_lengths, edges, answer, candidates)


@dataclass(frozen=True)
class ReaderConfig:
    """Sizes and choices of a reader; the defaults are the paper's bAbI settings (Appendix B).

    ``hidden_size`` is H per direction (a C-GRU's R·Dr, so a multiple of R = 2 for "cgru"); document and query
    states are 2H. ``recurrent``: the document encoder, "gru" | "cgru" | "gru_onehot". ``answer``: "candidates"
    (attention-sum over document positions; answers are word ids) or "classes" (a softmax over ``num_answers``
    classes). ``max_chains``: the chains per document (the sequential one included) the batches carry; the
    1-hot features' width depends on it. ``dropout`` acts on every layer's outputs, in training mode only.
    """

    vocab_size: int
    embedding_size: int = 64
    hidden_size: int = 64
    layers: int = 3
    dropout: float = 0.1
    recurrent: str = "cgru"
    answer: str = "candidates"
    num_answers: int | None = None
    max_chains: int = 13

    def __post_init__(self) -> None:
        if self.recurrent not in RECURRENTS:
            raise ValueError(f"recurrent must be one of {RECURRENTS}, got {self.recurrent!r}")
        if self.answer not in ANSWERS:
            raise ValueError(f"answer must be one of {ANSWERS}, got {self.answer!r}")
        if (self.answer == "classes") != (self.num_answers is not None):
            raise ValueError("num_answers is needed by, and only by, answer='classes'")
        if self.recurrent == "cgru" and self.hidden_size % RELATIONS:
            raise ValueError(f"a C-GRU's hidden size must be a multiple of {RELATIONS}, got {self.hidden_size}")
        if self.layers < 1 or self.max_chains < 1:
            raise ValueError("layers and max_chains must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReaderConfig:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown reader options {unknown}")
        return cls(**data)


class DocumentEncoder(nn.Module):
    """One layer's bidirectional document encoder: BiGRU, Bi-C-GRU, or BiGRU with the 1-hot features appended to
    its input (at every layer, so that the baseline sees the coreference wherever the C-GRU model does).
    (B, N, D) -> (B, N, 2H) zero at padding, and the C-GRU's attention masses (B, N, 2, R) (None otherwise)."""

    def __init__(self, recurrent: str, input_size: int, hidden_size: int, max_chains: int) -> None:
        super().__init__()
        self.recurrent, self.max_chains = recurrent, max_chains
        if recurrent == "cgru":
            self.rnn: nn.Module = BiCorefGRU(input_size, hidden_size)
        else:
            extra = one_hot_size(max_chains) if recurrent == "gru_onehot" else 0
            self.rnn = BiGRU(input_size + extra, hidden_size)

    def forward(self, inputs: torch.Tensor, edges: CorefEdges,
                lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.recurrent == "cgru":
            outputs, attention = self.rnn(inputs, edges, lengths)
            return outputs * steps_mask(lengths, inputs.shape[1])[..., None], attention
        if self.recurrent == "gru_onehot":
            if edges.num_chains != self.max_chains:
                raise ValueError(f"the 1-hot features need {self.max_chains} chains, the batch has {edges.num_chains}")
            inputs = torch.cat([inputs, edges.one_hot_features().to(inputs.dtype)], dim=-1)
        return self.rnn(inputs, lengths), None


class GatedAttentionReader(PyroModule):
    """The GA reader (Dhingra et al. 2017a) with the document encoder of ``config.recurrent``.

    Word embeddings (shared by document and query) feed K layers. In layers 1..K-1 the document goes through a
    :class:`DocumentEncoder` (D, N × 2H) and the query embeddings through that layer's own BiGRU (Q, |q| × 2H);
    each document token is gated by its attention over the query tokens, d_i ← d_i ⊙ Q softmax_j(Q_jᵀ d_i), and
    becomes the next layer's input. Layer K gives the document states D and the query vector
    q = [forward state at the last query token; backward state at the first].

    Answer heads:

    - "candidates" (attention-sum, the GA reader's on LAMBADA and WikiHop): p_i = softmax over candidate positions
      of d_iᵀ q, and p(word w) = Σ_{i: token_i = w} p_i; a distribution over the vocabulary, zero off the
      candidates.
    - "classes" (bAbI's classification tasks; the paper only says "a softmax layer"): the query vector attends
      over the real document tokens, s = Σ_i softmax_i(d_iᵀ q) d_i, and logits = W [s; q] + b over the
      ``num_answers`` classes; q is given too because answers such as yes/no depend on the question beyond
      what it selects in the document.

    Dropout acts on every layer's document and query outputs (after the gating in layers 1..K-1).
    """

    def __init__(self, config: ReaderConfig) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.documents = nn.ModuleList(
            DocumentEncoder(config.recurrent, config.embedding_size if k == 0 else 2 * hidden, hidden,
                            config.max_chains)
            for k in range(config.layers)
        )
        self.queries = nn.ModuleList(BiGRU(config.embedding_size, hidden) for _ in range(config.layers))
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(4 * hidden, config.num_answers) if config.answer == "classes" else None

    def encode(self, batch: ReadingBatch) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The last layer's document states (B, N, 2H, zero at padding), the query vector q (B, 2H), and each
        layer's C-GRU attention masses (B, N, 2 directions, R; an empty list for the GRU encoders)."""
        document_mask, query_mask = batch.document_mask, batch.query_mask
        documents = self.embedding(batch.document)
        queries = self.embedding(batch.query)
        attentions = []
        for k, (document_layer, query_layer) in enumerate(zip(self.documents, self.queries)):
            states, attention = document_layer(documents, batch.edges, batch.document_lengths)
            if attention is not None:
                attentions.append(attention)
            query = self.dropout(query_layer(queries, batch.query_lengths))
            if k < len(self.documents) - 1:
                weights = masked_softmax(states @ query.transpose(1, 2), query_mask[:, None, :])  # (B, N, Q)
                documents = self.dropout(states * (weights @ query))  # gated attention
            else:
                documents = self.dropout(states)
        hidden = self.config.hidden_size
        rows = torch.arange(batch.size, device=query.device)
        last = query[rows, batch.query_lengths.to(query.device) - 1, :hidden]
        vector = torch.cat([last, query[:, 0, hidden:]], dim=-1)
        return documents * document_mask[..., None], vector, attentions

    def answer_logits(self, batch: ReadingBatch) -> torch.Tensor:
        """Normalised logits of p(answer): over the vocabulary (B, V) for "candidates", -inf at the words on no
        candidate position; over the classes (B, A) for "classes"."""
        documents, query, _ = self.encode(batch)
        scores = torch.einsum("bnd,bd->bn", documents, query)
        if self.classifier is not None:
            weights = masked_softmax(scores, batch.document_mask)
            summary = torch.einsum("bn,bnd->bd", weights, documents)
            return torch.log_softmax(self.classifier(torch.cat([summary, query], dim=-1)), dim=-1)
        allowed = batch.document_mask if batch.candidates is None else batch.document_mask & batch.candidates
        log_p = torch.log_softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)  # log p_i
        # Attention-sum per word, in log space: Σ_{i: token_i = w} p_i = e^top Σ_i exp(log p_i − top).
        top = log_p.amax(-1, keepdim=True)
        sums = scores.new_zeros(batch.size, self.config.vocab_size).scatter_add(1, batch.document,
                                                                               torch.exp(log_p - top))
        tiny = torch.finfo(sums.dtype).tiny
        return torch.where(sums > 0, torch.log(sums.clamp(min=tiny)) + top, float("-inf"))

    @pyro_method
    def model(self, batch: ReadingBatch) -> None:
        """The answer of every example, observed: p(a | document, query)."""
        with pyro.plate("examples", batch.size, dim=-1):
            pyro.sample("answer", dist.Categorical(logits=self.answer_logits(batch)), obs=batch.answer)

    def log_likelihood(self, batch: ReadingBatch) -> torch.Tensor:
        """log p(answer) per example (B,): the log density of :meth:`model`'s site ``answer``."""
        trace = poutine.trace(self.model).get_trace(batch)
        trace.compute_log_prob()
        return trace.nodes["answer"]["log_prob"]

    def predict(self, batch: ReadingBatch) -> torch.Tensor:
        """(B,) the most probable answer (a word id or a class id)."""
        return self.answer_logits(batch).argmax(-1)

    def coref_attention(self, batch: ReadingBatch) -> list[torch.Tensor]:
        """Each C-GRU layer's attention mass per relation type (B, N, 2 directions, R); empty for GRU readers."""
        return self.encode(batch)[2]


class BiReader(GatedAttentionReader):
    """The one-layer reader (the paper's "Bi-GRU" / "Bi-C-GRU", "a single layer version of GA Reader"): document
    and query encoded once, no gated attention, the same answer heads. ``config.layers`` is ignored (set to 1)."""

    def __init__(self, config: ReaderConfig) -> None:
        super().__init__(replace(config, layers=1))


# ---- matching parameter counts ---------------------------------------------------------------------------------


def parameter_count(module: nn.Module) -> int:
    """The number of parameters (scalars) of ``module``."""
    return sum(p.numel() for p in module.parameters())


def matched_hidden_size(config: ReaderConfig, reader: type[GatedAttentionReader] = GatedAttentionReader) -> int:
    """The hidden size H' of the "GRU + 1-hot" ``reader`` whose parameter count is closest to that of the C-GRU
    ``reader`` of ``config`` (the paper compares models of equal size, §3). The 1-hot features add 3H'·(R + C - 1)
    input weights per direction and layer, so H' < H; the count grows with H', which is found by bisection."""
    config = replace(config, vocab_size=1)  # the embeddings are the same in both: leave them out of the search

    def count(recurrent: str, hidden: int) -> int:
        return parameter_count(reader(replace(config, recurrent=recurrent, hidden_size=hidden)))

    target = count("cgru", config.hidden_size)
    low, high = 1, 2 * config.hidden_size
    while count("gru_onehot", high) <= target:
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if count("gru_onehot", middle) <= target else (low, middle)
    return min((low, high), key=lambda hidden: abs(count("gru_onehot", hidden) - target))
