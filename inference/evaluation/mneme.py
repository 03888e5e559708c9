"""Language-modelling and generation metrics of MNEMELM story LMs (Papalampidi et al. 2022: §4.2, §5.1-5.2,
Table 1, Table 2, Figures 3 and 4): :func:`evaluate_story_models` of a :class:`StoryEvaluationConfig`, whose
command is :mod:`inference.commands.mneme_eval` (``python -m inference.mneme_eval``; the options named below are
its own, each a field of the config).

**Language modelling** (the key ``language_modelling``; ``--skip-lm`` leaves it out). Each checkpoint
(``python -m inference.train --model vanilla|s_mneme|d_mneme|...``) reads the split's stories, cut as in training
(``--max-tokens``), once per T-XL cache size: 500 is the paper's full context, 100, 50 and 10 simulate narratives
longer than the context (§4.1), the segment length staying the model's. Over the story tokens (the prompt
excluded, ``<eos>`` included), per model and cache size:

- ``perplexity``; ``entity_nll``, -log p_e: the mean NLL of the tokens inside a mention of a prompt entity
  (§4.2); ``other_nll``, -log p_r: of the other tokens; the numbers of stories, tokens and mention tokens;
- ``section_entity_nll``: each story's text cut into ``--sections`` equal sections (L = 10, App. A.2) and the
  mean NLL of the mention tokens of each section, pooled over stories (Figure 4, upper part); per model,
  ``section_degradation``: its percentage increase from the largest cache size to each smaller one (Figure 4,
  lower part: 500 -> 100);
- with a ``vanilla`` checkpoint among them, ``relative_improvement`` of every other model over it per cache
  size, 100 (vanilla - model) / vanilla, of perplexity, -log p_e and -log p_r (Figure 3).

**Generation** (the key ``generation``, with ``--samples N``; Table 2): every model draws N stories from the
prompt of each prompted story of the split (``--prompts``: fewer, evenly spread), each as long as its human
story; the human and generated stories are annotated alike and measured (:mod:`inference.evaluation.entity_usage`):
entities, mentions per entity, exact and subset prompt matches, coherence C, consistency V and U, each with its
spread over the N sample sets; ``coherence_gap_closed``: the share of vanilla's gap to human C each other model
closes.

All checkpoints must share one vocabulary: perplexities over other words are not comparable. Other keys of
``--out`` are kept; an earlier entry with the same settings keeps its other models, so checkpoints can be
evaluated as they finish. ``--plots`` gets ``mneme_figure3.png`` (with a vanilla checkpoint) and
``mneme_figure4.png``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from coref.corpora.stories import PromptedStory
from coref.io.atomic import atomic_path
from coref.io.progress import progress
from generative.mneme import MnemeBatch, MnemeLM, parameter_count
from inference.evaluation.entity_usage import HUMAN, Annotator, draw_stories, gap_closed, summary
from inference.runtime import resolve_device
from inference.training.mneme import (
    StoryLMCheckpoint,
    corpus_parts,
    encode_story,
    load_split,
    load_story_lm,
    story_batches,
)

KEY = "language_modelling"  # this command's parts of the results file
GENERATION = "generation"
BASELINE = "vanilla"
LIMITED_CACHE = 100  # Figure 4 compares the full cache with this one (when it is among --cache-sizes)
SCORES = ("perplexity", "entity_nll", "other_nll")


@dataclass(frozen=True)
class StoryEvaluationConfig:
    """The options of ``python -m inference.mneme_eval``: the story LM ``checkpoints`` (one vocabulary, one per
    model), the stories (``corpus``, ``split``, cut at ``max_tokens``), the language-modelling metrics at each of
    ``cache_sizes`` with ``sections`` per story (unless ``skip_lm``), ``samples`` stories per prompt for the
    generation metrics (0: none) from ``prompts`` prompted stories (None: all), drawn with ``top_p`` and
    ``temperature`` from ``seed``, ``generation_batch`` at a time, annotated by the ``detector``, ``resolver`` and
    ``pos_model`` (None: the bundled ones). ``out`` is the results file whose earlier entries are merged."""

    checkpoints: Sequence[str]
    corpus: str = "litbank+ontogum+inscript"
    split: str = "test"
    data_dir: str | None = None
    max_tokens: int = 1000
    cache_sizes: Sequence[int] = (500, 100, 50, 10)
    sections: int = 10
    batch_tokens: int = 4_000
    out: str | None = None
    skip_lm: bool = False
    samples: int = 0
    prompts: int | None = None
    top_p: float = 0.8
    temperature: float = 1.0
    seed: int = 0
    generation_batch: int = 32
    detector: str | None = None
    resolver: str | None = None
    pos_model: str | None = None
    device: str = "auto"


class Tally:
    """Sums of NLL and token counts over stories: all tokens, mention tokens, and mention tokens per section."""

    def __init__(self, sections: int) -> None:
        self.sections = sections
        self.stories = 0
        self.nll = torch.zeros(2, dtype=torch.float64)  # [other tokens, mention tokens]
        self.tokens = torch.zeros(2, dtype=torch.float64)
        self.section_nll = torch.zeros(sections, dtype=torch.float64)
        self.section_tokens = torch.zeros(sections, dtype=torch.float64)

    def add(self, nll: torch.Tensor, batch: MnemeBatch) -> None:
        """Add a batch's per-token NLL (B, T). Story token i of a text of m tokens (``<eos>`` not counted) is in
        section floor(i L / m)."""
        nll, real, mention = nll.double().cpu(), batch.story_mask.cpu(), batch.mention_mask.cpu()
        kind = mention.long()
        self.nll.index_add_(0, kind[real], nll[real])
        self.tokens.index_add_(0, kind[real], torch.ones_like(nll[real]))
        text = (batch.story_lengths - 1)[:, None].cpu()
        positions = torch.arange(nll.shape[1])[None, :]
        section = positions * self.sections // text
        counted = mention & (positions < text)
        self.section_nll.index_add_(0, section[counted], nll[counted])
        self.section_tokens.index_add_(0, section[counted], torch.ones_like(nll[counted]))
        self.stories += batch.size

    def metrics(self) -> dict[str, Any]:
        tokens = float(self.tokens.sum())
        return {"perplexity": math.exp(float(self.nll.sum()) / tokens), "nll": float(self.nll.sum()) / tokens,
                "entity_nll": _mean(self.nll[1], self.tokens[1]), "other_nll": _mean(self.nll[0], self.tokens[0]),
                "stories": self.stories, "tokens": int(tokens), "mention_tokens": int(self.tokens[1]),
                "section_entity_nll": [_mean(n, t) for n, t in zip(self.section_nll, self.section_tokens)],
                "section_mention_tokens": [int(t) for t in self.section_tokens]}


def _mean(total: torch.Tensor, count: torch.Tensor) -> float | None:
    """A mean, None over no tokens (JSON has no NaN)."""
    return float(total / count) if count else None


def _change(before: float | None, after: float | None) -> float | None:
    """The percentage by which ``after`` exceeds ``before``."""
    return None if before is None or after is None else 100.0 * (after - before) / before


def evaluate_model(model: MnemeLM, batches: Sequence[MnemeBatch], cache_sizes: Sequence[int], sections: int,
                   device: torch.device, name: str) -> dict[str, dict[str, Any]]:
    """The metrics of ``model`` at each cache size, keyed by the size as text (JSON keys)."""
    results = {}
    with torch.no_grad():
        for cache in cache_sizes:
            tally = Tally(sections)
            for batch in progress(batches, desc=f"{name}, cache {cache}", unit="batch"):
                tally.add(-model.token_log_probs(batch.to(device), cache_size=cache), batch)
            results[str(cache)] = tally.metrics()
    return results


def section_degradation(per_cache: dict[str, dict[str, Any]], cache_sizes: Sequence[int]) -> dict[str, list]:
    """Per smaller cache size, the percentage increase of each section's entity NLL over the largest cache's."""
    full = per_cache[str(max(cache_sizes))]["section_entity_nll"]
    return {str(cache): [_change(before, after) for before, after in
                         zip(full, per_cache[str(cache)]["section_entity_nll"])]
            for cache in cache_sizes if cache < max(cache_sizes)}


def relative_improvement(models: dict[str, Any], cache_sizes: Sequence[int]) -> dict[str, Any]:
    """Figure 3: per model other than vanilla and cache size, 100 (vanilla - model) / vanilla of each score."""
    if BASELINE not in models:
        return {}
    base = models[BASELINE]["cache"]
    return {name: {str(cache): {score: _gain(base[str(cache)][score], entry["cache"][str(cache)][score])
                                for score in SCORES}
                   for cache in cache_sizes}
            for name, entry in models.items() if name != BASELINE}


def _gain(base: float | None, value: float | None) -> float | None:
    """The percentage by which ``value`` is below ``base``."""
    return None if base is None or value is None else 100.0 * (base - value) / base


def read_results(path: str | None) -> dict[str, Any]:
    """The results file to merge into (empty when there is none), refused if it is not a JSON object."""
    if path is None or not Path(path).exists():
        return {}
    try:
        results = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a JSON results file ({error})") from None
    if not isinstance(results, dict):
        raise ValueError(f"{path}: not a JSON results file (not an object)")
    return results


def load_checkpoints(paths: Sequence[str], device: torch.device) -> dict[str, tuple[MnemeLM, StoryLMCheckpoint, str]]:
    """Each checkpoint's model by its preset name; one vocabulary for all, one checkpoint per preset."""
    loaded: dict[str, tuple[MnemeLM, StoryLMCheckpoint, str]] = {}
    for path in paths:
        model, checkpoint = load_story_lm(path, device)
        if loaded:
            _, first, first_path = next(iter(loaded.values()))
            first.vocabulary.require_same(checkpoint.vocabulary, path, first_path)
        if checkpoint.model in loaded:
            raise ValueError(f"{path}: a second {checkpoint.model} checkpoint (after {loaded[checkpoint.model][2]}); "
                             "results are kept per model")
        loaded[checkpoint.model] = (model, checkpoint, path)
    return loaded


