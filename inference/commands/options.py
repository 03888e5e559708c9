"""The options many commands share, each declared once: where the corpora are, which corpus and split, the seed,
the device and ``--json OUT``; a sub-command; the options of a training config (:func:`config_options`) and those
every training run has; the training and evaluation options of the coreference pipeline's models. A command adds
the groups it takes; where its meaning is narrower than the shared wording (a seed that only orders the samples,
a JSON file of scores), it passes its own help text."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from coref.corpora.folds import Fold
from inference.algorithms.config import DEFAULT_PRESET, PRESETS, RESAMPLING
from inference.checks import integer, output_file, real
from inference.commands.cli import Parser
from inference.training.options import Check, defaults, option

if TYPE_CHECKING:
    from coref.resolution.mentions import MentionDetectorConfig
    from coref.resolution.pos import PosTaggerConfig

DATA_DIR_HELP = "folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)"
ANNOTATED_CORPORA_HELP = "sample, litbank, ontogum, conll2012, or several joined by '+'"


def add_command(commands: argparse._SubParsersAction, name: str, run: Callable[[argparse.Namespace], int],
                help: str) -> argparse.ArgumentParser:
    """The sub-command ``name`` (``python -m coref.mentions train``): ``help`` is its line in the command's
    ``--help``, ``run``'s docstring its own ``--help`` description, and ``run(args)`` what it does
    (:func:`inference.commands.cli.run_subcommand`)."""
    parser = commands.add_parser(name, help=help, description=inspect.getdoc(run))
    parser.set_defaults(run=run)
    return parser


def add_data_dir(parser: argparse.ArgumentParser, help: str = DATA_DIR_HELP, **options) -> None:
    """``--data-dir``: the folder of the corpora; left out, :func:`coref.corpora.registry.resolve_data_dir` reads
    ``$ENTITYLM_DATA``."""
    parser.add_argument("--data-dir", help=help, **options)


def add_corpus_split(parser: argparse.ArgumentParser, *, corpus: str | None = "sample", split: str | None = "test",
                     corpus_help: str = "corpus name, or several joined with '+'",
                     split_help: str = "the split to evaluate", required: bool = False) -> None:
    """``--corpus`` (a name of :mod:`coref.corpora.registry`, or several joined with '+'; ``required`` makes it
    so) and ``--split``; ``split=None`` leaves ``--split`` out."""
    if required:
        parser.add_argument("--corpus", required=True, help=corpus_help)
    else:
        parser.add_argument("--corpus", default=corpus, help=corpus_help)
    if split is not None:
        parser.add_argument("--split", default=split, help=split_help)


def add_seed(parser: argparse.ArgumentParser, default: int = 0, help: str = "random seed") -> None:
    """``--seed``: a run with the same seed and options gives the same result (:func:`inference.runtime.set_seed`)."""
    parser.add_argument("--seed", type=int, default=default, help=help)


def add_device(parser: argparse.ArgumentParser) -> None:
    """``--device``: auto (CUDA when there is a GPU), cpu or cuda (:func:`inference.runtime.resolve_device`)."""
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")


def add_threads(parser: argparse.ArgumentParser) -> None:
    """``--threads N``: torch's threads on the CPU for the run (:func:`inference.commands.cli.run_command` sets
    them), for the commands that sample EntityNLM's structures step by step."""
    parser.add_argument("--threads", type=integer(1), metavar="N",
                        help="torch threads on the CPU (default: torch's, one per core). The sampler's step is "
                             "many small operations, which one thread runs about as fast as two "
                             "(docs/long-documents.md)")


def add_json(parser: argparse.ArgumentParser, help: str = "also write the results as JSON") -> None:
    """``--json OUT``: the command's result also written, atomically, as JSON to OUT."""
    parser.add_argument("--json", metavar="OUT", type=output_file, help=help)


def add_device_seed_json(parser: argparse.ArgumentParser, json_help: str = "also write the results as JSON") -> None:
    """``--device``, ``--seed`` and ``--json OUT`` (``json_help`` says what it holds): the last options of a command
    that computes a result."""
    add_device(parser)
    add_seed(parser)
    add_json(parser, help=json_help)


