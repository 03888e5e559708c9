"""Posterior coreference structures of a text under EntityNLM, drawn by importance resampling (SIR) or sequential
Monte Carlo (SMC), with particle Gibbs sweeps; see inference/algorithms/smc.py.

  python -m inference.posterior --text "Anna met Tom. She gave him a book." --out posterior/
  python -m inference.posterior --file chapter.txt --out posterior/      # a chapter, a book (UTF-8 text)
  python -m inference.posterior --conll story.conll --samples 50 --out posterior/
  python -m inference.posterior --file chapter.txt --given-mentions none --out own/   # the model's own mentions
  python -m inference.posterior --evaluate --corpus litbank --split test --data-dir DATA

The settings come from a preset (--preset; inference/algorithms/config.py), each option given overriding it.
The default, settled, is the posterior that resolves: the coreference pipeline reads the text, EntityNLM is
given its mentions (R and L observed) and samples their entities, by five sweeps of particle Gibbs from the
pipeline's clusters with the proposal mixed with the pipeline (weight 0.99, temperature 0.5). --given-mentions
none (or --preset paper, the paper's importance sampling from the proposal Q) samples R, E and L: the model's
own mentions. The text is read the way the model reads it (the checkpoint's preprocessing), and the structures
are mapped back onto the original tokens.

With --text, --file or --conll, the folder --out receives:
  samples.conll     --samples structures drawn from the posterior, one CoNLL document ID#sampleK each
  map.conll         per document, the sampled structure of highest joint probability p(X, R, E, L)
  marginals.json    per document, the spans whose mention probability is at least --min-probability,
                    and the posterior probability that two of them are mentions of one entity, among the
                    --max-spans most probable (the heatmap's)
  antecedents.txt   per such span, its antecedent (the closest earlier mention of its entity, or a new
                    entity) with posterior probabilities, most probable first: at most --top-antecedents,
                    the rest summed as one remainder (sparse marginals: linear in the text's length)
  antecedents.json  the same as JSON
  heatmap-ID.png    per document, P(same entity) of the --max-spans most probable mention spans
  summary.json      per document, the estimate of log p(x), the ESS, resamplings and its heatmap's file
With the mentions given, map.conll is the MAP on the pipeline's mentions (with --ranker-weight, ranked as the
paper's reranker ranks), the estimate is of log p(x, R, L), and the folder also receives:
  pipeline.conll    per document, the pipeline's own clusters of the same mentions
  links.txt         per mention of the MAP, the model's local conditional over its antecedent (an earlier
                    mention of each cluster of its window, or a new entity) given the MAP's other clusters, at
                    --link-temperature: the link probabilities that were calibrated on dev (docs/entitynlm-posterior.md)
  links.json        the same as JSON
The run writes into a new folder beside --out and puts it in place of --out only when it succeeds, so an
earlier run's files never linger and a failed or interrupted run leaves --out as it was. An existing --out
holding anything else than these files is refused, never cleared.

With --evaluate it instead scores the MAP structure as a standalone resolver against a corpus split's gold
(CoNLL F1; singletons dropped, as the gold has none) and reports the samplers' ESS.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.algorithms.config import GIVEN_MENTIONS, settings_for
from inference.algorithms.posterior import (
    METHODS,
    METHODS_SAMPLER,
    SAMPLER_METHODS,
    PosteriorConfig,
    analyse,
    evaluate_map,
    format_analysis,
    format_evaluation,
)
from inference.algorithms.resolver import LINK_PIECE, LINK_TEMPERATURE, WINDOW
from inference.checks import integer, real
from inference.commands.cli import Parser, config_of, run_command
from inference.commands.options import (
    FROM_PRESET,
    SHARED_SAMPLING_OPTIONS,
    add_corpus_split,
    add_data_dir,
    add_device,
    add_json,
    add_sampling_options,
    add_seed,
    add_threads,
    given_settings,
)
from inference.evaluation.posterior_resolver import (
    analyse_on_pipeline_mentions,
    evaluate_on_pipeline_mentions,
    format_pipeline_mentions,
)

# each option given changes this field of the preset's settings (--method: the sampler, by its name here)
POSTERIOR_OPTIONS = {**SHARED_SAMPLING_OPTIONS, "particles": "particles", "sweeps": "sweeps",
                     "ess_threshold": "ess_threshold", "new_entity_bias": "new_entity_bias",
                     "given_mentions": "given_mentions", "proposal": "context", "seed": "seed",
                     "batch_tokens": "batch_tokens"}


def build_parser() -> Parser:
    """The command's options (checked further by :func:`parse_args`)."""
    parser = Parser(prog="python -m inference.posterior", description=__doc__)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="a text to analyse (tokenised here: words and punctuation marks; "
                                       "sentences end at . ! ?)")
    source.add_argument("--file", help="a UTF-8 text file to analyse, tokenised as --text (a chapter, a book: "
                                       "time and memory grow linearly with its length)")
    source.add_argument("--conll", metavar="FILE",
                        help="a CoNLL-2012-style file of documents to analyse (their mentions are not used)")
    source.add_argument("--evaluate", action="store_true",
                        help="score the MAP structure as a resolver on --corpus/--split instead")
    parser.add_argument("--checkpoint", metavar="FILE", help="EntityNLM checkpoint (default: the bundled one)")
    add_sampling_options(parser)
    parser.add_argument("--method", choices=[*METHODS, "both"],
                        help="sir: importance resampling (both presets'; with the paper's proposal its MAP scored "
                             "above SMC's as a resolver); smc: also resample where --resample says; both: compare "
                             "them (--evaluate with --given-mentions none only)" + FROM_PRESET)
    parser.add_argument("--sweeps", type=integer(1),
                        help="passes of the method per document; more than 1 is particle Gibbs: each later pass is "
                             "conditional on a structure drawn from the last (with --given-mentions the first is "
                             "conditional on the pipeline's clusters), and the MAP is the best structure of all"
                             + FROM_PRESET)
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS,
                        help="forward (the paper's) or bidirectional. Default: forward when the checkpoint has it "
                             "(31.86 / 26.53 CoNLL F1 against 13.27 / 9.38 for the refined bidirectional one), "
                             "else the checkpoint's own")
    parser.add_argument("--particles", type=integer(1), help="particles per document" + FROM_PRESET)
    parser.add_argument("--given-mentions", choices=[*GIVEN_MENTIONS, "none"],
                        help="give EntityNLM the coreference pipeline's mentions (R and L observed) and sample their "
                             "entities only: the posterior as a resolver (the settled preset's). none: R, E and L all "
                             "latent, the model's own mentions (the paper preset's). With --evaluate it scores the "
                             "MAP beside "
                             "the pipeline's own clusters and the calibration of its link probabilities; with a text "
                             "it also writes pipeline.conll and links.txt/json. pipeline: the spans the pipeline "
                             "links; detected: every span its detector finds, so the posterior also decides which "
                             "stay alone" + FROM_PRESET)
    parser.add_argument("--reliability", metavar="PNG",
                        help="--given-mentions with --evaluate: also draw the links' reliability diagram into this "
                             "file")
    parser.add_argument("--link-temperature", type=real(0, include_low=False),
                        help="--given-mentions: divide the local link conditionals' scores by this (choose it on "
                             f"dev: the report gives the calibration error at several; default {LINK_TEMPERATURE:g}, "
                             "LitBank dev's choice)")
    parser.add_argument("--link-piece", type=integer(1), metavar="TOKENS",
                        help="--given-mentions with a text: score the local link conditionals on pieces of about "
                             f"this many tokens, each read from the sentence of the {WINDOW}th mention before it, so "
                             f"a book costs linearly in its length (default: {LINK_PIECE:,}; --evaluate reads whole "
                             "documents, as its recorded figures did)")
    parser.add_argument("--local-search", type=integer(0), default=0, metavar="ROUNDS",
                        help="--given-mentions with --evaluate: climb the particles' MAP by at most this many "
                             "rounds of iterated conditional modes (each round makes the single-mention moves that "
                             "raise the exact joint; 0: the particles' MAP as it is)")
    parser.add_argument("--ranker-weight", type=real(0), default=0.0,
                        help="--given-mentions: the MAP is the particle of highest log p(x, R, E, L) + this x the "
                             "pipeline ranker's tree score of its partition (the paper's 'EntityNLM + base' "
                             "reranker, over the particles; choose it on dev: the report gives the MAP's CoNLL F1 at "
                             "every weight of the grid). 0: the posterior's own MAP")
    parser.add_argument("--new-entity-bias", type=real(-math.inf),
                        help="add this to the new entity's logit in the model's p(E) (eq. 4): above 0 the posterior "
                             "opens entities more readily, below 0 it links more. A resolver setting, chosen on dev "
                             "(0: the model as trained)" + FROM_PRESET)
    parser.add_argument("--samples", type=integer(1), default=20,
                        help="structures drawn per document into samples.conll")
    parser.add_argument("--ess-threshold", type=float,
                        help="--method smc resamples a document when its ESS is below this fraction of the "
                             "particles (0 to 1; 0 never resamples)" + FROM_PRESET)
    parser.add_argument("--min-probability", type=float, default=0.05,
                        help="spans less probably a mention than this (0 to 1), and antecedents less probable, are "
                             "left out of marginals.json, the antecedent lists and the heatmaps")
    parser.add_argument("--max-spans", type=integer(1), default=40,
                        help="a heatmap (and marginals.json's pairwise block) shows at most this many spans")
    parser.add_argument("--top-antecedents", type=integer(1), default=5,
                        help="the antecedent lists keep at most this many antecedents per span, the most probable; "
                             "the rest is one remainder")
    parser.add_argument("--out", metavar="FOLDER", default="posterior",
                        help="output folder for --text/--file/--conll, replaced as a whole when the run succeeds; "
                             "refused "
                             "if it holds files other than the ones listed above")
    add_corpus_split(parser, corpus_help="--evaluate: corpus name", split_help="--evaluate: split")
    add_data_dir(parser, help="--evaluate: folder holding the corpora (default: $ENTITYLM_DATA)", metavar="FOLDER")
    add_json(parser, help="--evaluate: also write the results as JSON to OUT")
    parser.add_argument("--batch-tokens", type=integer(1), default=20_000,
                        help="particles x padded tokens per batch (memory against speed)")
    add_threads(parser)
    add_device(parser)
    add_seed(parser, help="random seed (a run is reproducible)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options of ``argv``; a bad one or a bad combination exits with one line on stderr (status 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    changes = given_settings(args, POSTERIOR_OPTIONS)
    if changes.get("given_mentions") == "none":
        changes["given_mentions"] = None
    if args.method not in (None, "both"):
        changes["sampler"] = METHODS_SAMPLER[args.method]
    try:  # the settings check their own values
        args.settings = settings_for("posterior", args.preset, **changes)
    except ValueError as error:
        parser.error(str(error))
    args.both, args.given_mentions = args.method == "both", args.settings.proposal.given_mentions
    args.method = "both" if args.both else SAMPLER_METHODS[args.settings.sampling.sampler]
    link_temperature_given, args.link_temperature = args.link_temperature is not None, (
        LINK_TEMPERATURE if args.link_temperature is None else args.link_temperature)
    problems = [
        (args.method == "both" and not args.evaluate, "--method both compares the samplers and needs --evaluate"),
        (args.json is not None and not args.evaluate, "--json is for --evaluate; --text/--file/--conll write to --out"),
        (not 0 <= args.min_probability <= 1, f"--min-probability must be in [0, 1], got {args.min_probability}"),
        (args.given_mentions is not None and args.method == "both",
         "--given-mentions scores one method: choose --method sir or smc"),
        (args.reliability is not None and args.given_mentions is None, "--reliability needs --given-mentions"),
        (link_temperature_given and args.given_mentions is None, "--link-temperature needs --given-mentions"),
        (args.local_search and args.given_mentions is None, "--local-search needs --given-mentions"),
        (args.local_search and not args.evaluate, "--local-search is for --evaluate"),
        (args.reliability is not None and not args.evaluate,
         "--reliability is for --evaluate: a text has no gold to check the links against"),
        (args.link_piece is not None and (args.given_mentions is None or args.evaluate),
         "--link-piece is for --given-mentions with --text, --file or --conll"),
        (args.ranker_weight and args.given_mentions is None, "--ranker-weight needs --given-mentions"),
    ]
    for problem, message in problems:
        if problem:
            parser.error(message)
    return args


def run(args: argparse.Namespace) -> dict:
    """The analysis of the texts, or with ``--evaluate`` the MAP structure scored on the corpus split (on the
    pipeline's mentions with ``--given-mentions``)."""
    config = config_of(PosteriorConfig, args)
    if args.given_mentions and not args.evaluate:
        return analyse_on_pipeline_mentions(config, link_temperature=args.link_temperature,
                                            ranker_weight=args.ranker_weight,
                                            piece_tokens=args.link_piece or LINK_PIECE)
    if args.given_mentions:
        return evaluate_on_pipeline_mentions(config, reliability=args.reliability,
                                             link_temperature=args.link_temperature, local_search=args.local_search,
                                             ranker_weight=args.ranker_weight)
    return evaluate_map(config) if args.evaluate else analyse(config)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    args = parse_args(argv)
    formatter = (format_analysis if not args.evaluate else format_pipeline_mentions if args.given_mentions else
                 format_evaluation)
    return run_command(run, formatter, args)
