"""LAMBADA as reading comprehension (coref/corpora/lambada.py) and the WikiHop sample (coref/corpora/wikihop.py).

Measured on the real files: the answer occurs in the context in 4,039 of the 4,869 dev passages (82.95%) and
4,256 of the 5,153 test passages (82.59%); Chu et al. (2017) and the Coref-GRU paper say "only 80%".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coref.corpora.lambada import (
    LambadaError,
    is_candidate,
    lambada_clusters,
    lambada_splits,
    load_lambada,
    parse_lambada,
    sentence_spans,
)
from coref.corpora.registry import CorpusError
from coref.corpora.wikihop import load_wikihop_sample
from coref.document import Document, Mention

PASSAGE = ("mary met john at the park . she gave him the ball , and the dog barked ! "
           "`` what now ? '' asked john -lrb- quietly -rrb- -- looking at mary")


def write_lambada(data_dir: Path, name: str, lines: list[str]) -> Path:
    path = data_dir / "lambada" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---- reading ------------------------------------------------------------------------------------------------


def test_last_sentence_is_the_query_and_last_word_the_answer() -> None:
    (example,) = parse_lambada(PASSAGE + "\n")
    assert example.answer == "mary"
    assert example.query == ("asked", "john", "-lrb-", "quietly", "-rrb-", "--", "looking", "at")
    assert example.context[-6:] == ("!", "``", "what", "now", "?", "''")
    assert example.tokens == tuple(PASSAGE.split()[:-1])
    assert example.sentences == ((0, 7), (7, 18), (18, 23), (23, 31))
    assert example.answer_in_context


def test_candidates_exclude_punctuation_brackets_and_stopwords() -> None:
    (example,) = parse_lambada(PASSAGE.replace("mary met", "anna met") + "\n")
    assert example.candidates == ("anna", "met", "john", "park", "she", "gave", "him", "ball", "dog", "barked",
                                  "what", "now")
    assert not example.answer_in_context
    assert not any(is_candidate(word) for word in (".", "``", "''", "--", "...", "-lrb-", "the", "n't", "'s"))


def test_query_may_be_empty_and_the_context_too() -> None:
    first, second = parse_lambada("he left . '' mary\nno sentence end here mary\n")
    assert (first.context, first.query, first.answer) == (("he", "left", ".", "''"), (), "mary")
    assert (second.context, second.query) == ((), ("no", "sentence", "end", "here"))
    assert sentence_spans(("a", ".", "''", "b", "?", "c")) == ((0, 3), (3, 5), (5, 6))


@pytest.mark.parametrize("lines, number, message", [
    (["he left . mary", ""], 2, "empty line"),
    (["he left . mary", "he left . mary", "mary"], 3, "at least two words"),
])
def test_bad_lines_name_file_and_line(tmp_path: Path, lines: list[str], number: int, message: str) -> None:
    path = write_lambada(tmp_path, "lambada_test_plain_text.txt", lines)
    with pytest.raises(LambadaError, match=message) as error:
        load_lambada("test", tmp_path)
    assert str(error.value).startswith(f"{path}:{number}: ")


def test_splits_cut_the_development_set_by_a_seeded_permutation(tmp_path: Path) -> None:
    dev = [f"passage {i} . word{i}" for i in range(30)]
    write_lambada(tmp_path, "lambada_development_plain_text.txt", dev)
    write_lambada(tmp_path, "lambada_test_plain_text.txt", dev[:5])
    splits = lambada_splits(tmp_path)
    assert [len(splits[name]) for name in ("train", "valid", "test")] == [27, 3, 5]
    lines = [example.line for example in splits["train"] + splits["valid"]]
    assert sorted(lines) == list(range(1, 31))
    assert all(a.line < b.line for part in ("train", "valid") for a, b in zip(splits[part], splits[part][1:]))
    assert lambada_splits(tmp_path) == splits and lambada_splits(tmp_path, seed=1)["valid"] != splits["valid"]
    assert load_lambada("development", tmp_path) == load_lambada("dev", tmp_path)
    with pytest.raises(CorpusError, match="unknown LAMBADA split 'train'"):
        load_lambada("train", tmp_path)


# ---- coreference --------------------------------------------------------------------------------------------


class WordPipeline:
    """A stand-in for CorefPipeline: every occurrence of a listed word is a mention of that word's entity."""

    def __init__(self, *words: str) -> None:
        self.words = words
        self.calls = 0

    def resolve_documents(self, documents: list[Document]) -> list[Document]:
        self.calls += 1
        return [document.replace(mentions=[Mention(i, i + 1, self.words.index(token))
                                           for i, token in enumerate(document.tokens) if token in self.words])
                for document in documents]


