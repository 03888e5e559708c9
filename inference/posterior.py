"""Posterior samples of the coreference structure p(R, E, L | X) of a text under EntityNLM, by importance
resampling (SIR) or sequential Monte Carlo (SMC, resampling at sentence ends); see :mod:`inference.smc`.

    python -m inference.posterior --text "Anna met Tom. She gave him a book." --out posterior/
    python -m inference.posterior --conll story.conll --method sir --samples 50 --out posterior/
    python -m inference.posterior --evaluate --corpus litbank --split test --data-dir DATA --method both

With ``--text`` or ``--conll`` it writes to ``--out``: ``samples.conll`` (``--samples`` structures drawn from the
posterior, one CoNLL document each, id ``DOC#sampleK``), ``map.conll`` (per document the sampled structure
with the highest joint probability), ``marginals.json`` (every span some particle makes a mention, with its
posterior probability of being a mention, and the posterior probability that two spans corefer) and
``heatmap-DOC.png``, ``summary.json`` (log p(x) estimate, ESS). Mentions are never given: R, E and L are all
latent, so the text is read the way the model reads it (the checkpoint's preprocessing), and the structures
are mapped back onto the original tokens. ``--evaluate`` instead scores the MAP structure as a standalone
resolver against a corpus split's gold (CoNLL F1; singletons dropped, as the gold has none) and compares the
ESS of SIR and SMC at the same number of particles.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from coref.atomic import atomic_path, write_text_atomic
from coref.conll import format_conll, read_conll
from coref.document import Document, Mention, bracketed
from coref.metrics import evaluate
from coref.preprocess import EOS, Vocabulary, drop_singletons, kept_tokens, preprocess_document
from generative.batch import batches_by_length
from generative.entitynlm import PROPOSAL_CONTEXTS, EntityNLM, EntityProposal
from inference.checkpoint import Checkpoint, entitynlm_checkpoint, entitynlm_modules
from inference.common import USER_ERRORS, prepared_documents, resolve_device, set_seed
from inference.smc import ParticleStructures, sample_structures, stream_to_document

METHODS = {"sir": "never", "smc": "sentence"}
TOKEN = re.compile(r"\w+(?:['’.-]\w+)*|[^\w\s]")
SENTENCE_END = {".", "!", "?"}


def tokenize(text: str, id: str = "text") -> Document:
    """A plain text as a Document: words and punctuation marks as tokens, sentences ending at . ! or ?"""
    tokens = TOKEN.findall(text)
    if not tokens:
        raise ValueError("--text: the text has no words")
    ends = [i + 1 for i, token in enumerate(tokens) if token in SENTENCE_END]
    if not ends or ends[-1] != len(tokens):
        ends.append(len(tokens))
    return Document(id, tokens, zip([0, *ends[:-1]], ends))


@dataclass(frozen=True)
class Posterior:
    """The weighted particles of one document: each particle's structure as a Document, and its weight."""

    document: Document
    structures: list[Document]
    weights: np.ndarray
    log_joint: np.ndarray
    log_marginal: float
    ess: float
    stage_ess: float
    resamplings: int

    @property
    def map_structure(self) -> Document:
        """The sampled structure with the highest joint probability p(X, R, E, L)."""
        return self.structures[int(np.argmax(self.log_joint))]


