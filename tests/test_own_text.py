"""The tasks on a user's own text: the marginal perplexity of a text or a file (``entitylm marginal-ppl --text``,
``--file``), and the text with each mention replaced by its entity's representative name (``entitylm resolve
--replace``, :meth:`Coreference.replaced`, :func:`coref.resolution.pipeline.replaced_text`). The bundled models
need no data directory."""

from __future__ import annotations

import json
import math

import pytest

import inference.api as elm
from coref.document import Document, Mention
from coref.io.text import tokenize
from coref.resolution.pipeline import replaced_text, representatives
from inference.commands import marginal_ppl, resolve

TEXT = "Anna met her brother in Paris. She thanked him, and he smiled."


# ---- marginal perplexity of a text --------------------------------------------------------------------------------


def test_marginal_ppl_of_a_text_is_the_apis_log_likelihood_beside_the_baseline(tmp_path, capsys):
    """``--text``: one document named ``text``, the API's estimate for the same settings, the bundled RNNLM on
    the same tokens; the JSON has the corpus path's fields, with ``text`` for ``corpus``/``split``."""
    out = tmp_path / "text.json"
    assert marginal_ppl.main(["--text", TEXT, "--particles", "5", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert (result["text"], result["corpus"], result["split"], result["documents"]) == ("text", None, None, 1)
    assert (result["particles"], result["sampler"], result["preset"]) == (5, "smc", "settled")
    expected = elm.load("entitynlm").log_likelihood(TEXT, particles=5)
    assert result["tokens"] == expected.tokens == result["per_document"][0]["tokens"]
    assert math.isclose(result["log_likelihood"], expected.log_p, rel_tol=1e-9)
    assert math.isclose(result["perplexity"], math.exp(-result["log_likelihood"] / result["tokens"]))
    assert len(result["ess"]) == 1 and 1 <= result["ess"][0] <= 5
    assert set(result["baselines"]) == {"rnnlm"}
    rnnlm = elm.load("rnnlm").log_likelihood(TEXT)
    assert math.isclose(result["baselines"]["rnnlm"], rnnlm.perplexity, rel_tol=1e-6)
    assert f"text: 1 document, {result['tokens']} tokens, 5 particles" in printed
    assert "EntityNLM perplexity (SMC)" in printed and "rnnlm perplexity:" in printed


def test_marginal_ppl_of_a_file_by_both_samplers_and_at_several_particle_counts(tmp_path, capsys):
    """``--file``: the document is named after the file; ``--sampler both`` and the convergence table work on a
    text as on a corpus."""
    story = tmp_path / "story.txt"
    story.write_text(TEXT + "\n", encoding="utf-8")
    out = tmp_path / "both.json"
    assert marginal_ppl.main(["--file", str(story), "--particles", "5", "--sampler", "both", "--baseline", "none",
                              "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["text"] == "story" and result["baselines"] == {}
    assert set(result["samplers"]) == {"is", "smc"} and set(result["per_document"][0]) >= {"is", "smc"}
    assert "story: 1 document" in capsys.readouterr().out
    assert marginal_ppl.main(["--file", str(story), "--particles", "3,5", "--baseline", "none"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("story: 1 document") and "SMC" in printed


@pytest.mark.parametrize("argv, says", [
    (["--text", TEXT, "--corpus", "sample"], "argument --text: not allowed with --corpus, --split or --data-dir"),
    (["--file", "story.txt", "--split", "dev"], "argument --file: not allowed with --corpus"),
    (["--text", TEXT, "--file", "story.txt"], "argument --file: not allowed with argument --text"),
])
def test_a_text_and_a_corpus_split_exclude_each_other(argv, says, capsys):
    with pytest.raises(SystemExit) as exit:
        marginal_ppl.main(argv)
    assert exit.value.code == 2 and says in capsys.readouterr().err


# ---- the text with each mention replaced --------------------------------------------------------------------------


def test_replaced_text_uses_each_entitys_representative_and_the_outermost_mention():
    """The first proper name (else the longest non-pronoun mention) stands for its entity; a pronoun-only entity
    keeps its words; a mention inside another is replaced with it; a sentence start keeps its capital and a
    possessive pronoun gets "'s"."""
    text = "The old man saw Mr. Brown. He gave his dog to him. They left. They came back."
    tokenized = tokenize(text)
    words = tokenized.tokens
    assert list(words[:10]) == ["The", "old", "man", "saw", "Mr.", "Brown", ".", "He", "gave", "his"]

    def at(first: str, number: int = 0) -> int:  # the token index of a word's number-th occurrence
        return [i for i, word in enumerate(words) if word == first][number]

    mentions = [Mention(0, 3, 1), Mention(at("Mr."), at("Mr.") + 2, 2), Mention(at("He"), at("He") + 1, 1),
                Mention(at("his"), at("his") + 2, 3), Mention(at("his"), at("his") + 1, 2),  # "his" inside "his dog"
                Mention(at("him"), at("him") + 1, 2), Mention(at("They"), at("They") + 1, 4),
                Mention(at("They", 1), at("They", 1) + 1, 4)]
    document = Document("text", words, tokenized.sentences, mentions)
    chosen = representatives(document)
    assert {entity: " ".join(words[m.start:m.end]) for entity, m in chosen.items()} == \
        {1: "The old man", 2: "Mr. Brown", 3: "his dog"}
    assert replaced_text(document, tokenized) == \
        "The old man saw Mr. Brown. The old man gave his dog to Mr. Brown. They left. They came back."
    assert replaced_text(document).splitlines() == [
        "The old man saw Mr. Brown .", "The old man gave his dog to Mr. Brown .", "They left .", "They came back ."]
    moved = document.replace(mentions=[Mention(0, 3, 1), Mention(at("him"), at("him") + 1, 1),
                                       Mention(at("his"), at("his") + 1, 1)])
    assert replaced_text(moved, tokenized) == \
        "The old man saw Mr. Brown. He gave the old man's dog to the old man. They left. They came back."


def test_resolve_replace_prints_the_replaced_text_as_the_api_gives_it(tmp_path, capsys):
    assert resolve.main(["--text", TEXT, "--replace"]) == 0
    printed = capsys.readouterr().out
    found = elm.coreference(TEXT)
    assert printed == found.replaced() + "\n"
    assert printed.startswith("Anna met her brother in Paris. Anna thanked")
    assert found.replaced() == replaced_text(found.document, found.tokenized)
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text(TEXT, encoding="utf-8")
    second.write_text("Tom slept. He dreamt.", encoding="utf-8")
    assert resolve.main(["--file", str(first), str(second), "--replace"]) == 0
    assert capsys.readouterr().out == f"==> {first} <==\n{found.replaced()}\n\n==> {second} <==\n" \
                                      f"{elm.coreference('Tom slept. He dreamt.').replaced()}\n"
