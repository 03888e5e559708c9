"""How closely :func:`coref.io.text.tokenize` reproduces the corpora's gold tokens and sentences from raw text.

Joining gold tokens with spaces would hand the tokenizer its answer, so each document's raw text is rebuilt by
detokenising: punctuation, clitics (``'s``, ``n't``) and closing quotes and brackets attach to the token before,
opening ones to the token after, hyphens and ``--`` to both sides, straight quotes alternate between opening
and closing; sentences are joined by a space, or by a blank line when a sentence does not end in ``.``, ``!``,
``?`` (possibly inside quotes or brackets): headings and list items stand on their own line in real text.

Token agreement is the share of gold tokens whose exact character span is a predicted token; sentence-boundary
precision, recall and F1 compare the character offsets where sentences begin (the first excepted). The first
20 documents of each corpus's test then dev split are measured (LitBank has 10 of each). If the ``syntok``
package is importable it is measured on the same texts, as the library alternative considered.

    python benchmarks/tokenizer_agreement.py --data-dir DATA [--documents 20] [--out benchmarks/results]

Prints a markdown table and writes ``tokenizer.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.corpora.registry import load_corpus, resolve_data_dir
from coref.document import Document
from coref.io.atomic import write_text_atomic
from coref.io.text import tokenize
from inference.checks import integer, output_folder
from inference.commands.cli import Parser, run_main

CORPORA = ("litbank", "ontogum")
Spans = list[tuple[int, int]]
Tokenizer = Callable[[str], tuple[Spans, list[int]]]  # text -> token spans, sentence-start offsets

_NO_SPACE_BEFORE = re.compile(r"[.,;:!?%)\]}”’»]+|\.\.\.|…|n['’]t|['’](?i:s|m|d|ll|re|ve)")
_NO_SPACE_AFTER = {"(", "[", "{", "“", "‘", "«", "$", "#", "``"}
_JOINING = {"-", "--", "---", "----", "–", "/"}
_STRAIGHT_QUOTES = {'"', "'"}
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*$")


def detokenize(document: Document) -> tuple[str, Spans, list[int]]:
    """Plausible raw text of ``document``, the character span of each gold token in it, and where each
    sentence but the first begins."""
    pieces: list[str] = []
    spans: Spans = []
    starts: list[int] = []
    length = 0
    open_quotes: set[str] = set()
    attach_next = True
    for sentence_number, (begin, end) in enumerate(document.sentences):
        if sentence_number:
            ending = "".join(document.tokens[max(0, begin - 3) : begin])
            separator = " " if _SENTENCE_END.search(ending) else "\n\n"
            pieces.append(separator)
            length += len(separator)
            starts.append(length)
            attach_next = True
        for token in document.tokens[begin:end]:
            closing_quote = token in _STRAIGHT_QUOTES and token in open_quotes
            attach = attach_next or (
                _NO_SPACE_BEFORE.fullmatch(token) or token in _JOINING or closing_quote
            )
            if token in _STRAIGHT_QUOTES:
                open_quotes ^= {token}
            if not attach:
                pieces.append(" ")
                length += 1
            pieces.append(token)
            spans.append((length, length + len(token)))
            length += len(token)
            attach_next = token in _NO_SPACE_AFTER or token in _JOINING or (
                token in _STRAIGHT_QUOTES and not closing_quote
            )
    return "".join(pieces), spans, starts


def ours(text: str) -> tuple[Spans, list[int]]:
    tokenized = tokenize(text)
    return list(tokenized.offsets), [tokenized.offsets[start][0] for start, _ in tokenized.sentences[1:]]


def syntok_tokenizer() -> Tokenizer | None:
    """syntok's segmenter in the same shape, or None when it is not installed."""
    try:
        from syntok import segmenter
    except ImportError:
        return None

    def run(text: str) -> tuple[Spans, list[int]]:
        sentences = [
            [(token.offset, token.offset + len(token.value)) for token in sentence]
            for paragraph in segmenter.analyze(text)
            for sentence in paragraph
        ]
        return [span for sentence in sentences for span in sentence], [sentence[0][0] for sentence in sentences[1:]]

    return run


def agreement(documents: Sequence[Document], tokenizer: Tokenizer) -> dict:
    """Token agreement and sentence-boundary precision, recall and F1 of ``tokenizer`` over ``documents``."""
    gold_tokens = matched_tokens = gold_starts = predicted_starts = matched_starts = 0
    for document in documents:
        text, spans, starts = detokenize(document)
        predicted_spans, predicted_sentence_starts = tokenizer(text)
        matched_tokens += len(set(spans) & set(predicted_spans))
        gold_tokens += len(spans)
        matched_starts += len(set(starts) & set(predicted_sentence_starts))
        gold_starts += len(starts)
        predicted_starts += len(predicted_sentence_starts)
    precision = matched_starts / predicted_starts if predicted_starts else 0.0
    recall = matched_starts / gold_starts if gold_starts else 0.0
    return {
        "documents": len(documents),
        "gold_tokens": gold_tokens,
        "token_agreement": matched_tokens / gold_tokens,
        "gold_sentences": gold_starts + len(documents),
        "sentence_precision": precision,
        "sentence_recall": recall,
        "sentence_f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
    }


def table(results: dict[str, dict[str, dict]]) -> str:
    header = "| tokenizer | corpus | documents | gold tokens | token agreement | sentence P | R | F1 |"
    lines = [header, "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, by_corpus in results.items():
        for corpus, r in by_corpus.items():
            lines.append(f"| {name} | {corpus} | {r['documents']} | {r['gold_tokens']:,} | "
                         f"{100 * r['token_agreement']:.2f}% | {100 * r['sentence_precision']:.1f} | "
                         f"{100 * r['sentence_recall']:.1f} | {100 * r['sentence_f1']:.1f} |")
    return "\n".join(lines)


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/tokenizer_agreement.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding litbank/ and ontogum/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--documents", type=integer(1), default=20, help="documents per corpus")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results", help="folder of tokenizer.json")
    return parser


def run(args: argparse.Namespace) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    documents = {
        corpus: [*load_corpus(corpus, "test", data_dir).documents, *load_corpus(corpus, "dev", data_dir).documents]
        [: args.documents]
        for corpus in CORPORA
    }
    tokenizers = {"coref.io.text": ours}
    syntok = syntok_tokenizer()
    if syntok is not None:
        tokenizers["syntok"] = syntok
    results = {
        name: {corpus: agreement(docs, tokenizer) for corpus, docs in documents.items()}
        for name, tokenizer in tokenizers.items()
    }
    print(table(results))
    report = {**command_record(build_parser(), args),
              "documents": {corpus: [d.id for d in docs] for corpus, docs in documents.items()}, "results": results}
    write_text_atomic(Path(args.out) / "tokenizer.json", json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