def posteriors(
    model: EntityNLM,
    proposal: EntityProposal,
    documents: Sequence[Document],
    vocabulary: Vocabulary,
    particles: int,
    method: str,
    batch_tokens: int = 20_000,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> list[Posterior]:
    """SIR or SMC posteriors of preprocessed ``documents`` (same order), structures on the same tokens."""
    by_key = {}
    batches = batches_by_length(documents, vocabulary, max(1, batch_tokens // particles))
    for batch in tqdm(batches, desc=f"{method}, {particles} particles", unit="batch", disable=not progress):
        batch = batch.to(device)
        sampled = sample_structures(model, proposal, batch, particles, vocabulary.index(EOS), METHODS[method])
        for index, key in enumerate(batch.keys):
            by_key[key] = (sampled, index, int(batch.lengths[index]))
    return [_posterior(document, *by_key[document.key]) for document in documents]


def _posterior(document: Document, sampled: ParticleStructures, index: int, length: int) -> Posterior:
    structures = [
        stream_to_document(document, sampled.annotation(particle, index, length))
        for particle in range(sampled.particles)
    ]
    return Posterior(
        document=document,
        structures=structures,
        weights=sampled.normalized_weights()[:, index].double().cpu().numpy(),
        log_joint=sampled.log_joint[:, index].double().cpu().numpy(),
        log_marginal=float(sampled.log_marginal[index]),
        ess=float(sampled.ess[index]),
        stage_ess=float(sampled.stage_ess[index]),
        resamplings=int(sampled.resamplings[index]),
    )


def without_singletons(document: Document) -> Document:
    return document.replace(mentions=drop_singletons(document.mentions))


# ---- pairwise coreference marginals ------------------------------------------------------------------------


@dataclass(frozen=True)
class CoreferenceMarginals:
    """Posterior probabilities over the spans some particle makes a mention: ``mention[a]`` that span a is a
    mention, ``coreference[a, b]`` that spans a and b are mentions of one entity (the diagonal is ``mention``)."""

    spans: list[tuple[int, int]]
    texts: list[str]
    mention: np.ndarray
    coreference: np.ndarray

    def to_json(self) -> dict:
        return {
            "spans": [{"start": s, "end": e, "text": text, "mention_probability": round(float(p), 6)}
                      for (s, e), text, p in zip(self.spans, self.texts, self.mention)],
            "coreference": np.round(self.coreference, 6).tolist(),
        }


def coreference_marginals(structures: Sequence[Document], weights: np.ndarray,
                          min_probability: float = 0.0) -> CoreferenceMarginals:
    """Weighted pairwise coreference marginals of ``structures`` (annotations of one text), over the spans whose
    mention probability is at least ``min_probability``."""
    spans = sorted({mention.span for structure in structures for mention in structure.mentions})
    column = {span: a for a, span in enumerate(spans)}
    entity = np.full((len(structures), len(spans)), -1)  # (particles, spans): the span's entity, -1 if none
    for p, structure in enumerate(structures):
        for mention in structure.mentions:
            entity[p, column[mention.span]] = mention.entity
    mention = weights @ (entity >= 0)
    keep = np.flatnonzero(mention >= min_probability)
    entity = entity[:, keep]
    same = (entity[:, :, None] == entity[:, None, :]) & (entity[:, :, None] >= 0)
    coreference = np.einsum("p,pab->ab", weights, same)
    text = structures[0] if structures else None
    kept_spans = [spans[a] for a in keep]
    texts = [" ".join(text.tokens[s:e]) for s, e in kept_spans] if text else []
    return CoreferenceMarginals(kept_spans, texts, mention[keep], coreference)


def plot_marginals(marginals: CoreferenceMarginals, path: str | Path, title: str) -> None:
    """A heatmap of the pairwise coreference probabilities, spans labelled by their text."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.28 * len(marginals.spans) + 2)
    figure, axes = plt.subplots(figsize=(size + 1, size))
    image = axes.imshow(marginals.coreference, vmin=0, vmax=1, cmap="viridis")
    labels = [f"{text[:24]} [{s}]" for (s, _), text in zip(marginals.spans, marginals.texts)]
    axes.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    axes.set_yticks(range(len(labels)), labels, fontsize=7)
    axes.set_title(title)
    figure.colorbar(image, ax=axes, label="P(coreferent | text)")
    figure.tight_layout()
    with atomic_path(path) as temporary:
        figure.savefig(temporary, dpi=120, format="png")
    plt.close(figure)


# ---- the command ---------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m inference.posterior", description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="a text to analyse (tokenised here)")
    source.add_argument("--conll", help="a CoNLL file of documents to analyse (its mentions are not used)")
    source.add_argument("--evaluate", action="store_true", help="score the MAP structure on --corpus/--split")
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    parser.add_argument("--method", default="smc", choices=[*METHODS, "both"],
                        help="sir: importance resampling; smc: resample at sentence ends (both: --evaluate only)")
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS,
                        help="forward (the paper's) or bidirectional (default: the checkpoint's)")
    parser.add_argument("--particles", type=int, default=100, help="particles per document")
    parser.add_argument("--samples", type=int, default=20, help="structures to draw per document")
    parser.add_argument("--ess-threshold", type=float, default=0.5, help="SMC resamples when ESS < this x particles")
    parser.add_argument("--min-probability", type=float, default=0.05,
                        help="spans below this mention probability are left out of the marginals")
    parser.add_argument("--out", default="posterior", help="output folder for --text/--conll")
    parser.add_argument("--corpus", default="sample", help="--evaluate: corpus name (default: sample)")
    parser.add_argument("--split", default="test", help="--evaluate: split")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--batch-tokens", type=int, default=20_000, help="particles x padded tokens per batch")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="--evaluate: also write the results as JSON")
    args = parser.parse_args(argv)
    if args.method == "both" and not args.evaluate:
        parser.error("--method both compares the samplers and needs --evaluate")
    if args.particles < 1 or args.samples < 1:
        parser.error("--particles and --samples must be at least 1")
    return args


def load_model(args: argparse.Namespace, device: torch.device) -> tuple[Checkpoint, EntityNLM, EntityProposal]:
    _, checkpoint = entitynlm_checkpoint(args.checkpoint)
    model, proposal = entitynlm_modules(checkpoint, device, args.proposal)
    return checkpoint, model, proposal


def input_documents(args: argparse.Namespace) -> list[Document]:
    if args.text is not None:
        try:
            args.text.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes on the command line arrive as surrogates
            raise ValueError("--text: not UTF-8 text") from None
        return [tokenize(args.text)]
    documents, problems = read_conll(args.conll)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    if not documents:
        raise ValueError(f"{args.conll}: no documents")
    return [document.replace(mentions=()) for document in documents]


def onto_original(structure: Document, original: Document, kept: list[int]) -> Document:
    """A structure on the preprocessed tokens moved onto the original tokens (``kept[i]``: original of token i)."""
    mentions = [Mention(kept[m.start], kept[m.end - 1] + 1, m.entity) for m in structure.mentions]
    return original.replace(mentions=mentions)


def analyse(args: argparse.Namespace) -> dict:
    """--text / --conll: samples, MAP structures, marginals and heatmaps under ``args.out``."""
    device = resolve_device(args.device)
    set_seed(args.seed)
    checkpoint, model, proposal = load_model(args, device)
    originals = input_documents(args)
    config = checkpoint.preprocess
    prepared = [preprocess_document(document, config, checkpoint.vocabulary)[0] for document in originals]
    results = posteriors(model, proposal, prepared, checkpoint.vocabulary, args.particles, args.method,
                         args.batch_tokens, device, progress=False)
    out = Path(args.out)
    samples, maps, marginals, summary = [], [], {}, []
    for original, posterior in zip(originals, results):
        kept = kept_tokens(original, config)
        on_original = [onto_original(s, original, kept) for s in posterior.structures]
        draws = np.random.choice(len(on_original), size=args.samples, p=posterior.weights / posterior.weights.sum())
        samples += [on_original[p].replace(id=f"{original.id}#sample{k}") for k, p in enumerate(draws)]
        maps.append(onto_original(posterior.map_structure, original, kept))
        table = coreference_marginals(on_original, posterior.weights, args.min_probability)
        marginals[original.id] = table.to_json()
        plot_marginals(table, out / f"heatmap-{_file_name(original.id)}.png", f"{original.id}: posterior coreference")
        summary.append({"document": original.id, "part": original.part, "log_marginal": posterior.log_marginal,
                        "ess": posterior.ess, "mean_sentence_end_ess": posterior.stage_ess,
                        "resamplings": posterior.resamplings, "particles": args.particles, "method": args.method})
    write_text_atomic(out / "samples.conll", format_conll(samples))
    write_text_atomic(out / "map.conll", format_conll(maps))
    write_text_atomic(out / "marginals.json", json.dumps(marginals, indent=1) + "\n")
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return {"maps": maps, "summary": summary}


def _file_name(name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", name)[:80] or "document"


def evaluate_map(args: argparse.Namespace) -> dict:
    """--evaluate: the MAP structure as a resolver (CoNLL F1 against the gold) and the samplers' ESS."""
    device = resolve_device(args.device)
    checkpoint, model, proposal = load_model(args, device)
    gold = prepared_documents(args.corpus, args.split, args.data_dir, checkpoint.preprocess, checkpoint.vocabulary,
                              quiet=True)
    tokens = sum(len(document.tokens) + len(document.sentences) for document in gold)
    result = {"corpus": args.corpus, "split": args.split, "documents": len(gold), "tokens": tokens,
              "particles": args.particles, "proposal": proposal.context, "device": str(device), "methods": {}}
    for method in METHODS if args.method == "both" else [args.method]:
        set_seed(args.seed)
        started = time.perf_counter()
        results = posteriors(model, proposal, gold, checkpoint.vocabulary, args.particles, method,
                             args.batch_tokens, device)
        seconds = time.perf_counter() - started
        response = [without_singletons(posterior.map_structure) for posterior in results]
        scores = evaluate(gold, response)
        log_marginal = sum(posterior.log_marginal for posterior in results)
        result["methods"][method] = {
            "scores": scores.to_json(), "conll_f1": scores.conll_f1,
            "perplexity": math.exp(-log_marginal / tokens),
            "ess": [posterior.ess for posterior in results],
            "mean_sentence_end_ess": [posterior.stage_ess for posterior in results],
            "resamplings": [posterior.resamplings for posterior in results],
            "mentions": sum(len(document.mentions) for document in response), "seconds": seconds,
        }
    result["gold_mentions"] = sum(len(document.mentions) for document in gold)
    return result


def format_evaluation(result: dict) -> str:
    lines = [f"{result['corpus']}/{result['split']}: {result['documents']} documents, {result['tokens']} tokens, "
             f"{result['particles']} particles, gold mentions {result['gold_mentions']}",
             f"{'method':<6} {'MUC F1':>7} {'B3 F1':>7} {'CEAFe F1':>9} {'CoNLL F1':>9} {'ment. F1':>9} "
             f"{'mentions':>9} {'final ESS':>10} {'ESS@</s>':>9} {'resampl.':>9} {'ppl':>8} {'seconds':>8}"]
    for method, row in result["methods"].items():
        scores = row["scores"]
        lines.append(
            f"{method:<6} {100 * scores['muc']['f1']:>7.2f} {100 * scores['bcub']['f1']:>7.2f} "
            f"{100 * scores['ceafe']['f1']:>9.2f} {100 * row['conll_f1']:>9.2f} "
            f"{100 * scores['mentions']['f1']:>9.2f} {row['mentions']:>9} "
            f"{np.mean(row['ess']):>10.2f} {np.mean(row['mean_sentence_end_ess']):>9.2f} "
            f"{np.mean(row['resamplings']):>9.1f} {row['perplexity']:>8.2f} {row['seconds']:>8.1f}"
        )
    return "\n".join(lines)


def format_analysis(result: dict) -> str:
    lines = []
    for document, row in zip(result["maps"], result["summary"]):
        lines.append(f"{document.id}: log p(x) ~ {row['log_marginal']:.2f}, ESS {row['ess']:.1f} of "
                     f"{row['particles']} ({row['method']}, {row['resamplings']} resamplings)")
        lines.append("  MAP: " + bracketed(document))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = evaluate_map(args) if args.evaluate else analyse(args)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.evaluate:
        print(format_evaluation(result))
        if args.json:
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    else:
        print(format_analysis(result))
        print(f"wrote samples.conll, map.conll, marginals.json, summary.json and heatmaps to {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
