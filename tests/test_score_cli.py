"""The scoring CLI, ``python -m coref.score``: its table, its JSON, its warnings and its errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inference.commands.score import main

# reference-notes §3.5: She linked to the wrong entity, "him" missed, "waved" a spurious singleton.
SENTENCES = (
    (("John", "(0)"), ("said", "-"), ("he", "(0)"), ("saw", "-"), ("Mary", "(1)"), (".", "-")),
    (("She", "(1)"), ("waved", "-"), ("at", "-"), ("him", "(0)"), (".", "-")),
)
RESPONSE_CHANGES = {"She": "(0)", "waved": "(2)", "him": "-"}


def conll(name: str, sentences, changes=None) -> str:
    """A TAB-separated CoNLL-2012 document ``name``, coreference last, with some tokens' brackets replaced."""
    changes = changes or {}
    lines = [f"#begin document ({name}); part 000"]
    for sentence in sentences:
        for index, (word, brackets) in enumerate(sentence):
            lines.append("\t".join((name, "0", str(index), word, changes.get(word, brackets))))
        lines.append("")
    return "\n".join(lines + ["#end document", ""])


@pytest.fixture
def example(tmp_path: Path) -> tuple[Path, Path]:
    key, response = tmp_path / "key.conll", tmp_path / "response.conll"
    key.write_text(conll("example", SENTENCES))
    response.write_text(conll("example", SENTENCES, RESPONSE_CHANGES))
    return key, response


def table_rows(output: str) -> dict[str, list[float]]:
    """The metric rows of the printed table: name -> [recall, precision, F1]."""
    rows = {}
    for line in output.splitlines()[1:]:
        name, *values = line.split()
        if name == "CoNLL":
            break
        rows[name] = [float(value) for value in values]
    return rows


def test_table_and_json_of_the_worked_example(example, tmp_path, capsys):
    key, response = example
    out = tmp_path / "scores.json"
    assert main([str(key), str(response), "--json", str(out)]) == 0
    printed = capsys.readouterr()
    rows = table_rows(printed.out)
    assert list(rows) == ["mentions", "muc", "bcub", "ceafe", "ceafm", "blanc", "lea"]
    assert rows["mentions"] == [80.00, 80.00, 80.00]
    assert rows["muc"] == [33.33, 50.00, 40.00]
    assert rows["bcub"] == [46.67, 53.33, 49.78]  # rounded; the Perl scorer prints 49.77, truncated
    assert rows["ceafe"] == [66.67, 44.44, 53.33]
    assert rows["blanc"][2] == 29.67 and rows["lea"] == [20.00, 20.00, 20.00]
    assert "CoNLL F1: 47.70" in printed.out
    assert printed.err == ""
    scores = json.loads(out.read_text())
    assert set(scores) == {"muc", "bcub", "ceafe", "ceafm", "blanc", "lea", "conll_f1", "mentions"}
    for name, value in scores.items():
        if name != "conll_f1":
            assert set(value) == {"recall", "precision", "f1"}
    assert scores["muc"] == pytest.approx({"recall": 1 / 3, "precision": 0.5, "f1": 0.4})
    assert scores["conll_f1"] == pytest.approx(0.47704, abs=1e-4)


def test_module_runs_as_a_program(example):
    key, _ = example
    run = subprocess.run([sys.executable, "-m", "coref.score", str(key), str(key)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "CoNLL F1: 100.00" in run.stdout


def test_unmatched_documents_are_warned(tmp_path, capsys):
    key, response = tmp_path / "key.conll", tmp_path / "response.conll"
    key.write_text(conll("a", SENTENCES) + conll("b", SENTENCES))
    response.write_text(conll("a", SENTENCES) + conll("c", SENTENCES))  # lacks b, adds c
    assert main([str(key), str(response)]) == 0
    err = capsys.readouterr().err
    assert "1 key document(s) missing from the response, scored as misses: b part 0" in err
    assert "1 response document(s) not in the key, ignored: c part 0" in err


def test_a_broken_bracket_is_an_error_with_its_line_before_any_other_comparison(example, tmp_path):
    # The broken response is also shorter than the key: the bracket is what is reported, by file and line.
    key, _ = example
    broken = tmp_path / "broken.conll"
    broken.write_text(conll("example", SENTENCES[:1], {"John": "(0"}))
    run = subprocess.run([sys.executable, "-m", "coref.score", str(key), str(broken)], capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr == f"error: {broken}:2: '(0' opens a mention of entity 0 that is never closed " \
        "(document ends at line 9)\n"
    assert run.stdout == ""


@pytest.mark.parametrize(
    "response_text, message",
    [
        (None, "No such file or directory"),
        (conll("example", SENTENCES[:1]), "the key has 11 tokens, the response 6"),
        (conll("example", SENTENCES) * 2, "the response has two documents named 'example' part 0"),
        (b"#begin document (example); part 000\n\xff\n", "response.conll:2: not UTF-8 text"),
        ("", "response.conll:1: no documents"),
        ("\n\n", "response.conll:2: no documents"),
    ],
    ids=["missing file", "token counts differ", "repeated document", "not UTF-8", "empty file", "blank lines"],
)
def test_unusable_input_exits_with_status_2(example, response_text, message, capsys):
    key, response = example
    if response_text is None:
        response.unlink()
    elif isinstance(response_text, bytes):
        response.write_bytes(response_text)
    else:
        response.write_text(response_text)
    assert main([str(key), str(response)]) == 2
    assert message in capsys.readouterr().err
