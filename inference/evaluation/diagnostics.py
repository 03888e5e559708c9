"""Where EntityNLM wins and loses against the RNNLM, token by token: the terms behind the perplexities
(:func:`diagnose` of a :class:`DiagnosticsConfig`; its command is :mod:`inference.commands.diagnostics`, ``python
-m inference.diagnostics``).

Every figure is a negative log-probability in nats per token (and, in the second table, its perplexity),
summed over a group of tokens of the stream every model predicts: all tokens; the tokens inside gold mentions;
the words outside mentions; the sentence ends ``</s>``. The last three partition the first. Columns:

- RNNLM: -log p_RNN(x_t | x_<t).
- word|gold: -log p(x_t | gold z, x_<t), EntityNLM's word distribution (eq. 6) given the gold structure;
  Delta = word|gold - RNNLM (negative: EntityNLM predicts those words better).
- latent|gold: -log p(R_t, E_t, L_t | ...) of the gold structure (eq. 3-5), charged to the token where each
  choice is made (R wherever a mention may start, also outside mentions; E and L at mention starts).
- joint|gold = word|gold + latent|gold: -log p(x, gold z) / tokens, EntityNLM's training objective.
- marginal: -log p_hat(x) / tokens, the importance-sampling estimate of eq. 11 (``resample="never"``), on all
  tokens only (p_hat(x) is a per-document quantity).
- E_w word, E_w latent: the same word and latent terms for the sampled structures, averaged with the
  self-normalised importance weights: the posterior-expected word and structure costs.

Then ``log p_hat(x) = E_w[log p(x, z)] + remainder``: the remainder (reported in nats per token) estimates the
posterior entropy H[p(z | x)], what the marginal gains by summing over structures instead of committing to one.
Since p(x) >= p(x, gold z) always, a document whose log p_hat(x) is below its gold joint has an estimate that
is too low (too few particles or a poor proposal), not a model that is too weak: the command counts them.

The particles are rescored with :meth:`EntityNLM.token_log_probs`, which redraws each new entity's embedding
noise (eq. 7), so a particle's rescored log p(x, z) differs slightly from the one its weight was computed with;
the weighted mean absolute difference is reported (``noise_gap``, nats per document; 0 when the model's
``new_entity_scale`` is 0). The gold terms draw their own noise too, as in training. The E_w columns are
only as good as the weights: with a mean ESS near 1 they describe a single particle.

Below the tables, token by token: the ``--top`` tokens where word|gold - RNNLM is most negative (EntityNLM wins)
and most positive (it loses), with the words before them and their group, and the word types with the largest
summed difference each way. The JSON (``--json``) holds all of it, each group's summed nats, and each
document's sums, log p_hat(x), remainder, ESS and noise gap; values JSON cannot hold are written as null.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from coref.corpora.preprocess import EOS, Vocabulary
from coref.io.progress import progress
from generative.baselines.rnnlm import RNNLM
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.model import Annotation, EntityNLM, EntityProposal
from generative.layers.batch import DocumentBatch, batches_by_length
from inference.algorithms.smc import ParticleStructures, sample_structures
from inference.data import prepared_documents
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import (
    Checkpoint,
    CheckpointError,
    entitynlm_checkpoint,
    entitynlm_modules,
    language_model,
    pretrained,
)

GROUPS = ("all", "mention", "outside", "eos")
GROUP_LABELS = {"all": "all tokens", "mention": "in gold mentions", "outside": "outside mentions",
                "eos": "sentence ends </s>"}
# the per-token terms, as negative log-probabilities; "rnnlm" is absent without a baseline
TERMS = ("rnnlm", "word_gold", "latent_gold", "joint_gold", "word_posterior", "latent_posterior")
COLUMNS = (  # (header, key in a group's figures); "marginal" is on all tokens only
    ("RNNLM", "rnnlm"), ("word|gold", "word_gold"), ("Delta", "word_gold_minus_rnnlm"),
    ("latent|gold", "latent_gold"), ("joint|gold", "joint_gold"), ("marginal", "marginal"),
    ("E_w word", "word_posterior"), ("E_w latent", "latent_posterior"),
)
CONTEXT_WORDS = 4  # words shown before a token in the lists of the largest differences


@dataclass(frozen=True)
class DiagnosticsConfig:
    """What is diagnosed, and how: the options of ``python -m inference.diagnostics``. ``checkpoint`` None is the
    bundled EntityNLM, ``proposal`` None its own; ``baseline`` None is the bundled RNNLM beside the bundled model
    (none beside another), ``"none"`` no baseline; ``documents`` None is the whole split; ``top`` tokens and
    word types are listed each way."""

    checkpoint: str | None = None
    proposal: str | None = None
    baseline: str | None = None
    corpus: str = "sample"
    split: str = "test"
    data_dir: str | None = None
    documents: int | None = None
    particles: int = 100
    batch_tokens: int = 20_000
    top: int = 10
    device: str = "auto"
    seed: int = 0


def baseline_path(config: DiagnosticsConfig) -> Path | None:
    """The RNNLM to compare with: the config's, else the bundled one when the model is the bundled one."""
    if config.baseline is None:
        return pretrained("rnnlm.pt") if config.checkpoint is None else None
    return None if config.baseline == "none" else Path(config.baseline)


