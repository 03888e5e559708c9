"""MNEMELM (Papalampidi et al. 2022): a Transformer-XL-style LM conditioned on an entity prompt, with an entity
memory read by cross-attention at every layer (S-MNEMELM: static; D-MNEMELM: updated after every chunk).

The paper adds the memory to a pretrained 300M-parameter Transformer-XL; neither those weights nor their corpora
are available here, so the base LM is a small decoder trained from scratch (``memory="none"`` is VANILLALM).

**The base LM.** Pre-LayerNorm blocks (self-attention, GELU MLP), a final LayerNorm and tied input/output
embeddings, as in nanoGPT. A story is read as Transformer-XL reads a corpus: the entity prompt (``<sep>``-separated
mentions) as the first segment, then the story in segments of ``segment`` tokens (paper: 512), each read in
chunks of ``chunk`` tokens (paper: 64), the memory-update interval. Every layer attends, causally, over
[cache; current segment so far], where the cache holds that layer's inputs at the last ``cache`` positions
before the segment, detached (stop-gradient into earlier segments, as in T-XL); within a segment gradients flow
across chunks. So a query sees at most ``cache`` positions of earlier segments plus the earlier positions of its
own segment, and the cache can be shrunk at evaluation time (``token_log_probs(batch, cache_size=...)``) to
simulate narratives longer than the context (paper §4.1: 500 -> 100, 50, 10 with segments of 512). Story token 0
is predicted by the prompt's last output (read before the memory exists); token t > 0 by the output at token t − 1.

**Positions: ALiBi** (Press et al. 2022), a per-head penalty −slope_h · (i − j) added to the score of query i for
key j. Chosen over T-XL's own scheme (sinusoid tables + r_w_bias/r_r_bias + the relative shift) because it is
purely a function of the integer distance, so the same query/key pair gets the same bias however the text is
cut into segments (segments with a large cache reproduce one-segment reading to rounding), it has no
parameters and no tables sized by the cache, so any cache length up to and beyond the training one works, and
it is a few lines. Its recency prior applies to all models alike (slopes 2^(-8h/H), h = 1..H; the gentlest
head costs ~2 nats at 500 tokens).

**Entity memory** (§3). Z = E + 1 slots per story: slot 0 is the non-entity slot, slot j + 1 is prompt entity j
(stories of a batch may have different E: absent slots are masked). Initialisation: the prompt is read by the LM
(without memory, since the memory is made from it), and slot j + 1's key and value are both the mean of the
final-layer outputs (after the final LayerNorm) of entity j's prompt tokens; slot 0 is a learned vector. Ablation
w/o MI (``memory_init="random"``): entity slot j + 1 starts from a learned vector ``random_slots[j]``, the same for
every story, so it carries no prompt information while the model stays deterministic (exact log-probabilities;
a per-story random draw would make p(x | P) itself random). The prompt still conditions the LM as context.

Each slot is M_j = [K_j; V_j] (2d, concatenated features, as in eq. 1-2 where M enters both the scores and the
read): the cross-attention's keys W_K M_j and values W_M M_j are both computed from the concatenation, so the
dynamic value changes WHICH slot a token reads as well as what it reads (keys from K alone would fix attention
to the surface form). Per layer (eq. 1-3), in parallel with self-attention on the same normalised input x_i:

    (1) a_it = softmax_j((W_Q^t x_i) · (W_K^t M_j) / sqrt(d_h))          t = 1..H memory heads, absent slots masked
    (2) e_i = W_E [a_i1 W_M^1 M; ...; a_iH W_M^H M]
    (3) g_i = σ(W_R [h_i; e_i]),   h'_i = (1 − g_i) h_i + g_i e_i        (h_i: self-attention output; g a vector)

and h' goes into the residual stream. D-MNEMELM, after every chunk, from the LAST layer's weights a_ijt over the
chunk's real tokens i and the chunk's final outputs h_i (the same space the slots were initialised in):

    (4) h_j = Σ_i softmax_i(max_t a_ijt / τ) h_i                          τ = ``temperature`` (0.1)
    (5) w_j = max_i max_t a_ijt,   g_j = σ(W_U [h_j; V_j])
    (6) V'_j = (1 − w_j g_j) V_j + w_j g_j h_j

Keys never change. S-MNEMELM uses the same read with V = K forever (no W_U). Gradients flow through the memory
across chunks (end-to-end, as the paper stresses); only the self-attention cache is detached.

**Entity supervision** (§3). Token i's target q_i is uniform over the slots labelling it (entities whose mention
shares its sentence, from the data); a token with no label targets the non-entity slot. The paper writes
D_KL(a || q), which is infinite wherever q is sparse and a (a softmax) is not, so the regulariser here is
KL(q_i || a_itl) = Σ_j q_ij (log q_ij − log a_itlj): finite, zero iff a = q, and the usual direction for
fitting a model distribution to a target. The attention supervised at token i is the one computed while
reading token i (its output predicts token i + 1), the same attention that writes the chunk to memory in eq. 4.
Objective (per story token, averaged over the batch's real tokens):

    L = 1/T Σ_i ( −log p(x_i | x_<i; P) + λ/(L H) Σ_l Σ_t KL(q_i || a_itl) )

**As a Pyro program** the model has one observed site ``X`` (each story's tokens, an event of T with padding
masked) in the ``stories`` plate; the KL term is a training regulariser, not part of the density, so it is in
:meth:`MnemeLM.loss` only. The Python loop runs over chunks (and, when generating, tokens); batch, heads and
slots are vectorised.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.nn import PyroModule, pyro_method
from torch import nn

MEMORIES = ("none", "static", "dynamic")  # VANILLALM, S-MNEMELM, D-MNEMELM
MEMORY_INITS = ("prompt", "random")  # §3 "Memory initialization", or the w/o MI ablation
CLOSED_GATE_BIAS = -2.0  # the memory gates of a model started from a base LM (MnemeLM.start_from)


@dataclass(frozen=True)
class MnemeConfig:
    """Sizes and choices of a MNEMELM; the defaults are a CPU-sized D-MNEMELM.

    ``chunk``: the memory-update interval (paper: 64). ``segment``: the T-XL segment (sequence) length, a
    multiple of ``chunk`` (paper: 512). ``cache``: how many past positions before its segment each layer keeps
    (T-XL memory, paper: 500), overridable at evaluation. ``memory_heads``: H of
    eq. 1-2 (paper: 4). ``kl_weight``: λ (the paper gives no value; 0.1 gave the best dev NLL after one
    InScript epoch, 5.55 against 6.03 at λ = 1; 0 is the w/o ES ablation).
    ``temperature``: τ of eq. 4. ``max_entities``: Z − 1, the most prompt entities a story may have.
    """

    vocab_size: int
    d_model: int = 256
    layers: int = 4
    heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    chunk: int = 64
    segment: int = 512
    cache: int = 500
    memory: str = "dynamic"
    memory_init: str = "prompt"
    kl_weight: float = 0.1
    temperature: float = 0.1
    memory_heads: int = 4
    max_entities: int = 32

    def __post_init__(self) -> None:
        if self.memory not in MEMORIES:
            raise ValueError(f"memory must be one of {MEMORIES}, got {self.memory!r}")
        if self.memory_init not in MEMORY_INITS:
            raise ValueError(f"memory_init must be one of {MEMORY_INITS}, got {self.memory_init!r}")
        if self.memory == "none" and self.kl_weight:
            raise ValueError("kl_weight supervises the memory attention: it must be 0 without a memory")
        for name in ("heads", "memory_heads"):
            if getattr(self, name) < 1 or self.d_model % getattr(self, name):
                raise ValueError(f"d_model {self.d_model} is not a multiple of {name} = {getattr(self, name)}")
        if min(self.vocab_size, self.layers, self.d_ff, self.chunk, self.max_entities) < 1 or self.cache < 0:
            raise ValueError("sizes must be positive (cache may be 0)")
        if self.segment < 1 or self.segment % self.chunk:
            raise ValueError(f"the segment length {self.segment} is not a multiple of the chunk {self.chunk}")
        if self.kl_weight < 0 or self.temperature <= 0 or not 0 <= self.dropout < 1:
            raise ValueError("kl_weight must be >= 0, temperature > 0 and dropout in [0, 1)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MnemeConfig:
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown MNEMELM options {unknown}")
        return cls(**data)

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides: Any) -> MnemeConfig:
        """One of the paper's models (:data:`PRESETS`) with the default sizes, ``overrides`` applied last."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
        return cls(vocab_size=vocab_size, **{**PRESETS[name], **overrides})


