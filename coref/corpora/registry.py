"""Named coreference corpora and their splits: loading, counting, and fetching the public ones.

A corpus is a name and a split:

- ``sample`` (train, dev, test): ten short stories written for this project and shipped inside the package
  (``coref/corpora/data/SAMPLE.md``), so that every command runs without downloading anything;
- ``litbank`` (train, dev, test): LitBank (Bamman et al. 2020), the openings of 100 novels, singletons
  annotated, split 80/10/10 by our fixed protocol table ``coref/corpora/data/litbank_splits.tsv``;
- ``ontogum`` (train, dev, test, test2): OntoGUM (Zhu et al. 2021), GUM in the OntoNotes scheme, with GUM's
  own splits and the out-of-domain GENTLE documents as test2; sentence boundaries come from the CoNLL-U files;
- ``conll2012`` (train, dev, test): the CoNLL-2012 shared task data, which is licensed (LDC): bring your own;
- ``inscript`` (train, dev, test): InScript (Modi et al. 2016), 910 crowdsourced script stories, split 637/91/182
  by the JSON table that came with it; its labels and chains become mentions as :mod:`coref.corpora.inscript` says.

Every corpus but ``sample`` lives under a data directory (``--data-dir`` or ``ENTITYLM_DATA``), in the layout
that ``python -m coref.corpora download`` writes::

    DATA/litbank/splits.tsv   DATA/litbank/conll/NAME.conll
    DATA/ontogum/splits.tsv   DATA/ontogum/conll/NAME.conll   DATA/ontogum/conllu/NAME.conllu
    DATA/conll2012/train/ development/ test/   (*_conll files at any depth; *_gold_conll preferred)
    DATA/inscript/splits/modi_split_637_91_182.json   DATA/inscript/corpus/SCENARIO/STORY.xml   (copied by hand)

``"litbank+ontogum"`` names the concatenation of several corpora. Files are read leniently by default: a
malformed mention is dropped and reported in :attr:`Corpus.problems`, so that one annotation error does not
stop a whole-corpus run; ``strict=True`` makes it an error instead.

Its command is :mod:`inference.commands.corpora` (``python -m coref.corpora stats|download``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.resources import as_file, files
from pathlib import Path

from coref.corpora.inscript import InscriptError, LabelCounts, read_story
from coref.corpora.preprocess import PreprocessReport, preprocess_documents
from coref.document import Document
from coref.io.atomic import atomic_path, write_text_atomic
from coref.io.conll import Problem, read_conll, read_utf8
from coref.io.progress import progress
from coref.io.text import tokenize

DATA_ENV = "ENTITYLM_DATA"
RAW_GITHUB = "https://raw.githubusercontent.com"
SPLITS = {
    "sample": ("train", "dev", "test"),
    "litbank": ("train", "dev", "test"),
    "ontogum": ("train", "dev", "test", "test2"),
    "conll2012": ("train", "dev", "test"),
    "inscript": ("train", "dev", "test"),
}
SPLIT_ALIASES = {"development": "dev"}  # the CoNLL-2012 folder name
CONLL2012_FOLDERS = {"train": "train", "dev": "development", "test": "test"}
DOWNLOAD_HINT = "python -m coref.corpora download {corpus} --to {folder}"
DataDir = str | os.PathLike | None


class CorpusError(ValueError):
    """A corpus that cannot be loaded or fetched as asked; the one-line message says why and what to do."""


@dataclass(frozen=True)
class Upstream:
    """A public GitHub repository pinned to the commit named in the data's SOURCE.md."""

    owner: str
    repo: str
    commit: str

    def url(self, path: str, mirror: str = RAW_GITHUB) -> str:
        """The raw file ``path`` of the pinned commit; ``mirror`` replaces ``https://raw.githubusercontent.com``."""
        return f"{mirror.rstrip('/')}/{self.owner}/{self.repo}/{self.commit}/{path}"


LITBANK = Upstream("dbamman", "litbank", "3e50db0ffc033d7ccbb94f4d88f6b99210328ed8")
ONTOGUM = Upstream("amir-zeldes", "gum", "72ce5ac14978a324c2fd18d49484e65292cbe316")