def evaluate_story_models(config: StoryEvaluationConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Evaluate every checkpoint: this run's entries (``language_modelling`` unless ``skip_lm``, ``generation``
    with ``samples``), each merged with the earlier entry of the same settings in the results file ``out``, and
    the results file's content with them (what ``python -m inference.mneme_eval --out`` writes)."""
    corpus_parts(config.corpus)
    if config.skip_lm and not config.samples:
        raise ValueError("--skip-lm leaves nothing to do without --samples")
    annotator = Annotator.load(config.detector, config.resolver, config.pos_model) if config.samples else None
    results = read_results(config.out)
    device = resolve_device(config.device)
    loaded = load_checkpoints(config.checkpoints, device)
    stories = load_split(config.corpus, config.split, config.data_dir, config.max_tokens)
    entries = {}
    if not config.skip_lm:
        entries[KEY] = language_modelling(config, loaded, stories, results.get(KEY, {}), device)
    if config.samples:
        entries[GENERATION] = generation(config, loaded, stories, annotator, results.get(GENERATION, {}), device)
    return entries, {**results, **entries}


def language_modelling(config: StoryEvaluationConfig, loaded: dict[str, tuple[MnemeLM, StoryLMCheckpoint, str]],
                       stories: Sequence[PromptedStory], earlier: dict[str, Any], device: torch.device
                       ) -> dict[str, Any]:
    """The ``language_modelling`` entry: every model at every cache size, merged into ``earlier`` when that was
    made with the same settings."""
    vocabulary = next(iter(loaded.values()))[1].vocabulary
    batches = story_batches([encode_story(story, vocabulary) for story in stories], config.batch_tokens)
    cache_sizes = sorted(set(config.cache_sizes), reverse=True)
    settings = {"corpus": config.corpus, "split": config.split, "max_tokens": config.max_tokens,
                "sections": config.sections, "cache_sizes": cache_sizes, "vocabulary": vocabulary.fingerprint}
    models = dict(earlier.get("models", {})) if earlier.get("settings") == settings else {}
    for name, (model, checkpoint, path) in loaded.items():
        per_cache = evaluate_model(model, batches, cache_sizes, config.sections, device, name)
        models[name] = {"checkpoint": path, "parameters": parameter_count(model),
                        "trained_epochs": checkpoint.training.get("state", {}).get("epoch"),
                        "cache": per_cache, "section_degradation": section_degradation(per_cache, cache_sizes)}
    return {"settings": settings, "models": models, "relative_improvement": relative_improvement(models, cache_sizes)}