# ---- per-token terms -------------------------------------------------------------------------------------------


def group_masks(batch: DocumentBatch, eos: int) -> dict[str, torch.Tensor]:
    """(B, T) masks of the groups: all real tokens, those in gold mentions, the other words, the ``</s>``."""
    mention = (batch.R == 1) & batch.mask
    end = (batch.words == eos) & batch.mask & ~mention
    return {"all": batch.mask, "mention": mention, "outside": batch.mask & ~mention & ~end, "eos": end}


def particle_terms(model: EntityNLM, batch: DocumentBatch, structures: ParticleStructures, max_rows_tokens: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, B, T) word and structure log-probabilities of every particle's annotation, by
    :meth:`EntityNLM.token_log_probs` on groups of particles of at most ``max_rows_tokens`` rows x steps."""
    particles = structures.particles
    chunk = max(1, max_rows_tokens // max(1, batch.size * batch.steps))
    annotations = structures.annotations(batch.mask)  # the padding valid: the sampler's counters run past the end
    words, latent = [], []
    for start in range(0, particles, chunk):
        terms = model.token_log_probs(batch, Annotation(*(value[start:start + chunk] for value in (
            annotations.R, annotations.E, annotations.L))))
        words.append(terms.X.view(-1, batch.size, batch.steps))
        latent.append(terms.structure.view(-1, batch.size, batch.steps))
    return torch.cat(words), torch.cat(latent)


@dataclass(frozen=True)
class BatchDiagnostics:
    """One batch's per-token terms (B, T), as negative log-probabilities (0 at padding), and per-document figures.

    ``rnnlm`` is None without a baseline. ``log_marginal`` (B,) is log p_hat(x); ``remainder`` (B,) is
    log p_hat(x) - E_w[log p(x, z)], with log p(x, z) the rescored one; ``ess`` (B,) of the weights;
    ``noise_gap`` (B,) the weighted mean |sampler's log p(x, z) - rescored log p(x, z)|.
    """

    batch: DocumentBatch
    groups: dict[str, torch.Tensor]
    terms: dict[str, torch.Tensor]
    log_marginal: torch.Tensor
    remainder: torch.Tensor
    ess: torch.Tensor
    noise_gap: torch.Tensor


@torch.no_grad()
def diagnose_batch(batch: DocumentBatch, model: EntityNLM, proposal: EntityProposal, rnnlm: RNNLM | None,
                   particles: int, eos: int, max_rows_tokens: int = 20_000) -> BatchDiagnostics:
    """The gold decomposition, the RNNLM's terms and the importance-weighted decomposition of one batch."""
    gold = model.token_log_probs(batch, Annotation.of(batch))
    terms = {"word_gold": -gold.X, "latent_gold": -gold.structure * batch.mask}
    terms["joint_gold"] = terms["word_gold"] + terms["latent_gold"]
    if rnnlm is not None:
        terms["rnnlm"] = -rnnlm.token_log_probs(batch)
    structures = sample_structures(EntityNLMParticles(model, proposal, batch, particles), eos, resample="never")
    posterior, remainder, noise_gap = posterior_decomposition(model, batch, structures, max_rows_tokens)
    return BatchDiagnostics(batch, group_masks(batch, eos), {**terms, **posterior}, structures.log_marginal,
                            remainder, structures.ess, noise_gap)