def config_options(parser: argparse.ArgumentParser, config: type,
                   checks: Mapping[str, Check]) -> Callable[..., argparse.Action]:
    """A function that adds to ``parser`` the option of a field of the training config ``config``:
    ``add("vocab_size", help=...)`` declares ``--vocab-size`` with the type or the choices of its check in ``checks``
    (where it has one) and, unless ``default=`` is given, the field's default; its other keywords go to
    ``add_argument``. So the config is where each option's check and default are written, once."""
    values = defaults(config)

    def add(name: str, **keywords) -> argparse.Action:
        if name in values:
            keywords.setdefault("default", values[name])
        checked = option(checks, name) if name in checks else {}
        return parser.add_argument(f"--{name.replace('_', '-')}", **checked, **keywords)

    return add


def add_training_corpus(parser: argparse.ArgumentParser) -> None:
    """``--corpus`` (required) and ``--data-dir``: the annotated corpora a model of the coreference pipeline is
    trained on (their train splits, dev for selection)."""
    parser.add_argument("--corpus", required=True, help=ANNOTATED_CORPORA_HELP)
    add_data_dir(parser)


def add_extra_text(parser: argparse.ArgumentParser, use: str = "") -> None:
    """``--extra-text NAMES``: text beside the corpus's (:func:`inference.data.extra_text_names`); ``use`` says how
    the command reads it."""
    parser.add_argument("--extra-text", metavar="NAMES",
                        help="more text, comma-separated: corpora of coref.corpora.registry (their training split), "
                             "lambada (LAMBADA's training novels) or lambada-dev (its development passages)" + use)


def add_held_out_fold(parser: argparse.ArgumentParser) -> None:
    """``--held-out-fold F/K``: train without fold F of K of the train split (cross-fitting,
    :mod:`coref.corpora.folds`)."""
    parser.add_argument("--held-out-fold", type=Fold.parse, metavar="F/K",
                        help="train without fold F of K of the train split (each document's fold fixed by its name), "
                             "so that the model predicts fold F as it predicts unseen text (cross-fitting)")


def add_model_training(parser: argparse.ArgumentParser, epochs: int, epochs_help: str, seed_help: str) -> None:
    """``--out`` (the model file), ``--epochs`` and ``--seed`` (23) of training a model of the coreference
    pipeline (the mention detector, the ranker, the tagger: :mod:`inference.training.resolution`)."""
    parser.add_argument("--out", required=True, type=output_file, help="model file to write (.pt)")
    parser.add_argument("--epochs", type=integer(1), default=epochs, help=epochs_help)
    add_seed(parser, 23, help=seed_help)


def add_model_split(parser: argparse.ArgumentParser, split_help: str) -> None:
    """``--model`` (a file ``train`` wrote), ``--corpus``, ``--split`` (``split_help`` says what is done to it) and
    ``--data-dir``: a model of the coreference pipeline applied to a corpus split."""
    parser.add_argument("--model", required=True, help="a model written by train")
    parser.add_argument("--corpus", required=True, help=ANNOTATED_CORPORA_HELP)
    parser.add_argument("--split", required=True, help=split_help)
    add_data_dir(parser)


def add_token_encoder(parser: argparse.ArgumentParser, defaults: MentionDetectorConfig | PosTaggerConfig) -> None:
    """The sizes of the BiLSTM over words, shapes and suffixes that the mention detector and the tagger share
    (:mod:`coref.resolution.mentions`, :mod:`coref.resolution.pos`), their defaults those of ``defaults``, a
    config of one of them."""
    parser.add_argument("--vocabulary-size", type=integer(2), default=defaults.vocabulary_size,
                        help="most word types kept (training words seen at least twice), <pad> and <unk> included")
    parser.add_argument("--hidden-size", type=integer(1), default=defaults.hidden_size,
                        help="BiLSTM state size per direction")
    parser.add_argument("--layers", type=integer(1), default=defaults.layers, help="BiLSTM layers")
    parser.add_argument("--dropout", type=real(0, 1), default=defaults.dropout, help="dropout rate")