def prompts_of(stories: Sequence[PromptedStory], count: int | None) -> list[PromptedStory]:
    """The stories with a prompt, or ``count`` of them evenly spread over the split (every corpus in turn)."""
    prompted = [story for story in stories if story.entities]
    if count is None or count >= len(prompted):
        return prompted
    return [prompted[index * len(prompted) // count] for index in range(count)]


def generation(config: StoryEvaluationConfig, loaded: dict[str, tuple[MnemeLM, StoryLMCheckpoint, str]],
               stories: Sequence[PromptedStory], annotator: Annotator, earlier: dict[str, Any],
               device: torch.device) -> dict[str, Any]:
    """The ``generation`` entry (Table 2): the human stories and every model's samples, annotated alike; merged
    into ``earlier`` when that was made with the same settings."""
    chosen = prompts_of(stories, config.prompts)
    if not chosen:
        raise ValueError(f"{config.corpus} {config.split}: no story has prompt entities to generate from")
    settings = {"corpus": config.corpus, "split": config.split, "max_tokens": config.max_tokens,
                "stories": len(chosen), "samples": config.samples, "top_p": config.top_p,
                "temperature": config.temperature, "seed": config.seed,
                "annotator": {"detector": config.detector, "resolver": config.resolver,
                              "pos_model": config.pos_model},
                "length": "each sample as long as its human story, <eos> never drawn"}
    rows = dict(earlier.get("rows", {})) if earlier.get("settings") == settings else {}
    rows[HUMAN] = summary([annotator.measure([story.tokens for story in chosen], chosen)])
    for name, (model, checkpoint, path) in loaded.items():
        generator = torch.Generator(device=device).manual_seed(config.seed)
        drawn = draw_stories(model, checkpoint.vocabulary, chosen, config.samples, generator, config.top_p,
                             config.temperature, config.generation_batch, desc=f"{name}, sampling")
        rows[name] = {**summary([annotator.measure(texts, chosen) for texts in drawn]), "checkpoint": path}
    return {"settings": settings, "rows": rows, "coherence_gap_closed": gap_closed(rows)}


def format_table(entry: dict[str, Any]) -> str:
    """One row per model and cache size: PPL, -log p_e, -log p_r and the relative PPL gain over vanilla."""
    lines = [f"{'model':<16}{'cache':>6}{'PPL':>10}{'-log p_e':>10}{'-log p_r':>10}{'PPL gain %':>12}"]
    for name, model in entry["models"].items():
        for cache, scores in model["cache"].items():
            gain = entry["relative_improvement"].get(name, {}).get(cache, {}).get("perplexity")
            cells = [scores["perplexity"], scores["entity_nll"], scores["other_nll"]]
            lines.append(f"{name:<16}{cache:>6}" + "".join(f"{_text(cell, 2):>10}" for cell in cells)
                         + f"{_text(gain, 2):>12}")
    return "\n".join(lines)


def format_usage_table(entry: dict[str, Any]) -> str:
    """Table 2: one row per model (and the human stories) with the means of the entity metrics."""
    columns = (("entities", "entities"), ("mentions", "ment/ent"), ("exact", "exact"), ("subset", "subset"),
               ("coherence", "C"), ("consistency", "V"), ("normalised_consistency_of_means", "U"))
    lines = [f"{'stories':<16}{'n':>6}" + "".join(f"{label:>10}" for _, label in columns)]
    for name, row in entry["rows"].items():
        lines.append(f"{name:<16}{row['stories']:>6}" + "".join(f"{_text(row[key], 2):>10}" for key, _ in columns))
    return "\n".join(lines)


def _text(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def plot(entry: dict[str, Any], folder: Path) -> list[Path]:
    """Figure 3 (relative improvement over vanilla per cache size: perplexity, -log p_e) when there is a
    vanilla model, and Figure 4 (per-section entity NLL at the full cache; its percentage degradation at the
    limited cache, :data:`LIMITED_CACHE` or else the smallest)."""
    from matplotlib.figure import Figure

    cache_sizes = entry["settings"]["cache_sizes"]
    written = []
    if entry["relative_improvement"]:
        chart = Figure(figsize=(9, 3.5))
        for axes, score, label in zip(chart.subplots(1, 2), ("perplexity", "entity_nll"), ("perplexity", "-log p_e")):
            for name, gains in entry["relative_improvement"].items():
                axes.plot([str(c) for c in cache_sizes], [_number(gains[str(c)][score]) for c in cache_sizes],
                          marker="o", label=name)
            axes.axhline(0.0, color="black", linewidth=0.8)
            axes.set_xlabel("T-XL memory (tokens)")
            axes.set_ylabel(f"relative improvement of {label} over vanilla (%)", fontsize=8)
            axes.legend(fontsize=7)
        written.append(_save(chart, folder / "mneme_figure3.png"))
    full = str(max(cache_sizes))
    smaller = [c for c in cache_sizes if c < max(cache_sizes)]
    limited = str(LIMITED_CACHE if LIMITED_CACHE in smaller else min(smaller)) if smaller else None
    chart = Figure(figsize=(6, 6 if limited else 3.5))
    panels = chart.subplots(2 if limited else 1, 1, squeeze=False)[:, 0]
    sections = range(1, entry["settings"]["sections"] + 1)
    for name, model in entry["models"].items():
        panels[0].plot(sections, [_number(v) for v in model["cache"][full]["section_entity_nll"]], marker="o",
                       label=name)
        if limited:
            panels[1].plot(sections, [_number(v) for v in model["section_degradation"][limited]], marker="o",
                           label=name)
    panels[0].set_ylabel(f"entity NLL, memory {full}")
    if limited:
        panels[1].set_ylabel(f"% degradation {full} -> {limited}")
    panels[-1].set_xlabel("narrative section")
    for axes in panels:
        axes.legend(fontsize=7)
    written.append(_save(chart, folder / "mneme_figure4.png"))
    return written


def _number(value: float | None) -> float:
    return math.nan if value is None else value


def _save(chart, path: Path) -> Path:
    chart.tight_layout()
    with atomic_path(path) as temporary:
        chart.savefig(temporary, format="png", dpi=100)
    return path