def test_clusters_keep_chains_of_two_mentions_and_are_cached(tmp_path: Path) -> None:
    examples = parse_lambada(PASSAGE + "\nanna went home . she slept . later anna\n")
    cache = tmp_path / "cache" / "dev.json"
    pipeline = WordPipeline("john", "she", "ball")
    expected = [[[(2, 3), (24, 25)]], []]  # she and ball are mentioned once
    assert lambada_clusters(examples, pipeline, cache) == expected
    assert json.loads(cache.read_text())["clusters"] == [[[[2, 3], [24, 25]]], []]
    assert lambada_clusters(examples, WordPipeline(), cache) == expected  # served from the cache
    assert lambada_clusters(examples[:1], pipeline, cache) == expected[:1] and pipeline.calls == 2  # other passages


# ---- the real files -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lambada_dir(data_dir: Path) -> Path:
    if not (data_dir / "lambada").is_dir():
        pytest.skip(f"LAMBADA unavailable: {data_dir / 'lambada'} does not exist")
    return data_dir


def test_real_lambada_counts_and_answer_in_context_rate(lambada_dir: Path) -> None:
    splits = lambada_splits(lambada_dir)
    assert {name: len(examples) for name, examples in splits.items()} == {"train": 4382, "valid": 487, "test": 5153}
    dev = load_lambada("dev", lambada_dir)
    assert len(dev) == 4869 and sum(example.answer_in_context for example in dev) == 4039
    assert sum(example.answer_in_context for example in splits["test"]) == 4256
    assert all(example.context and example.tokens == tuple(example.context + example.query) for example in dev)


def test_real_pipeline_on_lambada_passages(lambada_dir: Path, tmp_path: Path) -> None:
    """The bundled pipeline resolves passages as given (no re-tokenising) into chains of >= 2 in-range spans."""
    examples = load_lambada("dev", lambada_dir)[:5]
    found = lambada_clusters(examples, cache=tmp_path / "dev5.json")
    assert len(found) == 5 and any(found)
    for example, chains in zip(examples, found):
        assert all(len(chain) >= 2 and all(0 <= s < e <= len(example.tokens) for s, e in chain) for chain in chains)
    assert lambada_clusters(examples, WordPipeline(), tmp_path / "dev5.json") == found


def test_wikihop_sample(data_dir: Path) -> None:
    if not (data_dir / "wikihop_sample").is_dir():
        pytest.skip(f"WikiHop sample unavailable: {data_dir / 'wikihop_sample'} does not exist")
    examples = load_wikihop_sample(data_dir)
    assert len(examples) == 50 and [e.id for e in examples[27:29]] == ["WH_dev_27", "WH_train_0"]
    assert sum(bool(e.annotations) for e in examples) == 28
    assert all(e.answer in e.candidates for e in examples)
    first = examples[0]
    assert (first.relation, first.subject, first.answer) == ("country", "sms braunschweig", "german empire")
    for example in examples:
        spans = example.support_spans
        assert spans[0][0] == 0 and spans[-1][1] == len(example.document.tokens) and len(spans) == len(example.supports)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        starts = {start for start, _ in example.document.sentences}
        assert all(start in starts for start, end in spans if end > start)


def test_wikihop_errors(tmp_path: Path) -> None:
    folder = tmp_path / "wikihop_sample"
    folder.mkdir()
    (folder / "wikihop_dev_first28.json").write_text('[{"id": "x", "query": "q"}]', encoding="utf-8")
    with pytest.raises(CorpusError, match=re.escape("wikihop_dev_first28.json: record 0 lacks answer, candidates")):
        load_wikihop_sample(tmp_path)
    (folder / "wikihop_dev_first28.json").write_text('[\n{"id": ', encoding="utf-8")
    with pytest.raises(CorpusError, match=re.escape("wikihop_dev_first28.json:2: not valid JSON")):
        load_wikihop_sample(tmp_path)