PRESETS: dict[str, dict[str, Any]] = {
    "vanilla": {"memory": "none", "kl_weight": 0.0},
    "s_mneme": {"memory": "static"},
    "d_mneme": {"memory": "dynamic"},
    "d_mneme_no_mi": {"memory": "dynamic", "memory_init": "random"},
    "d_mneme_no_es": {"memory": "dynamic", "kl_weight": 0.0},
}


# ---- batches ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MnemeExample:
    """One prompted story as word ids. ``prompt_entity[k]``: the entity (0-based, order of the prompt) that prompt
    token k belongs to, −1 for separators. ``entity_labels[i]``: the entities labelling story token i (empty:
    none); ``mention_mask[i]``: token i is (part of) a mention. Both default to "none" (e.g. generated text)."""

    prompt: Sequence[int]
    prompt_entity: Sequence[int]
    story: Sequence[int]
    entity_labels: Sequence[Collection[int]] | None = None
    mention_mask: Sequence[bool] | None = None


@dataclass(frozen=True)
class MnemeBatch:
    """B prompted stories as tensors. Prompts are LEFT-padded, so that every prompt ends right before its story
    and positions stay contiguous; stories are right-padded.

    ``entity_labels[b, i, j]``: slot j labels story token i (slot 0 = non-entity, set exactly where no entity
    is; slot k + 1 = prompt entity k; all False at padding), from which q_i is built; Z = 1 + the most entities
    of any story in the batch.
    """

    prompt: torch.Tensor  # (B, P) long, left-padded
    prompt_entity: torch.Tensor  # (B, P) long, −1 at separators and padding
    prompt_lengths: torch.Tensor  # (B,) long
    story: torch.Tensor  # (B, T) long, right-padded
    story_lengths: torch.Tensor  # (B,) long
    entity_labels: torch.Tensor  # (B, T, Z) bool
    mention_mask: torch.Tensor  # (B, T) bool

    @property
    def size(self) -> int:
        return self.story.shape[0]

    @property
    def prompt_mask(self) -> torch.Tensor:
        """(B, P) bool: the real prompt tokens (the last ``prompt_lengths[b]`` positions)."""
        width = self.prompt.shape[1]
        return torch.arange(width, device=self.prompt.device) >= width - self.prompt_lengths[:, None]

    @property
    def story_mask(self) -> torch.Tensor:
        """(B, T) bool: the real story tokens."""
        return torch.arange(self.story.shape[1], device=self.story.device) < self.story_lengths[:, None]

    @property
    def slot_mask(self) -> torch.Tensor:
        """(B, Z) bool: the slots each story has (the non-entity slot and one per prompt entity)."""
        entities = self.prompt_entity.amax(1) + 1
        return torch.arange(self.entity_labels.shape[2], device=self.story.device) <= entities[:, None]

    def to(self, device: torch.device | str) -> MnemeBatch:
        return MnemeBatch(*(getattr(self, f.name).to(device) for f in fields(self)))


