"""The RNNLM with a cache of the document's own words: the control for EntityNLM's copy of each entity's words.

EntityNLM with ``entity_words`` (ours) may copy a mention's word from the words its entity was mentioned by. Much
of what that gains on perplexity could be repetition alone, which an LM without entities captures with a cache
(Kuhn and De Mori 1990; Grave et al. 2017): every word seen earlier in the document is likelier again. So the
bundled RNNLM is mixed with a unigram cache of the document so far,

    p(x_t) = (1 - lambda) p_RNNLM(x_t | x_<t) + lambda n_<t(x_t) / t    (the first token: p_RNNLM alone),

n_<t(x) the times x occurred among the document's t tokens before it (sentence ends included, as the RNNLM
predicts them). lambda is chosen on each corpus's dev split from ``--lambdas``, then the test perplexity is
reported beside the plain RNNLM's. Exact: no sampling, on the main job's tokens (EntityNLM's preprocessing and
vocabulary, which the bundled RNNLM shares), and the plain RNNLM's total equals the main job's baseline.

    python benchmarks/cache_baseline.py --data-dir DATA [--corpora litbank ontogum] [--out benchmarks/results]

Prints a markdown table and writes ``cache_baseline.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.corpora.registry import resolve_data_dir
from coref.io.atomic import write_text_atomic
from generative.baselines.rnnlm import RNNLM
from generative.layers.batch import batches_by_length
from generative.layers.document_cache import cache_shares, mixed_log_prob
from inference.checks import output_folder, real
from inference.commands.cli import Parser, run_main
from inference.data import prepared_documents
from inference.training.checkpoint import Checkpoint, language_model, pretrained

LAMBDAS = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
BATCH_TOKENS = 20_000


def split_terms(corpus: str, split: str, data_dir: Path, entitynlm: Checkpoint, rnnlm: RNNLM
                ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Per batch of the split: the RNNLM's log p(x_t | x_<t), the cache's share, and the mask, of every token."""
    documents = prepared_documents(corpus, split, str(data_dir), entitynlm.preprocess, entitynlm.vocabulary,
                                   quiet=True)
    terms = []
    with torch.no_grad():
        for batch in batches_by_length(documents, entitynlm.vocabulary, BATCH_TOKENS):
            terms.append((rnnlm.token_log_probs(batch).to(torch.float64), cache_shares(batch.words).to(torch.float64),
                          batch.mask.bool()))
    return terms


def nats_per_token(terms: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], weight: float) -> float:
    """Mean -log p(x_t) over the tokens of the RNNLM mixed with the cache at ``weight`` (lambda; the first token
    of a document, which has no cache, by the RNNLM alone)."""
    total, tokens = 0.0, 0
    for log_rnnlm, shares, mask in terms:
        started = torch.arange(shares.shape[1]) > 0
        total -= float(mixed_log_prob(log_rnnlm, shares, started, weight)[mask].sum())
        tokens += int(mask.sum())
    return total / tokens


def run(args: argparse.Namespace) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    entitynlm = Checkpoint.load(pretrained("entitynlm.pt"))
    rnnlm = language_model(Checkpoint.load(pretrained("rnnlm.pt")))  # loaded once, for every corpus and split
    results = {}
    for corpus in args.corpora:
        dev, test = (split_terms(corpus, split, data_dir, entitynlm, rnnlm) for split in ("dev", "test"))
        by_lambda = {str(weight): math.exp(nats_per_token(dev, weight)) for weight in args.lambdas}
        chosen = min(args.lambdas, key=lambda weight: by_lambda[str(weight)])
        plain, cached = math.exp(nats_per_token(test, 0.0)), math.exp(nats_per_token(test, chosen))
        results[corpus] = {"dev_perplexity_by_lambda": by_lambda, "lambda": chosen, "rnnlm": plain,
                           "rnnlm_with_cache": cached, "ratio": cached / plain,
                           "tokens": sum(int(mask.sum()) for _, _, mask in test)}
    print("| corpus (test) | tokens | RNNLM | lambda (dev) | RNNLM + cache | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for corpus, row in results.items():
        print(f"| {corpus} | {row['tokens']:,} | {row['rnnlm']:.2f} | {row['lambda']:g} "
              f"| {row['rnnlm_with_cache']:.2f} | {row['ratio']:.3f} |")
    report = {**command_record(build_parser(), args), "results": results}
    write_text_atomic(Path(args.out) / "cache_baseline.json", json.dumps(report, indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/cache_baseline.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding litbank/ and ontogum/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--corpora", nargs="+", choices=("litbank", "ontogum"), default=["litbank", "ontogum"],
                        help="the corpora measured, each on its dev (lambda) and test split")
    parser.add_argument("--lambdas", nargs="+", type=real(0, 1), default=list(LAMBDAS),
                        help="the cache weights tried on dev")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results", help="folder of cache_baseline.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