@dataclass(frozen=True)
class Corpus:
    """The documents of one split of a named corpus, and the problems the lenient reader worked around."""

    name: str
    split: str
    documents: tuple[Document, ...]
    problems: tuple[Problem, ...] = ()


# ---- names, splits, data directory --------------------------------------------------------------------------


def corpus_names(name: str) -> list[str]:
    """The corpora that ``name`` joins with ``+``, each checked to exist."""
    names = name.split("+")
    for part in names:
        if part not in SPLITS:
            raise CorpusError(f"unknown corpus {part!r}: choose from {', '.join(SPLITS)} (join several with '+')")
    return names


def available_splits(name: str) -> tuple[str, ...]:
    """The splits of a corpus; of a ``+`` concatenation, the splits all its corpora have."""
    names = corpus_names(name)
    return tuple(split for split in SPLITS[names[0]] if all(split in SPLITS[other] for other in names))


def canonical_split(name: str, split: str) -> str:
    """``split`` as ``name`` calls it (``development`` is ``dev``), or an error listing the valid splits."""
    split = SPLIT_ALIASES.get(split, split)
    valid = available_splits(name)
    if split not in valid:
        raise CorpusError(f"unknown split {split!r} of corpus {name!r}: choose from {', '.join(valid)}")
    return split