def pad_prompts(prompts: Sequence[Sequence[int]], prompt_entities: Sequence[Sequence[int]],
                pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded (B, P) prompt ids and entity indices (−1 at padding) and the (B,) lengths, checked: every
    prompt has a token, entity indices are −1 or 0..E−1 with every entity owning at least one token."""
    lengths = [len(p) for p in prompts]
    if len(prompt_entities) != len(prompts) or [len(e) for e in prompt_entities] != lengths:
        raise ValueError("every prompt needs one entity index per token")
    if not lengths or min(lengths) < 1:
        raise ValueError("every story needs a prompt of at least one token")
    width = max(lengths)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    entity = torch.full((len(prompts), width), -1, dtype=torch.long)
    for b, (tokens, owners) in enumerate(zip(prompts, prompt_entities)):
        owners = [int(o) for o in owners]
        if sorted(set(owners) - {-1}) != list(range(max(owners) + 1)):
            raise ValueError(f"prompt {b}: entity indices {sorted(set(owners))} are not -1 and 0..E-1")
        ids[b, width - len(tokens):] = torch.as_tensor([int(t) for t in tokens], dtype=torch.long)
        entity[b, width - len(tokens):] = torch.as_tensor(owners, dtype=torch.long)
    return ids, entity, torch.tensor(lengths)


def make_batch(examples: Sequence[MnemeExample | Mapping[str, Any]], pad_id: int = 0) -> MnemeBatch:
    """A :class:`MnemeBatch` of ``examples`` (:class:`MnemeExample` or dicts with its field names), e.g. from
    ``coref.corpora.stories``: ``prompt_tokens(story)`` mapped to ids gives ``prompt``/``prompt_entity``, the story's
    tokens, ``entity_labels`` (per-token entity sets) and ``mention_mask`` the rest."""
    examples = [e if isinstance(e, MnemeExample) else MnemeExample(**e) for e in examples]
    if not examples:
        raise ValueError("no examples")
    prompt, prompt_entity, prompt_lengths = pad_prompts([e.prompt for e in examples],
                                                        [e.prompt_entity for e in examples], pad_id)
    lengths = [len(e.story) for e in examples]
    if min(lengths) < 1:
        raise ValueError("every story needs at least one token")
    entities = (prompt_entity.amax(1) + 1).tolist()
    size, width, slots = len(examples), max(lengths), 1 + max(entities)
    story = torch.full((size, width), pad_id, dtype=torch.long)
    labels = torch.zeros(size, width, slots, dtype=torch.bool)
    mentions = torch.zeros(size, width, dtype=torch.bool)
    for b, example in enumerate(examples):
        n = lengths[b]
        story[b, :n] = torch.as_tensor([int(t) for t in example.story], dtype=torch.long)
        token_labels = example.entity_labels if example.entity_labels is not None else [()] * n
        flags = example.mention_mask if example.mention_mask is not None else [False] * n
        if len(token_labels) != n or len(flags) != n:
            raise ValueError(f"story {b}: {n} tokens but {len(token_labels)} label sets, {len(flags)} mention flags")
        mentions[b, :n] = torch.as_tensor([bool(f) for f in flags])
        for i, entity_set in enumerate(token_labels):
            if any(not 0 <= int(k) < entities[b] for k in entity_set):
                raise ValueError(f"story {b}, token {i}: labels {sorted(entity_set)} outside its "
                                 f"{entities[b]} prompt entities")
            labels[b, i, [int(k) + 1 for k in entity_set] or [0]] = True
    return MnemeBatch(prompt, prompt_entity, prompt_lengths, story, torch.tensor(lengths), labels, mentions)


# ---- the building blocks ---------------------------------------------------------------------------------------


def alibi_slopes(heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes 2^(−8h/H), h = 1..H (Press et al. 2022; their geometric sequence for any H)."""
    return torch.pow(2.0, -8.0 * torch.arange(1, heads + 1) / heads)


@dataclass(frozen=True)
class Cache:
    """What each layer keeps of the positions before the current chunk (the T-XL memory and the segment so far),
    and which are real. As in T-XL, the layers' inputs, from which every chunk recomputes keys and values with
    the current weights (what training needs); or, with ``keys_values``, those keys and values themselves
    (B, m, 2d): the same numbers without recomputing them at every step of generation."""

    states: list[torch.Tensor]  # per layer (B, m, d), or (B, m, 2d) keys and values
    real: torch.Tensor  # (B, m) bool
    keys_values: bool = False

    def last(self, positions: int) -> Cache:
        """The last ``positions`` positions, detached (stop-gradient into earlier segments, as in T-XL)."""
        start = max(self.real.shape[1] - positions, 0)
        return Cache([s[:, start:].detach() for s in self.states], self.real[:, start:], self.keys_values)


@dataclass(frozen=True)
class Memory:
    """The entity memory: static keys K and values V (B, Z, d), and which slots exist (B, Z)."""

    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor

    @property
    def slots(self) -> torch.Tensor:
        """(B, Z, 2d) M_j = [K_j; V_j] (eq. 1)."""
        return torch.cat([self.keys, self.values], dim=-1)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(B, N, d) -> (B, heads, N, d / heads)."""
    return x.view(*x.shape[:2], heads, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, N, d_h) -> (B, N, heads · d_h)."""
    return x.transpose(1, 2).flatten(2)


class SelfAttention(nn.Module):
    """Multi-head attention of the chunk's queries over [cache; chunk], under an additive mask that holds the
    ALiBi bias and −inf where a key may not be seen."""

    def __init__(self, config: MnemeConfig) -> None:
        super().__init__()
        self.heads, self.dropout = config.heads, config.dropout
        self.query = nn.Linear(config.d_model, config.d_model)
        self.key_value = nn.Linear(config.d_model, 2 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor, keys_values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, L, d) normalised chunk, keys_values (B, S, 2d) of the normalised [cache; chunk], mask
        (B, H, L, S)."""
        keys, values = keys_values.chunk(2, dim=-1)
        attended = F.scaled_dot_product_attention(
            split_heads(self.query(x), self.heads), split_heads(keys, self.heads), split_heads(values, self.heads),
            attn_mask=mask, dropout_p=self.dropout if self.training else 0.0)
        return self.out(merge_heads(attended))


class MemoryAttention(nn.Module):
    """The cross-attention block of eq. 1-3: reads the entity memory and gates the result into the
    self-attention output."""

    def __init__(self, config: MnemeConfig) -> None:
        super().__init__()
        d = config.d_model
        self.heads = config.memory_heads
        self.query = nn.Linear(d, d)  # W_Q
        self.key = nn.Linear(2 * d, d)  # W_K, over M_j = [K_j; V_j]
        self.value = nn.Linear(2 * d, d)  # W_M
        self.out = nn.Linear(d, d)  # W_E
        self.gate = nn.Linear(2 * d, d)  # W_R

    def forward(self, x: torch.Tensor, h: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, L, d) the normalised layer input, h (B, L, d) the self-attention output: h' (B, L, d) and the
        log attention weights log a (B, H, L, Z), −inf at absent slots."""
        slots = memory.slots
        queries = split_heads(self.query(x), self.heads)
        keys, values = split_heads(self.key(slots), self.heads), split_heads(self.value(slots), self.heads)
        scores = queries @ keys.transpose(-1, -2) / math.sqrt(queries.shape[-1])
        log_a = torch.log_softmax(scores.masked_fill(~memory.mask[:, None, None, :], float("-inf")), -1)  # eq. 1
        e = self.out(merge_heads(log_a.exp() @ values))  # eq. 2
        g = torch.sigmoid(self.gate(torch.cat([h, e], dim=-1)))  # eq. 3
        return (1 - g) * h + g * e, log_a


class Block(nn.Module):
    """A pre-LayerNorm decoder layer; with a memory, the cross-attention runs beside the self-attention."""

    def __init__(self, config: MnemeConfig) -> None:
        super().__init__()
        d = config.d_model
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attention = SelfAttention(config)
        self.memory = MemoryAttention(config) if config.memory != "none" else None
        self.mlp = nn.Sequential(nn.Linear(d, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, d))
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, past: torch.Tensor, mask: torch.Tensor, memory: Memory | None,
                keys_values: bool = False) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """x (B, L, d) this layer's chunk input after ``past``, the cache's inputs (B, m, d) or, with
        ``keys_values``, their keys and values (B, m, 2d): the layer's output, its memory log attention
        (B, H, L, Z) (None when the memory is not read) and what the cache keeps of [past; x], of the same kind."""
        here = self.norm1(x)
        past_keys_values = past if keys_values else self.attention.key_value(self.norm1(past))
        context = torch.cat([past_keys_values, self.attention.key_value(here)], dim=1)
        h = self.attention(here, context, mask)
        log_a = None
        if memory is not None and self.memory is not None:
            h, log_a = self.memory(here, h, memory)
        kept = context if keys_values else torch.cat([past, x], dim=1)
        x = x + self.dropout(h)
        return x + self.dropout(self.mlp(self.norm2(x))), log_a, kept


