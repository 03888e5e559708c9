"""The refine command: a trained proposal refined toward the model's posterior on text alone, by
:mod:`inference.algorithms.refine` (its docstring, below in ``--help``, says how and what is written).

    python -m inference.refine --checkpoint runs/entitynlm/model.pt --proposal bidirectional \\
        --corpus litbank+ontogum --data-dir DATA --out runs/entitynlm/refined.pt
    python -m inference.refine --checkpoint runs/entitynlm/model.pt --wake theta --supervised-weight 1 \\
        --corpus litbank --data-dir DATA --out runs/entitynlm/marginal.pt      # the model, on log p(x)
    python -m inference.refine --checkpoint runs/entitynlm/model.pt --wake theta --supervised-weight 1 \\
        --extra-text lambada-dev --corpus litbank --data-dir DATA --out runs/entitynlm/marginal-text.pt  # + raw text
    python -m inference.refine --checkpoint runs/entitynlm/model.pt --wake coref --supervised-weight 1 \\
        --corpus ontogum --data-dir DATA --out runs/entitynlm/coref.pt         # the model, on p(E | x, R, L)
    python -m inference.refine --checkpoint runs/entitynlm/model.pt --wake coref --supervised-weight 0 \\
        --coref-mentions pipeline --corpus ontogum --data-dir DATA --out runs/entitynlm/coref-pipeline.pt
    python -m inference.refine --checkpoint runs/entitynlm/model.pt --wake coref --supervised-weight 0 \\
        --coref-mentions pipeline --coref-objective local --cross-fit-detectors D0 D1 --cross-fit-resolvers R0 R1 \\
        --corpus ontogum --data-dir DATA --out runs/entitynlm/coref-cross-fit.pt
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from generative.entitynlm.copying import COPY_WEIGHTINGS
from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.algorithms import refine
from inference.algorithms.refine import (
    COREF_MENTIONS,
    COREF_OBJECTIVES,
    WAKES,
    RefineConfig,
    format_result,
    refine_proposal,
)
from inference.checks import integer, output_file, real
from inference.commands.cli import Parser, config_of, help_text, run_command
from inference.commands.options import add_corpus_split, add_data_dir, add_device_seed_json, add_extra_text


def build_parser() -> Parser:
    """The checkpoint and its proposal, the corpus, the output, the steps and their evaluation."""
    parser = Parser(prog="python -m inference.refine", description=help_text(__doc__, refine))
    parser.add_argument("--checkpoint", required=True,
                        help="EntityNLM checkpoint whose proposal (or model, --wake theta) is refined")
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS, help="which proposal (default: the checkpoint's)")
    add_corpus_split(parser, split=None)
    add_data_dir(parser)
    parser.add_argument("--out", required=True, type=output_file,
                        help="the refined checkpoint; OUT.state resumes an interrupted refinement with the same "
                             "options (other options are refused)")
    parser.add_argument("--steps", type=integer(1), default=300, help="refinement steps in all (a resumed run's too)")
    parser.add_argument("--particles", type=integer(2), default=20,
                        help="K particles per step and evaluation")
    parser.add_argument("--chunk", type=integer(1), default=100, help="tokens per piece of whole sentences")
    parser.add_argument("--batch-tokens", type=integer(1), default=2_000, help="padded tokens per step (x particles)")
    parser.add_argument("--lr", type=real(0, include_low=False), default=3e-4, help="Adam learning rate")
    parser.add_argument("--eval-every", type=integer(1), default=50, help="evaluate on dev every this many steps")
    parser.add_argument("--wake", choices=WAKES, default="phi",
                        help="what is updated: phi, the proposal (wake-phi); theta, the model on the marginal "
                             "likelihood (wake-theta, with the supervised term); both; coref, the model on the gold "
                             "entities' conditional given the gold mentions, log p(E | x, R, L) (for the posterior "
                             "as a resolver)")
    parser.add_argument("--supervised-weight", type=real(0), default=1.0,
                        help="--wake theta, both or coref: the weight of the supervised log p(x, z_gold) beside "
                             "wake-theta's (or the conditional's) objective (0: that objective alone)")
    parser.add_argument("--coref-mentions", choices=COREF_MENTIONS, default="gold",
                        help="--wake coref: the mentions its conditional is given: the gold's, or the coreference "
                             "pipeline's (its linked outermost spans, each in the entity of the gold mention of the "
                             "same span, a spurious one alone: the mentions the posterior resolves), on train and dev")
    parser.add_argument("--coref-objective", choices=COREF_OBJECTIVES, default="sampled",
                        help="--wake coref: its objective: the conditional of the gold entities, its normaliser "
                             "sampled (the gold among the particles), or the exact local conditional of each "
                             "mention's gold cluster given the others' (a pseudo-likelihood, no sampler)")
    parser.add_argument("--hint-detector", metavar="MODEL",
                        help="--coref-mentions pipeline: the pipeline's mention detector (default: the bundled one)")
    parser.add_argument("--hint-resolver", metavar="MODEL",
                        help="--coref-mentions pipeline: the pipeline's mention ranker (default: the bundled one)")
    parser.add_argument("--cross-fit-detectors", nargs="+", metavar="MODEL",
                        help="--coref-mentions pipeline: K mention detectors, each trained with a fold F/K of train "
                             "held out (python -m coref.mentions train --held-out-fold F/K): each train document's "
                             "mentions come from the pipeline that never saw it (dev's still from --hint-detector)")
    parser.add_argument("--cross-fit-resolvers", nargs="+", metavar="MODEL",
                        help="with --cross-fit-detectors: the K mention rankers, each trained with its fold held "
                             "out on the mentions of that fold's detector")
    parser.add_argument("--pipeline-margin", type=real(0), default=0.0, metavar="WEIGHT",
                        help="--coref-mentions pipeline --coref-objective local: add this times the logistic loss of "
                             "the gold clusters against the pipeline's own on the same mentions, log(1 + p(x, "
                             "z_pipeline) / p(x, z_gold)) per piece (0: none)")
    parser.add_argument("--entity-words", type=integer(0), metavar="M",
                        help="--wake theta/both/coref: give the model a memory of each entity's last M mention "
                             "words, which a mention's word may copy (ours: generative/entitynlm/copying.py; the "
                             "copy gate starts untrained; default: the checkpoint's, 0 for the paper's model)")
    parser.add_argument("--copy-weighting", choices=COPY_WEIGHTINGS,
                        help="with --entity-words: how the copy weighs the remembered words, alike (uniform) or by a "
                             "learned attention from the context (attention; it starts uniform) (default: the "
                             "checkpoint's, else uniform)")
    add_extra_text(parser, ", read as text alone (any annotation dropped), its pieces among the training pieces "
                           "with no supervised term (--wake phi, theta or both)")
    parser.add_argument("--eval-pieces", type=integer(1), default=200, help="dev pieces the evaluation uses")
    add_device_seed_json(parser, "also write the before/after figures as JSON")
    return parser


def run(args: argparse.Namespace) -> dict:
    """The refinement the options ask for."""
    return refine_proposal(config_of(RefineConfig, args, cross_fit_detectors=args.cross_fit_detectors or (),
                                     cross_fit_resolvers=args.cross_fit_resolvers or ()))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