def resolve_data_dir(data_dir: DataDir = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$ENTITYLM_DATA``; it must be an existing folder."""
    source = "--data-dir" if data_dir is not None else DATA_ENV
    value = os.fspath(data_dir) if data_dir is not None else os.environ.get(DATA_ENV, "")
    if not value:
        raise CorpusError(
            f"no data directory: pass --data-dir DIR or set {DATA_ENV}=DIR; fetch the public corpora with "
            f"`{DOWNLOAD_HINT.format(corpus='litbank', folder='DIR')}` (and likewise ontogum)"
        )
    path = Path(value).expanduser()
    if not path.is_dir():
        raise CorpusError(
            f"data directory {path} (from {source}) is not an existing folder; fetch the public corpora with "
            f"`{DOWNLOAD_HINT.format(corpus='litbank', folder=path)}` (and likewise ontogum)"
        )
    return path


# ---- split tables -------------------------------------------------------------------------------------------


def parse_split_table(text: str, source: str) -> dict[str, list[str]]:
    """Documents by split from a ``document<TAB>split`` table with that header line, in file order."""
    lines = text.splitlines()
    if not lines or lines[0].split("\t") != ["document", "split"]:
        raise CorpusError(f"{source}:1: expected the header line 'document<TAB>split'")
    table: dict[str, list[str]] = {}
    seen: set[str] = set()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 2 or not all(fields):
            raise CorpusError(f"{source}:{number}: expected 'document<TAB>split', got {line!r}")
        document, split = fields
        if document in seen:
            raise CorpusError(f"{source}:{number}: document {document!r} is listed twice")
        seen.add(document)
        table.setdefault(split, []).append(document)
    return table


def format_split_table(table: dict[str, list[str]]) -> str:
    """The ``document<TAB>split`` table of ``table``, rows sorted by document name."""
    rows = sorted((document, split) for split, documents in table.items() for document in documents)
    return "document\tsplit\n" + "".join(f"{document}\t{split}\n" for document, split in rows)


def litbank_split_table() -> dict[str, list[str]]:
    """Our LitBank protocol: which of the 100 documents is in train, dev and test (package data)."""
    resource = files("coref.corpora") / "data" / "litbank_splits.tsv"
    return parse_split_table(resource.read_text(encoding="utf-8"), "coref/corpora/data/litbank_splits.tsv")


# ---- loading ------------------------------------------------------------------------------------------------


def _corpus_root(data_dir: DataDir, corpus: str) -> tuple[Path, dict[str, list[str]]]:
    """The corpus folder under the data directory and its split table, or an error saying how to fetch it."""
    base = resolve_data_dir(data_dir)
    table_path = base / corpus / "splits.tsv"
    if not table_path.is_file():
        raise CorpusError(
            f"corpus {corpus!r} not found: {table_path} does not exist; "
            f"fetch it with `{DOWNLOAD_HINT.format(corpus=corpus, folder=base)}`"
        )
    return base / corpus, parse_split_table(read_utf8(table_path), str(table_path))


def _split_documents(root: Path, table: dict[str, list[str]], split: str) -> list[str]:
    if not table.get(split):
        raise CorpusError(f"{root / 'splits.tsv'} lists no document of split {split!r}")
    return table[split]


def _read_files(sources: Sequence[tuple[Path, Path | None]], strict: bool) -> tuple[list[Document], list[Problem]]:
    """Read each (CoNLL file, aligned CoNLL-U file or None), in order, pooling documents and problems."""
    documents: list[Document] = []
    problems: list[Problem] = []
    for path, conllu in sources:
        if not path.is_file():
            raise CorpusError(f"{path} is missing: the corpus is incomplete; fetch it again")
        read, dropped = read_conll(path, strict=strict, conllu=conllu)
        documents.extend(read)
        problems.extend(dropped)
    return documents, problems


def _load_sample(split: str, data_dir: DataDir, strict: bool) -> tuple[list[Document], list[Problem]]:
    with as_file(files("coref.corpora") / "data" / f"sample_{split}.conll") as path:
        return _read_files([(path, None)], strict)


def _load_litbank(split: str, data_dir: DataDir, strict: bool) -> tuple[list[Document], list[Problem]]:
    root, table = _corpus_root(data_dir, "litbank")
    names = _split_documents(root, table, split)
    return _read_files([(root / "conll" / f"{name}.conll", None) for name in names], strict)


def _load_ontogum(split: str, data_dir: DataDir, strict: bool) -> tuple[list[Document], list[Problem]]:
    """OntoGUM's conll/ files have no sentence breaks: the aligned conllu/ file gives them where present."""
    root, table = _corpus_root(data_dir, "ontogum")
    sources = []
    for name in _split_documents(root, table, split):
        conllu = root / "conllu" / f"{name}.conllu"
        sources.append((root / "conll" / f"{name}.conll", conllu if conllu.is_file() else None))
    return _read_files(sources, strict)


CONLL2012_FILE = re.compile(r"(?P<stem>.+?)(?:_(?P<kind>gold|auto))?_conll")


def conll2012_files(folder: Path) -> list[Path]:
    """The ``*_conll`` files at any depth under ``folder``, one per document: ``*_gold_conll`` where present."""
    chosen: dict[Path, Path] = {}
    for path in sorted(folder.rglob("*_conll")):
        match = CONLL2012_FILE.fullmatch(path.name)
        key = path.parent / match["stem"]
        if key not in chosen or match["kind"] == "gold":
            chosen[key] = path
    return sorted(chosen.values())


def _load_conll2012(split: str, data_dir: DataDir, strict: bool) -> tuple[list[Document], list[Problem]]:
    folder = resolve_data_dir(data_dir) / "conll2012" / CONLL2012_FOLDERS[split]
    paths = conll2012_files(folder) if folder.is_dir() else []
    if not paths:
        raise CorpusError(
            f"corpus 'conll2012' not found: no *_conll file under {folder}; the CoNLL-2012 shared task data "
            f"(OntoNotes 5.0, LDC2013T19) is licensed and cannot be downloaded here: put your copy's "
            f"train/, development/ and test/ folders under {folder.parent}"
        )
    return _read_files([(path, None) for path in paths], strict)


INSCRIPT_SPLITS = Path("inscript") / "splits" / "modi_split_637_91_182.json"


def inscript_split_ids(data_dir: DataDir, split: str) -> tuple[Path, list[str]]:
    """The InScript corpus folder and the story ids (``bath_001``) of ``split``, from the split JSON table."""
    base = resolve_data_dir(data_dir)
    table_path = base / INSCRIPT_SPLITS
    if not table_path.is_file():
        raise CorpusError(
            f"corpus 'inscript' not found: {table_path} does not exist; InScript is not downloadable here: "
            f"put its corpus/ folder and that split table under {base / 'inscript'} (see its SOURCE.md)"
        )
    try:
        ids = json.loads(read_utf8(table_path))[split]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise CorpusError(f"{table_path}: expected a JSON object mapping {split!r} to a list of story ids") from error
    if not ids:
        raise CorpusError(f"{table_path} lists no story of split {split!r}")
    return base / "inscript", ids


def load_inscript(split: str, data_dir: DataDir = None) -> tuple[list[Document], LabelCounts]:
    """The stories of one InScript split, in the table's order, and what the reader did with their labels."""
    root, ids = inscript_split_ids(data_dir, split)
    documents: list[Document] = []
    counts = LabelCounts()
    for story in ids:
        path = root / "corpus" / story.rsplit("_", 1)[0] / f"{story}.xml"
        if not path.is_file():
            raise CorpusError(f"{path} is missing: the InScript corpus is incomplete")
        try:
            document, story_counts = read_story(path, story)
        except InscriptError as error:
            raise CorpusError(str(error)) from error
        documents.append(document)
        counts += story_counts
    return documents, counts


def _load_inscript(split: str, data_dir: DataDir, strict: bool) -> tuple[list[Document], list[Problem]]:
    """InScript has no lenient mode: a story the reader cannot use is an error whatever ``strict`` says."""
    return load_inscript(split, data_dir)[0], []


Loader = Callable[[str, DataDir, bool], tuple[list[Document], list[Problem]]]
LOADERS: dict[str, Loader] = {
    "sample": _load_sample,
    "litbank": _load_litbank,
    "ontogum": _load_ontogum,
    "conll2012": _load_conll2012,
    "inscript": _load_inscript,
}


def concatenate(corpora: Sequence[Corpus]) -> Corpus:
    """One corpus holding the documents of all, in order; a document key (id, part) may occur only once."""
    seen: dict[tuple[str, int], str] = {}
    for corpus in corpora:
        for document in corpus.documents:
            if document.key in seen:
                raise CorpusError(
                    f"document {document.id!r} part {document.part} occurs in both {seen[document.key]!r} "
                    f"and {corpus.name!r}: document ids must be unique in a concatenation"
                )
            seen[document.key] = corpus.name
    return Corpus(
        name="+".join(corpus.name for corpus in corpora),
        split=corpora[0].split,
        documents=tuple(document for corpus in corpora for document in corpus.documents),
        problems=tuple(problem for corpus in corpora for problem in corpus.problems),
    )


def load_corpus(name: str, split: str, data_dir: DataDir = None, *, strict: bool = False) -> Corpus:
    """One split of a named corpus (or of a ``+`` concatenation), read from the data directory.

    ``data_dir`` defaults to ``$ENTITYLM_DATA``; ``sample`` needs none. Leniently (the default) malformed
    mentions are dropped and listed in ``problems``; with ``strict=True`` the first problem raises
    :class:`coref.io.conll.ConllError`, naming its file and line.
    """
    split = canonical_split(name, split)
    parts = []
    for part in corpus_names(name):
        documents, problems = LOADERS[part](split, data_dir, strict)
        parts.append(Corpus(part, split, tuple(documents), tuple(problems)))
    return concatenate(parts)


# ---- counts -------------------------------------------------------------------------------------------------


def joined_text(name: str, split: str, data_dir: DataDir = None, words: int | None = None) -> str:
    """A long plain text made of a corpus split's documents end to end: a book-length input for
    :mod:`coref.resolution.pipeline` (tests, benchmarks of long documents).

    Detokenised simply: the tokens of a sentence joined by spaces, one line per sentence, a blank line between
    documents. With ``words``, the text is exactly that many tokens as :func:`coref.io.text.tokenize` reads it (the
    tokens the pipeline sees; it splits a few corpus tokens, e.g. at hyphens), the documents repeated from the
    first as often as needed and the last one cut, mid-sentence if need be.
    """
    documents = load_corpus(name, split, data_dir).documents
    if not documents:
        raise CorpusError(f"{name} {split}: no documents to join")
    if words is None:
        return _joined(documents, sum(len(document.tokens) for document in documents))
    if words < 1:
        raise ValueError(f"words must be at least 1, got {words}")
    budget = words  # corpus tokens; the tokeniser reads at least as many, unless some are only whitespace
    while True:
        text = _joined(documents, budget)
        offsets = tokenize(text).offsets
        if len(offsets) >= words:
            return text[: offsets[words - 1][1]] + "\n"
        budget += words - len(offsets)


def _joined(documents: Sequence[Document], budget: int) -> str:
    """The first ``budget`` corpus tokens of ``documents`` repeated end to end, as :func:`joined_text` writes
    them."""
    total = sum(len(document.tokens) for document in documents)
    paragraphs = []
    for k in range(-(-budget // total) * len(documents)):
        document = documents[k % len(documents)]
        paragraphs.append("\n".join(" ".join(document.tokens[start : min(end, budget)])
                                    for start, end in document.sentences if start < budget))
        budget -= len(document.tokens)
        if budget <= 0:
            break
    return "\n\n".join(paragraphs) + "\n"


def corpus_stats(corpus: Corpus) -> dict[str, int]:
    """Sizes as read from the files, before any preprocessing, and how many problems the reader worked around.

    ``dropped`` counts malformed mentions the reader dropped (a broken bracket); one mention
    whose open and close brackets disagree is two (an open never closed, a close never opened). ``problems``
    also counts the empty words taken from the CoNLL-U file.
    """
    documents = corpus.documents
    return {
        "documents": len(documents),
        "sentences": sum(len(document.sentences) for document in documents),
        "tokens": sum(len(document.tokens) for document in documents),
        "mentions": sum(len(document.mentions) for document in documents),
        "entities": sum(len(document.entities()) for document in documents),
        "dropped": sum(problem.dropped_mention for problem in corpus.problems),
        "problems": len(corpus.problems),
    }


def format_stats(name: str, corpora: Sequence[Corpus]) -> str:
    """A table of :func:`corpus_stats`, one row per split."""
    rows = [[corpus.split, *(f"{value:,}" for value in corpus_stats(corpus).values())] for corpus in corpora]
    header = ["split", *corpus_stats(corpora[0])]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"corpus {name}"]
    for row in [header, *rows]:
        lines.append("  ".join([row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:]))]))
    return "\n".join(lines)


