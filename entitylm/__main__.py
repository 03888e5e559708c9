"""Every entitylm command under one name: ``entitylm COMMAND [ARGS ...]`` (or ``python -m entitylm COMMAND``).

``entitylm resolve --text "..."`` is ``python -m coref.resolve --text "..."``: the same parser, output and exit
status. The dispatcher runs the command's documented entry-point module (:data:`COMMANDS`) as ``__main__``, so
it names modules, not functions, and follows a command wherever its code lives. The console scripts
``entitylm-COMMAND`` are this dispatcher too, under the command's name (as ``busybox`` is).
"""

from __future__ import annotations

import ast
import importlib.util
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

from inference.commands.cli import Parser

# name -> (documented entry-point module, one line for `entitylm --help`); grouped as the docs' command pages are.
# `entitylm-NAME` is the console script of the same command (tests/test_packaging.py checks the two agree).
SCRIPT_PREFIX = "entitylm-"
COMMANDS: dict[str, tuple[str, str]] = {
    "corpora": ("coref.corpora", "named coreference corpora and splits: list, count, fetch the public ones"),
    "anonymise": ("coref.anonymise", "anonymised language-modelling data from a coreference corpus (DNTM)"),
    "resolve": ("coref.resolve", "coreference of raw text, end to end: tokens -> mentions -> clusters"),
    "mentions": ("coref.mentions", "train and apply the mention detector"),
    "resolver": ("coref.resolver", "train and apply the mention-ranking resolver over given mentions"),
    "pos": ("coref.pos", "train and apply the part-of-speech tagger"),
    "score": ("coref.score", "score a coreference response against a key, as the CoNLL-2012 scorer does"),
    "gap": ("coref.gap", "the GAP pronoun-resolution benchmark: decisions and metric"),
    "rerank": ("inference.rerank", "rerank a base resolver's k-best lists with EntityNLM (paper Table 2)"),
    "train": ("inference.train", "train any language model of the registry"),
    "grid": ("inference.grid", "the paper's hyper-parameter grid, searched on dev, resumable"),
    "pretrain-context": ("inference.pretrain_context", "pretrain the DNTM's context encoder on sentence completion"),
    "refine": ("inference.refine", "refine a trained proposal toward the posterior on text alone"),
    "marginal-ppl": ("inference.marginal_ppl", "marginal perplexity of EntityNLM by SMC or importance sampling"),
    "perplexity": ("inference.perplexity", "test perplexity of any checkpoint, in total and per token group"),
    "posterior": ("inference.posterior", "posterior coreference structures of a text under EntityNLM"),
    "diagnostics": ("inference.diagnostics", "where EntityNLM wins and loses against the RNNLM, token by token"),
    "entity-prediction": ("inference.entity_prediction", "entity prediction on InScript (paper Table 3)"),
    "entity-cloze": ("inference.entity_cloze", "entity cloze by sentence likelihood, Mean Quantile (DNTM Table 4)"),
    "generate": ("inference.generate", "prompted story generation with a MNEMELM story LM"),
    "mneme-eval": ("inference.mneme_eval", "language-modelling and generation metrics of MNEMELM story LMs"),
}


def command_module(entry: str) -> str:
    """The module whose ``main`` the entry point ``entry`` (``inference.train``) runs, read from its source without
    running it: where the command's parser is (``build_parser``), wherever its code has moved."""
    spec = importlib.util.find_spec(entry)
    if spec is None or spec.origin is None:
        raise ValueError(f"{entry}: no such module")
    path = Path(spec.origin).with_name("__main__.py") if spec.submodule_search_locations else Path(spec.origin)
    imports = {node.module for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.ImportFrom) and any(alias.name == "main" for alias in node.names)}
    if len(imports) != 1:
        raise ValueError(f"{path}: not an entry point that runs one command's main")
    return imports.pop()


def parser() -> Parser:
    """The dispatcher's own parser: the command's name only (everything after it is the command's)."""
    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items())
    result = Parser(
        prog="entitylm",
        usage="entitylm COMMAND [ARGS ...]",
        description=f"Every entitylm command under one name.\n\ncommands:\n{listing}",
        epilog="`entitylm COMMAND --help` shows a command's options. Each command is also its `python -m` module "
        "(`entitylm marginal-ppl` is `python -m inference.marginal_ppl`) and its `entitylm-COMMAND` script.",
    )
    result.add_argument("command", choices=COMMANDS, metavar="COMMAND", help="one of the commands above")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``entitylm COMMAND ARGS``: the command's entry-point module as ``__main__`` with ``ARGS`` as its
    arguments. Its exit status is this one's (it leaves by ``sys.exit``). Called as ``entitylm-COMMAND ARGS``
    (a console script), the command is the script's name."""
    if argv is None:
        script = Path(sys.argv[0]).stem
        named = [script.removeprefix(SCRIPT_PREFIX)] if script.startswith(SCRIPT_PREFIX) else []
        argv = [*named, *sys.argv[1:]]
    command = parser().parse_args(argv[:1]).command
    module = COMMANDS[command][0]
    saved = sys.argv
    sys.argv = [f"entitylm {command}", *argv[1:]]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