@torch.no_grad()
def posterior_decomposition(model: EntityNLM, batch: DocumentBatch, structures: ParticleStructures,
                            max_rows_tokens: int = 20_000
                            ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """The weighted particles' terms: ``{"word_posterior", "latent_posterior"}`` (B, T) negative
    log-probabilities averaged with the self-normalised weights; the remainder (B,)
    log p_hat(x) - E_w[log p(x, z)]; and the noise gap (B,), the weighted mean |sampler's log p(x, z) -
    rescored log p(x, z)| (the rescoring redraws the eq. 7 noise)."""
    words, latent = particle_terms(model, batch, structures, max_rows_tokens)
    weights = structures.normalized_weights()  # (N, B)
    terms = {"word_posterior": -(weights[..., None] * words).sum(0),
             "latent_posterior": -(weights[..., None] * latent).sum(0) * batch.mask}
    rescored = (words + latent).sum(-1)  # (N, B) log p(x, z) of each particle, with redrawn noise
    remainder = structures.log_marginal - (weights * rescored).sum(0)
    noise_gap = (weights * (structures.log_joint - rescored).abs()).sum(0)
    return terms, remainder, noise_gap


# ---- from terms to figures -------------------------------------------------------------------------------------


def perplexity(nats_per_token: float | None) -> float | None:
    """exp(nats per token), None where it is undefined or past a float."""
    if nats_per_token is None or not math.isfinite(nats_per_token) or nats_per_token > 700:
        return None
    return math.exp(nats_per_token)


def per_token(total: float | None, tokens: int) -> float | None:
    return None if total is None or tokens == 0 else total / tokens


def group_figures(diagnostics: list[BatchDiagnostics]) -> tuple[dict[str, dict], dict[str, int]]:
    """Each group's summed terms (nats) and token count."""
    sums = {group: dict.fromkeys(TERMS, 0.0) for group in GROUPS}
    counts = dict.fromkeys(GROUPS, 0)
    for part in diagnostics:
        for group, mask in part.groups.items():
            counts[group] += int(mask.sum())
            for name in TERMS:
                value = part.terms.get(name)
                sums[group][name] = None if value is None or sums[group][name] is None \
                    else sums[group][name] + float((value * mask).sum())
    return sums, counts


def document_rows(diagnostics: list[BatchDiagnostics]) -> list[dict]:
    """Each document's tokens, summed terms (nats), log p_hat(x), remainder, ESS and noise gap."""
    rows = []
    for part in diagnostics:
        batch = part.batch
        sums = {name: (value * batch.mask).sum(-1).tolist() for name, value in part.terms.items()}
        for i, (name, number) in enumerate(batch.keys):
            row = {"document": name, "part": number, "tokens": int(batch.lengths[i])}
            row.update({f"{term}_nll": sums[term][i] if term in sums else None for term in TERMS})
            row.update({"log_marginal": float(part.log_marginal[i]), "remainder": float(part.remainder[i]),
                        "ess": float(part.ess[i]), "noise_gap": float(part.noise_gap[i])})
            row["marginal_below_gold"] = row["log_marginal"] < -row["joint_gold_nll"]
            rows.append(row)
    return rows


def largest_differences(diagnostics: list[BatchDiagnostics], vocabulary: Vocabulary, top: int) -> dict:
    """The ``top`` tokens and word types where word|gold - RNNLM is largest (EntityNLM loses) and smallest
    (it wins); word types by their summed difference. Empty without a baseline or with ``top`` 0."""
    if top <= 0 or not diagnostics or "rnnlm" not in diagnostics[0].terms:
        return {}
    tokens, type_sum, type_count = [], torch.zeros(len(vocabulary)), torch.zeros(len(vocabulary))
    for part in diagnostics:
        batch = part.batch
        difference = (part.terms["word_gold"] - part.terms["rnnlm"]).cpu()
        mask, words = batch.mask.cpu(), batch.words.cpu()
        type_sum += torch.bincount(words[mask], difference[mask], minlength=len(vocabulary))[:len(vocabulary)]
        type_count += torch.bincount(words[mask], minlength=len(vocabulary))[:len(vocabulary)].float()
        flat = torch.where(mask, difference, torch.nan).flatten()
        real = int(mask.sum())
        k = min(top, real)
        chosen = set(torch.topk(flat.nan_to_num(-math.inf), k).indices.tolist())
        chosen |= set(torch.topk(-flat.nan_to_num(math.inf), k).indices.tolist())
        group_of = {group: part.groups[group].cpu() for group in GROUPS[1:]}
        for index in chosen:
            b, t = divmod(index, batch.steps)
            group = next(g for g in GROUPS[1:] if bool(group_of[g][b, t]))
            context = [vocabulary.words[w] for w in words[b, max(0, t - CONTEXT_WORDS):t].tolist()]
            tokens.append({
                "document": batch.keys[b][0], "part": batch.keys[b][1], "position": t,
                "word": vocabulary.words[int(words[b, t])], "context": " ".join(context), "group": group,
                "word_gold_nll": float(part.terms["word_gold"][b, t]), "rnnlm_nll": float(part.terms["rnnlm"][b, t]),
                "difference": float(difference[b, t]),
            })
    tokens.sort(key=lambda entry: entry["difference"])
    seen = type_count.nonzero().flatten().tolist()
    types = [{"word": vocabulary.words[w], "count": int(type_count[w]), "difference": float(type_sum[w]),
              "mean_difference": float(type_sum[w] / type_count[w])} for w in seen]
    types.sort(key=lambda entry: entry["difference"])
    return {"tokens": {"entitynlm_wins": tokens[:top], "entitynlm_loses": tokens[::-1][:top]},
            "word_types": {"entitynlm_wins": types[:top], "entitynlm_loses": types[::-1][:top]}}


def summarise(diagnostics: list[BatchDiagnostics], vocabulary: Vocabulary, top: int = 10) -> dict:
    """The figures of the tables and the JSON: per group, per document, the marginal, the largest differences."""
    sums, counts = group_figures(diagnostics)
    rows = document_rows(diagnostics)
    tokens = counts["all"]
    log_marginal = sum(row["log_marginal"] for row in rows)
    remainder = sum(row["remainder"] for row in rows)
    groups = {}
    for group in GROUPS:
        nats = {name: per_token(sums[group][name], counts[group]) for name in TERMS}
        nats["word_gold_minus_rnnlm"] = None if nats["rnnlm"] is None or nats["word_gold"] is None \
            else nats["word_gold"] - nats["rnnlm"]
        nats["marginal"] = per_token(-log_marginal, tokens) if group == "all" else None
        totals = {name: sums[group][name] for name in TERMS}
        groups[group] = {
            "label": GROUP_LABELS[group], "tokens": counts[group], "nats": totals, "nats_per_token": nats,
            "perplexity": {name: perplexity(value) for name, value in nats.items() if name != "word_gold_minus_rnnlm"},
        }
    below = [row["document"] for row in rows if row["marginal_below_gold"]]
    marginal = {
        "log_likelihood": log_marginal, "nats_per_token": per_token(-log_marginal, tokens),
        "perplexity": perplexity(per_token(-log_marginal, tokens)),
        "remainder": remainder, "remainder_per_token": per_token(remainder, tokens),
        "mean_ess": sum(row["ess"] for row in rows) / len(rows) if rows else None,
        "noise_gap_per_document": sum(row["noise_gap"] for row in rows) / len(rows) if rows else None,
        "documents_below_gold_joint": below,
    }
    return {"tokens": tokens, "documents": len(rows), "groups": groups, "marginal": marginal,
            "per_document": rows, "largest_differences": largest_differences(diagnostics, vocabulary, top)}


def finite(value):
    """``value`` with every non-finite float replaced by None, so that the JSON is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


# ---- the whole diagnosis ---------------------------------------------------------------------------------------


def diagnose(config: DiagnosticsConfig) -> dict:
    """The per-token terms of a corpus split summed by group, the posterior decomposition, each document's sums
    and the largest differences: the result ``python -m inference.diagnostics`` prints and writes as JSON."""
    set_seed(config.seed)
    device = resolve_device(config.device)
    path, checkpoint = entitynlm_checkpoint(config.checkpoint)
    baseline_file = baseline_path(config)
    rnnlm = None
    if baseline_file is not None:
        baseline = Checkpoint.load(baseline_file)
        if baseline.kind != "rnnlm":
            raise CheckpointError(f"{baseline_file}: the baseline must be an rnnlm checkpoint, this one is "
                                  f"{baseline.kind}")
        checkpoint.require_vocabulary(baseline.vocabulary, f"baseline {baseline_file}")
        rnnlm = language_model(baseline, device)
    model, proposal = entitynlm_modules(checkpoint, device, proposal=config.proposal)
    documents = prepared_documents(config.corpus, config.split, config.data_dir, checkpoint.preprocess,
                                   checkpoint.vocabulary, quiet=True)[:config.documents]
    batches = [b.to(device) for b in batches_by_length(documents, checkpoint.vocabulary,
                                                         max(1, config.batch_tokens // config.particles))]
    eos = checkpoint.vocabulary.index(EOS)
    started = time.perf_counter()
    diagnostics = [diagnose_batch(batch, model, proposal, rnnlm, config.particles, eos, config.batch_tokens)
                   for batch in progress(batches, desc="diagnostics: sampling and rescoring", unit="batch")]
    result = {
        "corpus": config.corpus, "split": config.split, "checkpoint": str(path), "proposal": proposal.context,
        "baseline": None if baseline_file is None else str(baseline_file), "device": str(device),
        "particles": config.particles, "seed": config.seed,
        **summarise(diagnostics, checkpoint.vocabulary, config.top),
        "seconds": time.perf_counter() - started,
        "notes": [
            "nats are negative log-probabilities (per token unless named otherwise); perplexity = exp(nats/token)",
            "the particles are rescored with redrawn new-entity noise (eq. 7): their rescored log p(x, z) differs "
            "from the sampler's by noise_gap (weighted mean, nats per document)",
            "remainder = log p_hat(x) - E_w[log p(x, z)]: an estimate of the posterior entropy H[p(z | x)]",
        ],
    }
    return finite(result)


def cell(value: float | None, width: int, spec: str = ".3f") -> str:
    return f"{'-' if value is None else format(value, spec):>{width}}"


def table(result: dict, key: str, columns: Sequence[tuple[str, str]]) -> list[str]:
    widths = [max(len(header), 8) for header, _ in columns]
    lines = [f"{'group':<20} {'tokens':>7} " + " ".join(f"{h:>{w}}" for (h, _), w in zip(columns, widths))]
    for group in GROUPS:
        figures = result["groups"][group]
        lines.append(f"{figures['label']:<20} {figures['tokens']:>7} "
                     + " ".join(cell(figures[key].get(name), w, ".3f" if key == "nats_per_token" else ".2f")
                                for (_, name), w in zip(columns, widths)))
    return lines


def format_result(result: dict) -> str:
    """The result as the command prints it: the tables by group, the decomposition, the largest differences."""
    marginal, groups = result["marginal"], result["groups"]
    lines = [f"{result['corpus']}/{result['split']}: {result['documents']} documents, {result['tokens']} tokens; "
             f"{result['particles']} particles ({result['proposal']} proposal), mean ESS "
             f"{cell(marginal['mean_ess'], 0, '.1f')}, {result['seconds']:.1f} s", "",
             "nats per token (negative log-probability; lower is better)"]
    lines += table(result, "nats_per_token", COLUMNS)
    lines += ["", "perplexity = exp(nats per token)"]
    lines += table(result, "perplexity", [column for column in COLUMNS if column[1] != "word_gold_minus_rnnlm"])
    lines += [
        "",
        "RNNLM: -log p_RNN(x_t | x_<t). word|gold: -log p(x_t | gold z, x_<t). Delta = word|gold - RNNLM (< 0: "
        "EntityNLM wins).",
        "latent|gold: -log p(R_t, E_t, L_t | ...) of the gold structure; joint|gold = word|gold + latent|gold.",
        "marginal: -log p_hat(x) (importance sampling), all tokens only. E_w word, E_w latent: the same terms of "
        "the sampled",
        "structures, averaged with the self-normalised importance weights.",
        "",
        f"remainder log p_hat(x) - E_w[log p(x, z)] (posterior entropy estimate): "
        f"{cell(marginal['remainder_per_token'], 0)} nats/token; marginal = E_w word + E_w latent - remainder",
        f"new-entity noise (eq. 7) redrawn when rescoring the particles: E_w |change of log p(x, z)| = "
        f"{cell(marginal['noise_gap_per_document'], 0, '.4f')} nats per document",
    ]
    below = marginal["documents_below_gold_joint"]
    lines.append(f"log p_hat(x) < log p(x, gold z) in {len(below)} of {result['documents']} documents"
                 + (": p(x) >= p(x, gold z), so there the estimate is too low (more particles or a better "
                    "proposal), not the model too weak" if below else ""))
    everything = groups["all"]["nats_per_token"]
    if everything["rnnlm"] is not None:
        verdicts = [f"{groups[g]['label']} {cell(groups[g]['nats_per_token']['word_gold_minus_rnnlm'], 0, '+.3f')}"
                    for g in GROUPS[1:] if groups[g]["tokens"]]
        lines.append("word|gold - RNNLM, nats/token: " + ", ".join(verdicts))
        lines.append(f"perplexities on all tokens: RNNLM {cell(groups['all']['perplexity']['rnnlm'], 0, '.2f')}, "
                     f"EntityNLM word|gold {cell(groups['all']['perplexity']['word_gold'], 0, '.2f')}, "
                     f"joint|gold {cell(groups['all']['perplexity']['joint_gold'], 0, '.2f')}, "
                     f"marginal {cell(marginal['perplexity'], 0, '.2f')}")
    else:
        lines.append(f"perplexities on all tokens: EntityNLM word|gold "
                     f"{cell(groups['all']['perplexity']['word_gold'], 0, '.2f')}, joint|gold "
                     f"{cell(groups['all']['perplexity']['joint_gold'], 0, '.2f')}, marginal "
                     f"{cell(marginal['perplexity'], 0, '.2f')} (no RNNLM baseline)")
    lines += differences_lines(result["largest_differences"])
    return "\n".join(lines)


def differences_lines(differences: dict) -> list[str]:
    """The lists of tokens and word types where word|gold - RNNLM is most negative and most positive."""
    if not differences:
        return []
    lines = []
    for side, title in (("entitynlm_wins", "EntityNLM wins most"), ("entitynlm_loses", "EntityNLM loses most")):
        lines += ["", f"{title} (word|gold - RNNLM, nats), tokens:"]
        lines += [f"  {entry['difference']:+8.2f}  {entry['document'][:24]:<24} {entry['position']:>6}  "
                  f"{entry['group']:<8} ... {entry['context']} [{entry['word']}]"
                  for entry in differences["tokens"][side]]
        lines.append(f"{title}, word types (summed over their occurrences):")
        lines += [f"  {entry['difference']:+8.2f}  {entry['word']:<16} x{entry['count']:<6} "
                  f"({entry['mean_difference']:+.3f} per occurrence)" for entry in differences["word_types"][side]]
    return lines