def entity_kl(log_attention: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """KL(q_i || a_itl) per token averaged over layers and heads, (B, T): ``log_attention`` (B, layers, H, T, Z),
    ``labels`` (B, T, Z) bool, q_i uniform over the labelled slots (0 where a token has no label, e.g. padding)."""
    q = labels.to(log_attention.dtype)
    q = q / q.sum(-1, keepdim=True).clamp(min=1)
    q = q[:, None, None]
    log_a = log_attention.clamp(min=torch.finfo(log_attention.dtype).min)  # q = 0 wherever a = 0
    return (torch.xlogy(q, q) - q * log_a).sum(-1).mean((1, 2))


def nucleus_sample(logits: torch.Tensor, top_p: float, generator: torch.Generator | None = None,
                   candidates: int = 1024) -> torch.Tensor:
    """(B,) a draw from each row of ``logits`` (B, V) restricted to its nucleus: the most probable words whose
    mass first reaches ``top_p`` (the most probable word always), renormalised (Holtzman et al. 2020). The
    nucleus is looked for among the ``candidates`` most probable words, and the whole vocabulary sorted only
    when some row's candidates hold less than ``top_p``; the draw inverts the nucleus's cumulative mass. The
    same distribution as sorting all words and ``torch.multinomial``, at a fraction of the cost a step."""
    probs = torch.softmax(logits, -1)
    top, order = probs.topk(min(candidates, probs.shape[-1]), -1)
    if top.shape[-1] < probs.shape[-1] and bool((top.sum(-1) < top_p).any()):
        top, order = probs.sort(-1, descending=True)
    kept = top.masked_fill(top.cumsum(-1) - top >= top_p, 0.0).cumsum(-1)
    u = torch.rand(kept.shape[0], 1, generator=generator, device=kept.device, dtype=kept.dtype) * kept[:, -1:]
    index = torch.searchsorted(kept, u, right=True).clamp(max=kept.shape[-1] - 1)
    return order.gather(-1, index).squeeze(-1)


# ---- the model -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """What reading a batch gives: ``hidden`` (B, T, d) the final output that predicts each story token;
    ``log_attention`` (B, layers, H, T, Z) the memory log attention while reading each story token and
    ``values`` (B, C + 1, Z, d) the memory values before each of the C chunks and after the last (None without
    a memory)."""

    hidden: torch.Tensor
    log_attention: torch.Tensor | None
    values: torch.Tensor | None


@dataclass(frozen=True)
class MnemeLoss:
    """The objective per story token (scalars): ``total`` = ``nll`` + λ ``kl``; ``kl`` is reported (0 without a
    memory) even when λ = 0."""

    total: torch.Tensor
    nll: torch.Tensor
    kl: torch.Tensor


@dataclass(frozen=True)
class MemoryTrace:
    """The memory while reading a batch, for inspection: ``attention`` (B, layers, H, T, Z) weights a at each
    story token (chunk c is tokens c·chunk .. (c+1)·chunk − 1), ``values`` (B, C + 1, Z, d) before each chunk
    and after the last, ``slot_mask`` (B, Z)."""

    attention: torch.Tensor
    values: torch.Tensor
    slot_mask: torch.Tensor


class MnemeLM(PyroModule):
    """VANILLALM, S-MNEMELM or D-MNEMELM, as ``config.memory`` says; see the module docstring."""

    def __init__(self, config: MnemeConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embedding = nn.Embedding(config.vocab_size, d)  # tied with the output layer
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(d)
        self.register_buffer("slopes", alibi_slopes(config.heads), persistent=False)
        if config.memory != "none":
            self.null_slot = nn.Parameter(torch.randn(d))  # the non-entity slot, at the scale of LayerNorm outputs
            if config.memory_init == "random":
                self.random_slots = nn.Parameter(torch.randn(config.max_entities, d))  # w/o MI
            if config.memory == "dynamic":
                self.update_gate = nn.Linear(2 * d, d)  # W_U, eq. 5
        self.apply(self._init_weights)
        for block in self.blocks:  # nanoGPT: residual projections scaled down with depth
            for layer in (block.attention.out, block.mlp[2]):
                nn.init.normal_(layer.weight, std=0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear):
            nn.init.zeros_(module.bias)

    def start_from(self, base: MnemeLM) -> None:
        """Take the weights of a trained base LM (a VANILLALM of the same sizes) for every part the two share,
        as the paper adds its memory to a pretrained LM (§3). The memory's parts stay new, their gates (eq. 3)
        nearly closed, g ≈ σ(−2) = 0.12 (as adapters start near the identity), so that training starts from the
        base LM's predictions rather than from their mix with an untrained read."""
        shared = ("vocab_size", "d_model", "layers", "heads", "d_ff")
        different = [name for name in shared if getattr(self.config, name) != getattr(base.config, name)]
        if different or base.config.memory != "none":
            raise ValueError("the base must be a VANILLALM of the same sizes"
                             + (f" (it differs in {', '.join(different)})" if different else ""))
        self.load_state_dict(base.state_dict(), strict=False)  # strict=False: the memory's parts are not in it
        for block in self.blocks:
            if block.memory is not None:
                nn.init.constant_(block.memory.gate.bias, CLOSED_GATE_BIAS)

    # -- reading --

    def _mask(self, cache_real: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """(B, H, L, m + L) additive attention mask: −slope_h · distance where query i may see key j (a real key
        not after it; always itself, so padding queries stay finite), −inf elsewhere."""
        past, steps = cache_real.shape[1], real.shape[1]
        distance = (torch.arange(steps, device=real.device)[:, None] + past
                    - torch.arange(past + steps, device=real.device)[None, :])  # (L, S)
        visible = ((distance >= 0) & torch.cat([cache_real, real], 1)[:, None, :]) | (distance == 0)  # (B, L, S)
        bias = -self.slopes[:, None, None] * distance.to(self.slopes.dtype)  # (H, L, S)
        return bias[None].masked_fill(~visible[:, None], float("-inf"))

    def _read_chunk(self, ids: torch.Tensor, real: torch.Tensor, cache: Cache | None, memory: Memory | None,
                    keys_values: bool = False) -> tuple[torch.Tensor, Cache, list[torch.Tensor]]:
        """Read ``ids`` (B, L) after ``cache`` (None: no past; a new cache keeps keys and values when
        ``keys_values``): the final outputs (B, L, d), the cache extended by these positions (untruncated), and
        each layer's memory log attention (empty without a memory)."""
        x = self.dropout(self.embedding(ids))
        if cache is None:
            width = 2 * x.shape[-1] if keys_values else x.shape[-1]
            cache = Cache([x.new_zeros(x.shape[0], 0, width)] * len(self.blocks), real[:, :0], keys_values)
        mask = self._mask(cache.real, real)
        states, log_attention = [], []
        for block, past in zip(self.blocks, cache.states):
            x, log_a, kept = block(x, past, mask, memory, cache.keys_values)
            states.append(kept)
            if log_a is not None:
                log_attention.append(log_a)
        return self.norm(x), Cache(states, torch.cat([cache.real, real], 1), cache.keys_values), log_attention

    def _initial_memory(self, prompt_out: torch.Tensor, prompt_entity: torch.Tensor, slots: int) -> Memory:
        """Keys = values = the slots of §3: the mean final output of each entity's prompt tokens (or, w/o MI,
        ``random_slots``), after the learned non-entity slot 0."""
        entities = torch.arange(slots - 1, device=prompt_entity.device)
        if self.config.memory_init == "prompt":
            owner = (prompt_entity[..., None] == entities).to(prompt_out.dtype)  # (B, P, E)
            means = owner.transpose(1, 2) @ prompt_out / owner.sum(1)[..., None].clamp(min=1)
        else:
            means = self.random_slots[: slots - 1].expand(prompt_out.shape[0], -1, -1)
        values = torch.cat([self.null_slot.expand(prompt_out.shape[0], 1, -1), means], dim=1)
        mask = torch.arange(slots, device=prompt_entity.device) <= prompt_entity.amax(1, keepdim=True) + 1
        return Memory(values, values, mask)

    def _update_memory(self, memory: Memory, log_a: torch.Tensor, out: torch.Tensor, real: torch.Tensor) -> Memory:
        """Eq. 4-6 after a chunk: ``log_a`` (B, H, L, Z) the last layer's log attention, ``out`` (B, L, d) the
        chunk's final outputs, ``real`` (B, L). A story without real tokens in the chunk keeps its values."""
        peak = log_a.exp().amax(1).masked_fill(~real[..., None], 0.0)  # max over heads, (B, L, Z)
        scores = (peak / self.config.temperature).masked_fill(~real[..., None], torch.finfo(out.dtype).min)
        summary = torch.softmax(scores, dim=1).transpose(1, 2) @ out  # eq. 4, (B, Z, d)
        weight = peak.amax(1)[..., None]  # eq. 5, w_j (B, Z, 1)
        gate = torch.sigmoid(self.update_gate(torch.cat([summary, memory.values], dim=-1)))  # eq. 5, g_j
        values = (1 - weight * gate) * memory.values + weight * gate * summary  # eq. 6
        return Memory(memory.keys, values, memory.mask)

    def _check(self, slots: int) -> None:
        if slots - 1 > self.config.max_entities:
            raise ValueError(f"{slots - 1} prompt entities exceed max_entities = {self.config.max_entities}")

    def read(self, batch: MnemeBatch, cache_size: int | None = None) -> Reading:
        """Read every story of ``batch`` after its prompt, chunk by chunk, cutting the cache to ``cache_size``
        positions (``config.cache`` by default) at the end of each segment, and updating the memory after each
        chunk in D-MNEMELM."""
        config = self.config
        limit = config.cache if cache_size is None else cache_size
        slots = batch.entity_labels.shape[2]
        self._check(slots)
        prompt_out, cache, _ = self._read_chunk(batch.prompt, batch.prompt_mask, None, None)
        memory = None if config.memory == "none" else self._initial_memory(prompt_out, batch.prompt_entity, slots)
        cache = cache.last(limit)
        story_mask = batch.story_mask
        outputs, attention, values = [], [], []
        for start in range(0, batch.story.shape[1], config.chunk):
            real = story_mask[:, start: start + config.chunk]
            if memory is not None:
                values.append(memory.values)
            out, cache, log_attention = self._read_chunk(batch.story[:, start: start + config.chunk], real, cache,
                                                         memory)
            if (start + config.chunk) % config.segment == 0:
                cache = cache.last(limit)
            outputs.append(out)
            if memory is not None:
                attention.append(torch.stack(log_attention, dim=1))
            if config.memory == "dynamic":
                memory = self._update_memory(memory, log_attention[-1], out, real)
        hidden = torch.cat([prompt_out[:, -1:], torch.cat(outputs, dim=1)[:, :-1]], dim=1)
        if memory is None:
            return Reading(hidden, None, None)
        values.append(memory.values)
        return Reading(hidden, torch.cat(attention, dim=3), torch.stack(values, dim=1))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Word logits from final outputs through the tied embedding, (..., V)."""
        return hidden @ self.embedding.weight.T

    # -- the model and its objective --

    @pyro_method
    def model(self, batch: MnemeBatch) -> None:
        """The generative story: every story's tokens, each from p(x_i | x_<i; P)."""
        logits = self.logits(self.read(batch).hidden)
        with pyro.plate("stories", batch.size, dim=-1):
            pyro.sample("X", dist.Categorical(logits=logits).mask(batch.story_mask).to_event(1), obs=batch.story)

    def log_likelihood(self, batch: MnemeBatch) -> torch.Tensor:
        """log p(story | prompt) per story (B,): the log density of :meth:`model`'s site ``X``."""
        trace = poutine.trace(self.model).get_trace(batch)
        trace.compute_log_prob()
        return trace.nodes["X"]["log_prob"]

    def _token_log_probs(self, hidden: torch.Tensor, batch: MnemeBatch) -> torch.Tensor:
        log_p = -F.cross_entropy(self.logits(hidden).flatten(0, 1), batch.story.flatten(), reduction="none")
        return log_p.view_as(batch.story) * batch.story_mask

    def token_log_probs(self, batch: MnemeBatch, cache_size: int | None = None) -> torch.Tensor:
        """(B, T) log p(x_i | x_<i; P) of every story token, 0 at padding, with a cache of ``cache_size``
        positions (``config.cache`` by default; smaller simulates longer narratives): perplexity, −log p_e over
        ``batch.mention_mask``, −log p_r over the rest, per-section curves."""
        return self._token_log_probs(self.read(batch, cache_size).hidden, batch)

    def loss(self, batch: MnemeBatch) -> MnemeLoss:
        """The training objective L of §3 per real story token of the batch, with its two parts."""
        reading = self.read(batch)
        tokens = batch.story_mask.sum()
        nll = -self._token_log_probs(reading.hidden, batch).sum() / tokens
        if reading.log_attention is None:
            return MnemeLoss(nll, nll, torch.zeros_like(nll))
        kl = entity_kl(reading.log_attention, batch.entity_labels).sum() / tokens
        return MnemeLoss(nll + self.config.kl_weight * kl, nll, kl)

    @torch.no_grad()
    def cross_attention(self, batch: MnemeBatch, cache_size: int | None = None) -> MemoryTrace:
        """The memory attention at every layer, head and story token, and the values chunk by chunk."""
        if self.config.memory == "none":
            raise ValueError("VANILLALM has no entity memory")
        reading = self.read(batch, cache_size)
        return MemoryTrace(reading.log_attention.exp(), reading.values, batch.slot_mask)

    # -- generation --

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[Sequence[int]], prompt_entity: Sequence[Sequence[int]],
                 max_tokens: int, top_p: float = 0.8, temperature: float = 1.0,
                 generator: torch.Generator | None = None, cache_size: int | None = None,
                 banned: Sequence[int] = ()) -> Iterator[torch.Tensor]:
        """Sample a story for each prompt (rows of ids and entity indices, ragged lists or a (B, P) tensor) by
        nucleus sampling, yielding the (B,) next tokens one step at a time; the tokens ``banned`` (e.g. padding,
        or ``<eos>`` for stories of a set length) are never drawn. Token by token, with the same
        conditionals as :meth:`read`: every earlier token of the segment stays visible, at each segment's end
        the cache is cut to ``cache_size`` positions, and at each chunk's end (D-MNEMELM) the memory is updated.
        Call ``eval()`` first: sampling with dropout would not be the model's distribution. The cache keeps each
        layer's keys and values, so a step computes them for the new token only."""
        if self.training:
            raise RuntimeError("generate() samples from the model without dropout: call eval() first")
        if not 0 < top_p <= 1 or temperature <= 0:
            raise ValueError("top_p must be in (0, 1] and temperature > 0")
        config = self.config
        limit = config.cache if cache_size is None else cache_size
        device = self.embedding.weight.device
        prompt, entity, lengths = (t.to(device) for t in pad_prompts(prompt_ids, prompt_entity))
        slots = int(entity.max()) + 2
        self._check(slots)
        width = prompt.shape[1]
        prompt_real = torch.arange(width, device=device) >= width - lengths[:, None]
        out, cache, _ = self._read_chunk(prompt, prompt_real, None, None, keys_values=True)
        memory = None if config.memory == "none" else self._initial_memory(out, entity, slots)
        cache = cache.last(limit)
        hidden = out[:, -1]
        real = torch.ones(prompt.shape[0], 1, dtype=torch.bool, device=device)
        chunk_out, chunk_attention = [], []
        for step in range(1, max_tokens + 1):
            logits = self.logits(hidden)
            logits[:, list(banned)] = float("-inf")
            token = nucleus_sample(logits / temperature, top_p, generator)
            yield token
            if step == max_tokens:
                return
            out, cache, log_attention = self._read_chunk(token[:, None], real, cache, memory)
            hidden = out[:, -1]
            chunk_out.append(out)
            if log_attention:
                chunk_attention.append(log_attention[-1])
            if step % config.chunk == 0:
                if config.memory == "dynamic":
                    memory = self._update_memory(memory, torch.cat(chunk_attention, 2), torch.cat(chunk_out, 1),
                                                 real.expand(-1, config.chunk))
                chunk_out, chunk_attention = [], []
            if step % config.segment == 0:
                cache = cache.last(limit)


def parameter_count(module: nn.Module) -> int:
    """The number of parameters (scalars) of ``module``."""
    return sum(p.numel() for p in module.parameters())