def dropped_report(corpus: Corpus, preprocessing: PreprocessReport | None = None) -> str:
    """What was dropped or changed between the files and the documents of one split: every problem the lenient
    reader worked around (a malformed mention dropped, such as an unpaired bracket), as ``FILE:LINE: reason``,
    then what preprocessing changed (crossing, long and nested mentions, singletons, ...) when it ran.
    ``coref.corpora.registry stats`` prints it under its table, the commands that run models on stderr; empty when there
    is nothing to say."""
    where = f"{corpus.name}/{corpus.split}"
    lines = []
    if corpus.problems:
        dropped = sum(problem.dropped_mention for problem in corpus.problems)
        lines.append(f"{where}: {len(corpus.problems)} problem(s) worked around by the lenient reader, "
                     f"{dropped} malformed mention(s) dropped:")
        lines.extend(f"  {problem}" for problem in corpus.problems)
    if preprocessing is not None:
        lines.append(f"{where}: preprocessing: {preprocessing.summary()}")
    return "\n".join(lines)


def stats_json(name: str, corpora: Sequence[Corpus]) -> dict:
    """The numbers of :func:`format_stats`, per split, with the problems as ``file:line: reason`` strings."""
    return {
        "corpus": name,
        "splits": {
            corpus.split: {**corpus_stats(corpus), "problem_list": [str(problem) for problem in corpus.problems]}
            for corpus in corpora
        },
    }


