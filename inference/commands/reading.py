"""Training the Coref-GRU readers (Dhingra et al. 2018) on bAbI-1K, through ``python -m inference.train``.

    python -m inference.train --model ga_cgru --task babi:3 --data-dir DATA --out runs/babi/ga_cgru/3/seed0
    python -m inference.train --model ga_cgru --task wikihop --data-dir DATA --out runs/wikihop   # a demo

``entitylm train`` hands a reader's ``--model`` to this module's parser (``python -m inference.reading``
is the same command), whose defaults are the readers' own.

The models (:mod:`generative.coref_gru`): ``ga_gru``, ``ga_cgru`` and ``ga_gru_onehot`` are the gated-attention
reader (K = 3) with GRU, C-GRU or GRU + 1-hot coreference features (its hidden size chosen so that its
parameter count matches the C-GRU model's); ``bi_gru`` and ``bi_cgru`` the one-layer readers. A task is
extractive when every training answer occurs in its story (the answer is then read off the story by
attention-sum), a classification task otherwise (a softmax over the task's answers), as the paper's Appendix B
describes. The hyper-parameters are Appendix B's: d = 64, batches of 32, Adam with learning rate 0.01 halved
after every 120 updates, dropout 0.1; the coreference chains are :mod:`coref.corpora.babi`'s.

Dev accuracy (on :mod:`coref.corpora.babi`'s dev split, the last stories of the training file) picks the epoch; the
run stops after ``--patience`` epochs without a gain or at 100% dev accuracy. ``OUT/model.pt`` holds the best
weights and, at the end, the test accuracy; ``OUT/last.pt`` the state ``--resume`` continues from; both are
written atomically after every epoch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from coref.io.atomic import write_text_atomic
from inference.checks import output_file
from inference.commands.cli import Parser, config_of, run_main
from inference.commands.options import add_data_dir, add_run_options, add_stopping, config_options
from inference.training.coref_gru import CHECKS, ReaderTraining, train_reader


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.train", description=__doc__)
    add = config_options(parser, ReaderTraining, CHECKS)
    add("model", required=True, help="the reader to train")
    parser.add_argument("--task", "--corpus", required=True,
                        help="babi:N, N in 1..20 (the 1K English set), lambada, or wikihop (the 50-question sample: "
                             "a demo)")
    add_data_dir(parser, help="folder holding babi/, lambada/, wikihop_sample/ (default: $ENTITYLM_DATA)")
    add("chains",
        help="bAbI's coreference chains: names, groups and pronouns; or also every noun, chained by "
             "its word (the paper's exact token match; see coref.corpora.babi)")
    add("out", required=True,
        help="output folder: model.pt (best weights, test accuracy), last.pt (for --resume), "
             "test.json (the test summary and every test question's correctness)")
    parser.add_argument("--json", type=output_file, help="also write OUT/test.json's summary here")
    add("embedding_size", help="word embeddings (default: Appendix B's d)")
    add("hidden_size", help="units per direction (default: Appendix B's d; a C-GRU's 2 relation slices of d/2)")
    add("dropout", help="at each layer's output (default: Appendix B's)")
    add("lr", help="Adam's learning rate (default: Appendix B's)")
    add("halve_every",
        help="halve the learning rate after this many updates (epochs for lambada; default: "
             "Appendix B's)")
    add("batch_size", help="questions per update (default: Appendix B's)")
    add_stopping(add, "stop after this many epochs without a dev gain (the paper does not say)")
    add_run_options(parser, "random seed (initialisation, shuffling, dropout)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> ReaderTraining:
    """The command line as a run's options, Appendix B's settings where it leaves them unset."""
    return config_of(ReaderTraining, build_parser().parse_args(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Train the reader; print the summary as JSON, and with ``--json`` write it with the test report."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        summary, report = train_reader(config_of(ReaderTraining, args))
        if args.json:
            write_text_atomic(args.json, json.dumps({**summary, **report}) + "\n")
        print(json.dumps(summary, indent=2))
        return 0

    return run_main(body)