def add_stopping(add: Callable[..., argparse.Action], patience_help: str) -> None:
    """``--epochs`` and ``--patience`` (``patience_help`` says what a gain is): when a run of the one training loop
    stops; ``add`` is the command's :func:`config_options`, which gives their checks and defaults."""
    add("epochs", help="at most this many epochs")
    add("patience", help=patience_help)


def add_run_options(parser: argparse.ArgumentParser, seed_help: str) -> None:
    """``--device``, ``--seed`` (``seed_help`` says what it seeds) and ``--resume``: how a run of the one training
    loop (:mod:`inference.training.loop`) runs and continues."""
    add_device(parser)
    add_seed(parser, help=seed_help)
    parser.add_argument("--resume", action="store_true", help="continue the run in OUT from OUT/last.pt")


def evaluation_parser(prog: str, description: str, checkpoint_help: str) -> Parser:
    """The parser of a command that evaluates a checkpoint on a corpus split (perplexity, entity cloze)."""
    parser = Parser(prog=prog, description=description)
    parser.add_argument("--checkpoint", required=True, help=checkpoint_help)
    add_corpus_split(parser, split_help="split to evaluate")
    add_data_dir(parser)
    parser.add_argument("--batch-tokens", type=integer(1), default=32_000, help="padded tokens per batch")
    add_device_seed_json(parser, json_help="also write the result as JSON to OUT")
    return parser


FROM_PRESET = " (default: the preset's)"


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    """``--preset`` and EntityNLM's sampling options the commands share: where SMC resamples, and how the proposal
    follows the coreference pipeline and the model's lookahead. Left out, an option takes the preset's value
    (:func:`preset_defaults`), so a command's defaults are the API's."""
    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=list(PRESETS),
                        help="the sampling settings every option below defaults to: settled (the estimate that has "
                             "settled at N = 100, and the posterior that resolves) or paper (Ji et al.'s importance "
                             "sampling from the proposal Q alone, eq. 11); an option given overrides it "
                             "(default: %(default)s)")
    parser.add_argument("--resample", choices=list(RESAMPLING),
                        help="where SMC may resample its particles (when their ESS falls below the threshold): at "
                             "sentence ends, or after any token" + FROM_PRESET)
    parser.add_argument("--hint-weight", type=real(0, 1),
                        help="mix the proposal with the coreference pipeline's reading of the text: its share of "
                             "the mixture, in [0, 1); 0 is the proposal alone" + FROM_PRESET)
    parser.add_argument("--hint-temperature", type=real(0, include_low=False),
                        help="divide the pipeline ranker's antecedent scores by this before the softmax" + FROM_PRESET)
    parser.add_argument("--hint-detector", metavar="MODEL",
                        help="the pipeline's mention detector for the hints (default: the bundled one)")
    parser.add_argument("--hint-resolver", metavar="MODEL",
                        help="the pipeline's mention ranker for the hints (default: the bundled one)")
    parser.add_argument("--lookahead", type=real(0, 1),
                        help="mix the proposal of R, E and L with the model's own choice given the word (SMC's "
                             "locally optimal proposal): its share, in [0, 1); 0 is the proposal alone" + FROM_PRESET)


def given_settings(args: argparse.Namespace, options: Mapping[str, str]) -> dict[str, object]:
    """The settings fields set by the options of ``options`` (an option's destination: the field of
    :class:`~inference.algorithms.config.Settings` it sets) that were given (not None): the changes to the preset."""
    return {field: getattr(args, destination) for destination, field in options.items()
            if getattr(args, destination) is not None}


SHARED_SAMPLING_OPTIONS = {"resample": "resample", "hint_weight": "hint_weight",
                           "hint_temperature": "hint_temperature", "hint_detector": "hint_detector",
                           "hint_resolver": "hint_resolver", "lookahead": "lookahead"}