def corpus_summary(name: str, split: str | None = None, data_dir: DataDir = None, *, strict: bool = False,
                   preprocess: bool = False) -> tuple[dict, str]:
    """The numbers of one split (or, with ``split=None``, of every split the corpus has) as read from the files,
    as JSON (:func:`stats_json`, with each split's preprocessing report when ``preprocess``) and as the text
    ``python -m coref.corpora stats`` prints: the table, then every problem the lenient reader worked around
    (:func:`dropped_report`)."""
    splits = [canonical_split(name, split)] if split else list(available_splits(name))
    corpora = [load_corpus(name, one, data_dir, strict=strict) for one in splits]
    result = stats_json(name, corpora)
    lines = [format_stats(name, corpora)]
    for corpus in corpora:
        report = preprocess_documents(corpus.documents)[1] if preprocess else None
        lines.append(dropped_report(corpus, report))
        if report is not None:
            result["splits"][corpus.split]["preprocessing"] = report.to_dict()
    return result, "\n".join(line for line in lines if line)


# ---- download -----------------------------------------------------------------------------------------------


def fetch(url: str, path: Path) -> None:
    """Copy ``url`` to ``path`` atomically, so that an interrupted fetch leaves no partial file."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response, atomic_path(path) as partial:
            with open(partial, "wb") as out:
                shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", error)
        message = f"cannot fetch {url}: {reason}; check the network connection or pass --mirror URL"
        raise CorpusError(message) from error


def fetch_all(downloads: Sequence[tuple[str, Path]], description: str) -> None:
    """Fetch every (url, path) whose path does not exist yet (a re-run resumes an interrupted download)."""
    for url, path in progress(downloads, desc=f"{description}: downloading", unit="file"):
        if not path.exists():
            fetch(url, path)


def parse_gum_splits(text: str, source: str) -> dict[str, list[str]]:
    """Documents by split from GUM's ``splits.md``: a ``## split`` heading, then ``  * DOCUMENT`` items."""
    table: dict[str, list[str]] = {}
    split = None
    for line in text.splitlines():
        if heading := re.fullmatch(r"##\s+(\S+)\s*", line):
            split = heading[1]
            table[split] = []
        elif (item := re.fullmatch(r"\s*\*\s+(\S+)\s*", line)) and split is not None:
            table[split].append(item[1])
    if not table.keys() >= set(SPLITS["ontogum"]):
        expected, found = ", ".join(SPLITS["ontogum"]), ", ".join(table) or "none"
        raise CorpusError(f"{source}: expected the sections {expected}, found {found}")
    return table


