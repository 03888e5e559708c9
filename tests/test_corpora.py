"""Named corpora: the embedded sample, data-directory resolution, the stats CLI, real-corpus counts, download."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coref.corpora import registry as corpora
from coref.corpora.preprocess import PreprocessConfig, preprocess_document, preprocess_documents
from coref.corpora.registry import (
    DATA_ENV,
    LITBANK,
    ONTOGUM,
    CorpusError,
    available_splits,
    concatenate,
    conll2012_files,
    corpus_stats,
    load_corpus,
    parse_gum_splits,
    parse_split_table,
    resolve_data_dir,
)
from coref.document import encoding_problems
from coref.io.conll import format_conll, read_conll
from inference.commands.corpora import main

ROOT = Path(__file__).resolve().parents[1]

# documents, sentences, tokens, mentions, entities of the sample corpus (coref/corpora/data/SAMPLE.md)
SAMPLE_COUNTS = {
    "train": (6, 39, 474, 131, 56),
    "dev": (2, 12, 148, 41, 18),
    "test": (2, 12, 153, 47, 18),
}
COUNT_NAMES = ("documents", "sentences", "tokens", "mentions", "entities")


def _counts(stats: dict) -> tuple[int, ...]:
    return tuple(stats[name] for name in COUNT_NAMES)


def _all_sample_documents():
    return [document for split in SAMPLE_COUNTS for document in load_corpus("sample", split).documents]


# ---- the sample corpus --------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", SAMPLE_COUNTS)
def test_sample_split_loads_with_expected_counts_without_a_data_dir(split, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    corpus = load_corpus("sample", split)
    assert (corpus.name, corpus.split, corpus.problems) == ("sample", split, ())
    assert _counts(corpus_stats(corpus)) == SAMPLE_COUNTS[split]


def test_sample_documents_are_the_size_the_corpus_promises():
    documents = _all_sample_documents()
    assert len({document.key for document in documents}) == 10
    for document in documents:
        assert 4 <= len(document.sentences) <= 8 and 40 <= len(document.tokens) <= 120, document.id


def test_sample_files_are_exactly_what_the_writer_emits():
    for split in SAMPLE_COUNTS:
        path = ROOT / "coref" / "corpora" / "data" / f"sample_{split}.conll"
        documents, _ = read_conll(path, strict=True)
        assert format_conll(documents) == path.read_text(encoding="utf-8")


def test_sample_annotation_needs_no_repair_and_encodes_after_preprocessing():
    """No crossing, duplicate or over-long mention; outermost mentions R/E/L-encode, singletons kept or not."""
    nested = singletons = 0
    for document in _all_sample_documents():
        for config in (PreprocessConfig(), PreprocessConfig(drop_singletons=False)):
            result, report = preprocess_document(document, config)
            assert report.crossing_mentions_dropped == report.duplicate_mentions_dropped == 0, document.id
            assert report.long_mentions_dropped == 0, document.id
            assert encoding_problems(result) == [], document.id
        nested += report.nested_mentions_dropped  # of the last config, which keeps singletons
        singletons += sum(len(cluster) == 1 for cluster in document.clusters())
    assert nested > 0 and singletons > 0  # the sample exercises both


# ---- names, splits, data directory --------------------------------------------------------------------------


def test_available_splits():
    assert available_splits("ontogum") == ("train", "dev", "test", "test2")
    assert available_splits("litbank+ontogum") == ("train", "dev", "test")
    assert available_splits("conll2012") == ("train", "dev", "test")


def test_unknown_corpus_and_split_list_the_valid_names():
    with pytest.raises(CorpusError, match="unknown corpus 'litbnk'.*sample, litbank, ontogum, conll2012"):
        load_corpus("litbnk", "train")
    with pytest.raises(CorpusError, match="unknown split 'test2' of corpus 'litbank\\+ontogum'.*train, dev, test"):
        load_corpus("litbank+ontogum", "test2")


def test_data_dir_comes_from_the_argument_before_the_environment(tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv(DATA_ENV, str(other))
    assert resolve_data_dir(tmp_path) == tmp_path
    assert resolve_data_dir() == other


def test_missing_data_dir_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    with pytest.raises(CorpusError, match=f"--data-dir DIR or set {DATA_ENV}.*coref.corpora download litbank"):
        resolve_data_dir()
    with pytest.raises(CorpusError, match=re.escape(f"{tmp_path / 'nowhere'} (from --data-dir) is not an existing")):
        resolve_data_dir(tmp_path / "nowhere")
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(CorpusError, match=f"from {DATA_ENV}"):
        load_corpus("litbank", "dev")


def test_missing_corpus_names_the_split_table_and_the_download_command(tmp_path):
    table = re.escape(str(tmp_path / "ontogum" / "splits.tsv"))
    with pytest.raises(CorpusError, match=f"{table} does not exist.*download ontogum"):
        load_corpus("ontogum", "dev", tmp_path)
    with pytest.raises(CorpusError, match="licensed.*development/"):
        load_corpus("conll2012", "dev", tmp_path)


def test_split_table_errors_name_file_and_line():
    assert parse_split_table("document\tsplit\na\ttrain\nb\tdev\n\nc\ttrain\n", "t.tsv") == {
        "train": ["a", "c"],
        "dev": ["b"],
    }
    with pytest.raises(CorpusError, match="t.tsv:1: expected the header"):
        parse_split_table("a\ttrain\n", "t.tsv")
    with pytest.raises(CorpusError, match="t.tsv:3: expected 'document<TAB>split'"):
        parse_split_table("document\tsplit\na\ttrain\nb train\n", "t.tsv")
    with pytest.raises(CorpusError, match="t.tsv:3: document 'a' is listed twice"):
        parse_split_table("document\tsplit\na\ttrain\na\tdev\n", "t.tsv")


def test_concatenation_refuses_a_document_twice():
    sample = load_corpus("sample", "dev")
    with pytest.raises(CorpusError, match="'sample_library' part 0 occurs in both 'sample' and 'sample'"):
        concatenate([sample, sample])


def test_conll2012_prefers_gold_files_and_maps_dev_to_development(tmp_path):
    train, dev = load_corpus("sample", "train").documents, load_corpus("sample", "dev").documents
    folder = tmp_path / "conll2012" / "development" / "data" / "english" / "annotations" / "bc"
    folder.mkdir(parents=True)
    (folder / "a.v4_gold_conll").write_text(format_conll(dev[:1]))
    (folder / "a.v4_auto_conll").write_text(format_conll(train[:1]))  # same document, automatic annotation
    (folder / "b.v4_auto_conll").write_text(format_conll(dev[1:]))  # no gold file: the auto one is used
    assert [path.name for path in conll2012_files(tmp_path / "conll2012" / "development")] == [
        "a.v4_gold_conll",
        "b.v4_auto_conll",
    ]
    assert load_corpus("conll2012", "development", tmp_path).documents == dev


# ---- the stats command ---------------------------------------------------------------------------------------


def test_stats_on_the_sample_via_main(tmp_path, capsys):
    out = tmp_path / "stats.json"
    assert main(["stats", "--corpus", "sample", "--json", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split() == ["split", *COUNT_NAMES, "dropped", "problems"]
    assert table[2].split() == ["train", "6", "39", "474", "131", "56", "0", "0"]
    result = json.loads(out.read_text())
    assert result["corpus"] == "sample" and list(result["splits"]) == ["train", "dev", "test"]
    for split, counts in SAMPLE_COUNTS.items():
        assert _counts(result["splits"][split]) == counts
        assert result["splits"][split]["problems"] == 0 and result["splits"][split]["problem_list"] == []


def test_stats_as_a_module_needs_no_data_dir(tmp_path):
    out = tmp_path / "stats.json"
    env = {key: value for key, value in os.environ.items() if key != DATA_ENV}
    command = [sys.executable, "-m", "coref.corpora", "stats", "--corpus", "sample", "--split", "test"]
    command += ["--json", str(out)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0, completed.stderr
    assert _counts(json.loads(out.read_text())["splits"]["test"]) == SAMPLE_COUNTS["test"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["stats", "--corpus", "nope"], "unknown corpus 'nope'"),
        (["stats", "--corpus", "sample", "--split", "test2"], "unknown split 'test2'"),
        (["stats", "--corpus", "litbank", "--data-dir", "/nonexistent/entitylm"], "is not an existing folder"),
    ],
)
def test_stats_errors_exit_2_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


# ---- real corpora: the counts of the SOURCE.md files ---------------------------------------------------------


def _stats(data_dir: Path, corpus: str, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("stats") / f"{corpus}.json"
    assert main(["stats", "--corpus", corpus, "--data-dir", str(data_dir), "--json", str(out)]) == 0
    return json.loads(out.read_text())["splits"]


@pytest.fixture(scope="module")
def litbank_stats(litbank_dir, tmp_path_factory):
    return _stats(litbank_dir.parent, "litbank", tmp_path_factory)


@pytest.fixture(scope="module")
def ontogum_stats(ontogum_dir, tmp_path_factory):
    return _stats(ontogum_dir.parent, "ontogum", tmp_path_factory)


def _assert_problems_are_located(stats: dict, corpus_dir: Path) -> None:
    """Every problem the table counts is listed as ``FILE:LINE: reason`` with a file of the corpus."""
    for split_stats in stats.values():
        assert split_stats["problems"] == len(split_stats["problem_list"])
        for problem in split_stats["problem_list"]:
            path, line, reason = problem.split(":", 2)
            assert Path(path).parent == corpus_dir / "conll" and line.isdigit() and reason.strip()


def test_litbank_counts_match_its_source_file(litbank_stats, litbank_dir):
    counts = {split: (s["documents"], s["sentences"], s["tokens"]) for split, s in litbank_stats.items()}
    assert counts == {"train": (80, 7047, 166910), "dev": (10, 790, 20862), "test": (10, 725, 22760)}
    assert {split: s["dropped"] for split, s in litbank_stats.items()} == {"train": 0, "dev": 0, "test": 0}
    _assert_problems_are_located(litbank_stats, litbank_dir)


def test_ontogum_counts_match_its_source_file(ontogum_stats, ontogum_dir):
    counts = {split: (stats["documents"], stats["tokens"]) for split, stats in ontogum_stats.items()}
    assert counts == {"train": (177, 177410), "dev": (30, 28119), "test": (30, 28397), "test2": (26, 17799)}
    assert all(stats["sentences"] > 10 * stats["documents"] for stats in ontogum_stats.values())  # from CoNLL-U
    # GENTLE_poetry_road's two broken brackets (test2); dev's problem is the empty word of GUM_news_iodine,
    # repaired from the CoNLL-U, not dropped. (Crossing mentions are read as annotated: preprocessing drops them.)
    dropped = {split: (stats["dropped"], stats["problems"]) for split, stats in ontogum_stats.items()}
    assert dropped == {"train": (0, 0), "dev": (0, 1), "test": (0, 0), "test2": (2, 2)}
    _assert_problems_are_located(ontogum_stats, ontogum_dir)


def test_ontogum_test2_reports_the_known_annotation_error(ontogum_stats):
    """GENTLE_poetry_road opens (2 and closes 3): one broken mention, two bracket problems (SOURCE.md)."""
    problems = ontogum_stats["test2"]["problem_list"]
    assert len(problems) == 2
    assert any("GENTLE_poetry_road.conll:11: '(2' opens" in problem for problem in problems)
    assert any("GENTLE_poetry_road.conll:21: '3)' closes" in problem for problem in problems)


def test_strict_makes_the_ontogum_annotation_error_fatal(ontogum_dir, capsys):
    argv = ["stats", "--corpus", "ontogum", "--split", "test2", "--data-dir", str(ontogum_dir.parent), "--strict"]
    assert main(argv) == 2
    assert "GENTLE_poetry_road.conll:21:" in capsys.readouterr().err


def test_litbank_plus_ontogum_concatenates_both(litbank_dir, ontogum_dir):
    assert litbank_dir.parent == ontogum_dir.parent
    litbank = load_corpus("litbank", "dev", litbank_dir.parent)
    ontogum = load_corpus("ontogum", "dev", ontogum_dir.parent)
    both = load_corpus("litbank+ontogum", "dev", litbank_dir.parent)
    assert (both.name, both.split) == ("litbank+ontogum", "dev")
    assert both.documents == litbank.documents + ontogum.documents
    assert both.problems == litbank.problems + ontogum.problems
    assert len({document.key for document in both.documents}) == 40


def test_gum_splits_md_gives_the_ontogum_split_table(ontogum_dir):
    table = parse_gum_splits((ontogum_dir / "splits.md").read_text(), "splits.md")
    public = {split: [name for name in names if not name.startswith("GUM_reddit_")] for split, names in table.items()}
    expected = parse_split_table((ontogum_dir / "splits.tsv").read_text(), "splits.tsv")
    assert {split: sorted(names) for split, names in public.items()} == {
        split: sorted(names) for split, names in expected.items()
    }


def test_the_packaged_litbank_protocol_is_the_shared_split_table(litbank_dir):
    packaged = (ROOT / "coref" / "corpora" / "data" / "litbank_splits.tsv").read_text()
    assert packaged == (litbank_dir / "splits.tsv").read_text()


# ---- download ------------------------------------------------------------------------------------------------

# a few documents of each split (their real splits), to mirror and download
LITBANK_FEW = {
    "train": ["158_emma_brat"],
    "dev": ["120_treasure_island_brat"],
    "test": ["174_the_picture_of_dorian_gray_brat"],
}
ONTOGUM_FEW = {
    "train": ["GUM_whow_quinoa"],
    "dev": ["GUM_news_iodine"],
    "test": ["GUM_bio_dvorak"],
    "test2": ["GENTLE_poetry_road"],
}


def _upstream_path(mirror: Path, upstream, path: str) -> Path:
    target = mirror / upstream.owner / upstream.repo / upstream.commit / path
    target.parent.mkdir(parents=True, exist_ok=True)
    return target


def _litbank_mirror(mirror: Path, litbank_dir: Path) -> None:
    for name in (name for names in LITBANK_FEW.values() for name in names):
        target = _upstream_path(mirror, LITBANK, f"coref/conll/{name}.conll")
        shutil.copyfile(litbank_dir / "conll" / f"{name}.conll", target)


def _ontogum_mirror(mirror: Path, ontogum_dir: Path) -> None:
    """The upstream layout for a few documents, and a splits.md listing them plus a Reddit one (not mirrored)."""
    lines = ["# Splits", ""]
    for split, names in ONTOGUM_FEW.items():
        lines += [f"## {split}", "", *(f"  * {name}" for name in names), "  * GUM_reddit_withheld", ""]
        for name in names:
            for kind in ("conll", "conllu"):
                source = ontogum_dir / kind / f"{name}.{kind}"
                shutil.copyfile(source, _upstream_path(mirror, ONTOGUM, f"coref/ontogum/{kind}/{name}.{kind}"))
    _upstream_path(mirror, ONTOGUM, "splits.md").write_text("\n".join(lines))


def test_download_from_a_mirror_gives_the_loader_layout(litbank_dir, ontogum_dir, tmp_path, monkeypatch):
    mirror, target = tmp_path / "mirror", tmp_path / "data"
    _litbank_mirror(mirror, litbank_dir)
    _ontogum_mirror(mirror, ontogum_dir)
    monkeypatch.setattr(corpora, "litbank_split_table", lambda: LITBANK_FEW)
    for corpus in ("litbank", "ontogum"):
        assert main(["download", corpus, "--to", str(target), "--mirror", mirror.as_uri()]) == 0
    assert not list(target.rglob("*.part"))
    assert not list(target.rglob("GUM_reddit_*"))
    for corpus, few in (("litbank", LITBANK_FEW), ("ontogum", ONTOGUM_FEW)):
        assert parse_split_table((target / corpus / "splits.tsv").read_text(), "splits.tsv") == few
        for split, names in few.items():
            downloaded = load_corpus(corpus, split, target)
            shared = {document.id: document for document in load_corpus(corpus, split, litbank_dir.parent).documents}
            assert downloaded.documents == tuple(shared[name] for name in names)


def test_an_interrupted_download_leaves_whole_files_and_resumes(litbank_dir, tmp_path, monkeypatch):
    mirror, target = tmp_path / "mirror", tmp_path / "data"
    _litbank_mirror(mirror, litbank_dir)
    monkeypatch.setattr(corpora, "litbank_split_table", lambda: LITBANK_FEW)
    copy = shutil.copyfileobj

    def connection_lost_in_dorian_gray(source, target_file):
        if "dorian_gray" in source.url:
            target_file.write(source.read(100))
            raise ConnectionResetError("connection reset by peer")
        copy(source, target_file)

    monkeypatch.setattr(corpora.shutil, "copyfileobj", connection_lost_in_dorian_gray)
    argv = ["download", "litbank", "--to", str(target), "--mirror", mirror.as_uri()]
    assert main(argv) == 2
    fetched = sorted(path.name for path in target.rglob("*") if path.is_file())
    assert fetched == ["120_treasure_island_brat.conll", "158_emma_brat.conll"]  # whole files, no .part, no table
    monkeypatch.setattr(corpora.shutil, "copyfileobj", copy)
    assert main(argv) == 0
    assert [d.id for d in load_corpus("litbank", "test", target).documents] == LITBANK_FEW["test"]


@pytest.mark.parametrize("mirror", ["file:///nonexistent/entitylm-mirror", "http://127.0.0.1:9"])
def test_unreachable_mirror_is_one_line_and_leaves_no_partial_file(mirror, tmp_path, capsys):
    assert main(["download", "ontogum", "--to", str(tmp_path), "--mirror", mirror]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot fetch" in err and "--mirror" in err
    assert not [path for path in tmp_path.rglob("*") if path.is_file()]


def test_stats_preprocess_reports_what_the_paper_preprocessing_removes(tmp_path, capsys):
    out = tmp_path / "stats.json"
    assert main(["stats", "--corpus", "sample", "--split", "test", "--preprocess", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())["splits"]["test"]["preprocessing"]
    expected = preprocess_documents(load_corpus("sample", "test").documents)[1]
    assert report == expected.to_dict()
    assert report["tokens_before"] == 153 and 0 < report["punctuation_dropped"] == 153 - report["tokens_after"]
    assert report["singletons_dropped"] > 0 and report["nested_mentions_dropped"] > 0
    assert expected.summary() in printed