def download_litbank(to: Path, mirror: str = RAW_GITHUB) -> dict[str, list[str]]:
    """LitBank's 100 CoNLL files into ``to/litbank/conll``, and our split table as ``to/litbank/splits.tsv``."""
    root = to / "litbank"
    table = litbank_split_table()
    names = [name for documents in table.values() for name in documents]
    downloads = [(LITBANK.url(f"coref/conll/{name}.conll", mirror), root / "conll" / f"{name}.conll") for name in names]
    fetch_all(downloads, "litbank")
    write_text_atomic(root / "splits.tsv", format_split_table(table))
    return table


def download_ontogum(to: Path, mirror: str = RAW_GITHUB) -> dict[str, list[str]]:
    """OntoGUM's CoNLL and CoNLL-U files and GUM's splits (Reddit documents left out: their text is withheld)."""
    root = to / "ontogum"
    splits_md = root / "splits.md"
    fetch(ONTOGUM.url("splits.md", mirror), splits_md)
    table = {
        split: [name for name in documents if not name.startswith("GUM_reddit_")]
        for split, documents in parse_gum_splits(read_utf8(splits_md), str(splits_md)).items()
        if split in SPLITS["ontogum"]
    }
    downloads = []
    for name in (name for documents in table.values() for name in documents):
        for kind in ("conll", "conllu"):
            url = ONTOGUM.url(f"coref/ontogum/{kind}/{name}.{kind}", mirror)
            downloads.append((url, root / kind / f"{name}.{kind}"))
    fetch_all(downloads, "ontogum")
    write_text_atomic(root / "splits.tsv", format_split_table(table))
    return table


DOWNLOADERS = {"litbank": download_litbank, "ontogum": download_ontogum}
