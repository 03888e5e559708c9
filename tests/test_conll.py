"""The CoNLL-2012-family reader and writer: the three dialects, every error with its file:line, the writer's
format, and the real LitBank and OntoGUM corpora (lossless round trips, the SOURCE.md counts, the known errors)."""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from pathlib import Path

import pytest

from coref.corpora.preprocess import PreprocessConfig, preprocess_documents
from coref.document import Document, Mention
from coref.io.conll import ConllError, Problem, format_conll, parse_conll, read_conll, write_conll

# ------------------------------------------------------------------------------------------ the dialects

SHARED_TASK = """\
#begin document (bc/cctv/00/cctv_0001); part 003
bc/cctv/00/cctv_0001   3   0   Mary    NNP   (TOP(S(NP*)   -   -   -   Speaker#1   (ARG0*)   (0)
bc/cctv/00/cctv_0001   3   1   saw     VBD   (VP*          see 01  1   Speaker#1   (V*)      -
bc/cctv/00/cctv_0001   3   2   her     PRP$  (NP(NP*       -   -   -   Speaker#1   (ARG1*    (1|(0)
bc/cctv/00/cctv_0001   3   3   friend  NN    *)            -   -   -   Speaker#1   *)        1)
bc/cctv/00/cctv_0001   3   4   .       .     *))           -   -   -   Speaker#1   *         -

bc/cctv/00/cctv_0001   3   0   She     PRP   (TOP(S(NP*)   -   -   -   Speaker#1   (ARG0*)   (0)
bc/cctv/00/cctv_0001   3   1   waved   VBD   (VP*)         -   -   -   Speaker#1   (V*)      -
bc/cctv/00/cctv_0001   3   2   .       .     *))           -   -   -   Speaker#1   *         -

#end document
"""


def test_shared_task_file_whitespace_columns_coreference_last():
    [document], problems = parse_conll(SHARED_TASK)
    assert problems == []
    assert document.key == ("bc/cctv/00/cctv_0001", 3)
    assert document.tokens == ("Mary", "saw", "her", "friend", ".", "She", "waved", ".")
    assert document.sentences == ((0, 5), (5, 8))
    assert document.mentions == (Mention(0, 1, 0), Mention(2, 3, 0), Mention(2, 4, 1), Mention(5, 6, 0))


def litbank_line(index: int, word: str, coreference: str) -> str:
    return "\t".join(["tale", "0", str(index), word, *["_"] * 8, coreference])


LITBANK = "\n".join(
    [
        "#begin document (tale); part 0",
        litbank_line(0, "Sir", "(0"),
        litbank_line(1, "Walter", "0)"),
        litbank_line(2, "and", ""),
        litbank_line(3, "his", "(0)|(1"),
        litbank_line(4, "daughters", "1)"),
        "",
        litbank_line(0, "wept", ""),
        "",
        "#end document",
        "",
    ]
)


def test_litbank_empty_last_field_is_no_mention():
    [document], problems = parse_conll(LITBANK)
    assert problems == []
    assert document.key == ("tale", 0)
    assert document.tokens == ("Sir", "Walter", "and", "his", "daughters", "wept")
    assert document.sentences == ((0, 5), (5, 6))
    assert document.mentions == (Mention(0, 2, 0), Mention(3, 4, 0), Mention(3, 5, 1))


ONTOGUM = """\
# begin document\x20
0\tThe\t(3(4)
1\tcity\t_
2\tand\t_
3\tits\t(5(4)
4\tport\t5)3)
5\t.\t_
6\tIt\t(3)
7\tgrew\t_
# end document
"""


def test_ontogum_back_to_back_brackets_file_stem_id_one_sentence():
    [document], problems = parse_conll(ONTOGUM, "corpus/GUM_news_port.conll")
    assert problems == []
    assert document.key == ("GUM_news_port", 0)
    assert document.tokens == ("The", "city", "and", "its", "port", ".", "It", "grew")
    assert document.sentences == ((0, 8),)
    assert document.mentions == (
        Mention(0, 1, 4),
        Mention(0, 5, 3),
        Mention(3, 4, 4),
        Mention(3, 5, 5),
        Mention(6, 7, 3),
    )


def write_conllu(path: Path, sentences: list[list[str]], extra_lines: dict[int, str] | None = None) -> Path:
    """A minimal CoNLL-U file; ``extra_lines`` inserts raw lines before the token of that (global) number."""
    lines, number, extra_lines = [], 0, extra_lines or {}
    for sentence in sentences:
        lines.append(f"# sent_id = s{len(lines)}")
        for index, form in enumerate(sentence, start=1):
            if number in extra_lines:
                lines.append(extra_lines[number])
            lines.append(f"{index}\t{form}\t_\t_\t_\t_\t0\t_\t_\t_")
            number += 1
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_ontogum_sentences_from_the_aligned_conllu(tmp_path):
    conll = tmp_path / "GUM_news_port.conll"
    conll.write_text(ONTOGUM, encoding="utf-8")
    sentences = [["The", "city", "and", "its", "port", "."], ["It", "grew"]]
    # a multiword-token range and an empty node are not syntactic words and must be skipped
    multiword, empty_node = "4-5\titsport" + "\t_" * 8, "6.1\tx" + "\t_" * 8
    conllu = write_conllu(tmp_path / "port.conllu", sentences, {3: multiword, 6: empty_node})
    [document], problems = read_conll(conll, conllu=conllu)
    assert problems == []
    assert document.sentences == ((0, 6), (6, 8))
    assert document.mentions == parse_conll(ONTOGUM)[0][0].mentions


@pytest.mark.parametrize(
    ("sentences", "line", "message"),
    [
        ([["The", "town", "and", "its", "port", "."], ["It", "grew"]], 3, r"'city' differs from 'town' at .*u:3"),
        ([["The", "city", "and", "its", "port", "."], ["It"]], 9, r"word 'grew' has no counterpart: .*\.conllu ends"),
    ],
)
def test_conllu_that_does_not_align_names_both_files(tmp_path, sentences, line, message):
    conll = tmp_path / "GUM_news_port.conll"
    conll.write_text(ONTOGUM, encoding="utf-8")
    conllu = write_conllu(tmp_path / "port.conllu", sentences)
    with pytest.raises(ConllError, match=message) as error:
        read_conll(conll, conllu=conllu)
    assert (error.value.path, error.value.line) == (str(conll), line)
    assert str(error.value).startswith(f"{conll}:{line}: ")


def test_conllu_with_extra_words_is_located_in_the_conllu(tmp_path):
    conll = tmp_path / "GUM_news_port.conll"
    conll.write_text(ONTOGUM, encoding="utf-8")
    conllu = write_conllu(tmp_path / "port.conllu", [["The", "city", "and", "its", "port", "."], ["It", "grew", "."]])
    message = rf"^{re.escape(str(conllu))}:12: word '\.' has no counterpart: .*GUM_news_port\.conll ends"
    with pytest.raises(ConllError, match=message):
        read_conll(conll, conllu=conllu)


def test_malformed_conllu_line_is_located_in_the_conllu(tmp_path):
    conll = tmp_path / "GUM_news_port.conll"
    conll.write_text(ONTOGUM, encoding="utf-8")
    conllu = write_conllu(tmp_path / "port.conllu", [["The"]], {0: "one\tThe"})
    with pytest.raises(ConllError, match=rf"^{re.escape(str(conllu))}:2: not a CoNLL-U token line"):
        read_conll(conll, conllu=conllu)


def test_document_starting_inside_a_conllu_sentence(tmp_path):
    conll = tmp_path / "two.conll"
    conll.write_text(
        "#begin document (a); part 0\n0\tHi\t-\n#end document\n#begin document (b); part 0\n0\tyou\t-\n#end document\n"
    )
    conllu = write_conllu(tmp_path / "two.conllu", [["Hi", "you"]])
    message = rf"^{re.escape(str(conll))}:4: document 'b' starts inside the sentence at .*two\.conllu:3"
    with pytest.raises(ConllError, match=message):
        read_conll(conll, conllu=conllu)


def test_empty_word_is_taken_from_the_conllu_and_reported(tmp_path):
    conll = tmp_path / "pipe.conll"
    conll.write_text("# begin document \n0\ta\t(1)\n1\t\t_\n2\tb\t(1)\n# end document\n", encoding="utf-8")
    conllu = write_conllu(tmp_path / "pipe.conllu", [["a", "|", "b"]])
    [document], problems = read_conll(conll, conllu=conllu)
    assert document.tokens == ("a", "|", "b")
    assert [str(problem) for problem in problems] == [f"{conll}:3: empty word; taking '|' from {conllu}:3"]
    with pytest.raises(ConllError, match=rf"^{re.escape(str(conll))}:3: empty word"):
        read_conll(conll, conllu=conllu, strict=True)
    assert parse_conll(conll.read_text())[0][0].tokens == ("a", "", "b")  # without the CoNLL-U it stays empty


# ---------------------------------------------------------------------------------- bracket semantics


def one_document(*fields: str) -> str:
    """A 3-column document whose token i has coreference field ``fields[i]``."""
    rows = [f"{index}\tw{index}\t{field}" for index, field in enumerate(fields)]
    return "\n".join(["#begin document (d); part 0", *rows, "#end document", ""])


def mentions_of(*fields: str, strict: bool = True) -> tuple[Mention, ...]:
    [document], _ = parse_conll(one_document(*fields), strict=strict)
    return document.mentions


def test_nested_mentions_of_one_entity_pair_like_parentheses():
    assert mentions_of("(1", "(1", "1)", "1)") == (Mention(0, 4, 1), Mention(1, 3, 1))
    assert mentions_of("(1|(1", "1)", "-", "1)") == (Mention(0, 2, 1), Mention(0, 4, 1))


def test_one_token_mentions_come_before_opens_and_closes_as_in_the_scorer():
    assert mentions_of("(1", "(1)|1)") == (Mention(0, 2, 1), Mention(1, 2, 1))
    assert mentions_of("(2|2)") == (Mention(0, 1, 2),)  # open and close of one entity on one token: one-token


def test_everything_annotated_is_kept():
    # the same span in two entities, and a duplicate mention
    assert mentions_of("(1)|(2)", "(1)|(1)") == (Mention(0, 1, 1), Mention(0, 1, 2), Mention(1, 2, 1), Mention(1, 2, 1))


# ---------------------------------------------------------------------------------------------- errors

BROKEN_MENTIONS = [
    # (coreference fields, line reported, reason, mentions that survive in lenient mode)
    (("(1", "-", "-"), 2, "'(1' opens a mention of entity 1 that is never closed (document ends at line 5)", ()),
    (("(1)", "-", "2)"), 4, "'2)' closes a mention of entity 2 that was never opened", (Mention(0, 1, 1),)),
    (("(1)", "(1x", "-"), 3, "cannot parse coreference field '(1x'", (Mention(0, 1, 1),)),
    (("(1)", "(1+2)", "-"), 3, "cannot parse coreference field '(1+2)'", (Mention(0, 1, 1),)),
]


def test_crossing_mentions_are_kept_as_annotated():
    # Entity 1 spans tokens 0-1, entity 2 tokens 1-2: they cross. The official scorer reads both, and so do we;
    # the model's preprocessing drops one (coref.corpora.preprocess.drop_crossing).
    [document], problems = parse_conll(one_document("(1", "(2|1)", "2)"), "x.conll", strict=True)
    assert document.mentions == (Mention(0, 2, 1), Mention(1, 3, 2)) and problems == []


@pytest.mark.parametrize(("fields", "line", "reason", "survivors"), BROKEN_MENTIONS)
def test_broken_mention_raises_in_strict_mode_with_file_and_line(fields, line, reason, survivors):
    with pytest.raises(ConllError) as error:
        parse_conll(one_document(*fields), "broken.conll", strict=True)
    assert str(error.value).startswith(f"broken.conll:{line}: {reason}")
    assert (error.value.path, error.value.line) == ("broken.conll", line)


@pytest.mark.parametrize(("fields", "line", "reason", "survivors"), BROKEN_MENTIONS)
def test_broken_mention_is_dropped_and_reported_in_lenient_mode(fields, line, reason, survivors):
    [document], [problem] = parse_conll(one_document(*fields), "broken.conll")
    assert (problem.path, problem.line, problem.document) == ("broken.conll", line, "d")
    assert str(problem).startswith(f"broken.conll:{line}: {reason}")
    assert document.mentions == survivors


def test_close_without_open_then_unclosed_open_each_reported_where_they_are():
    [document], problems = parse_conll(one_document("(7", "(8)", "-", "8)"), "x.conll")
    assert [(problem.line, problem.reason.split()[0]) for problem in problems] == [(5, "'8)'"), (2, "'(7'")]
    assert document.mentions == (Mention(1, 2, 8),)


STRUCTURAL_ERRORS = [
    ("#begin document (d); part 0\n#end document\n", 1, "document 'd' is empty"),
    ("#begin document (d); part 0\n\n\n#end document\n", 1, "document 'd' is empty"),
    ("#begin document (d); part 0\n0\tw\t0\t_\n#end document\n", 2, "too few columns (4): expected 2"),
    ("#begin document (d); part 0\n(1)\n#end document\n", 2, "too few columns (1): expected 2"),
    ("", 1, "no documents ('#begin document' ... '#end document'): empty file?"),
    ("\n\n", 2, "no documents"),
    ("#begin document (d); part 0\nd 0 0 a _ _ (1)\nd 0 1 b _\n#end document\n", 3, "too few columns (5): the"),
    ("#begin document (d); part 0\n0\tw\t_\n", 1, "'#begin document' without '#end document' (file ends at line 2)"),
    ("#begin document (d); part 0\n0\tw\t_\n#begin document (e); part 0\n", 1, "'#begin document' without '#end"),
    ("#begin document (d); part 0\n0\tw\t_\n#end document\n#end document\n", 4, "'#end document' without '#begin"),
    ("0\tw\t_\n#begin document (d); part 0\n0\tw\t_\n#end document\n", 1, "text outside a document"),
    ("#begin document (d); part 0\n0\tw\t_\n#end document\nstray\n", 4, "text outside a document"),
]


@pytest.mark.parametrize(("text", "line", "reason"), STRUCTURAL_ERRORS)
@pytest.mark.parametrize("strict", [False, True])
def test_structural_errors_always_raise_with_file_and_line(text, line, reason, strict):
    with pytest.raises(ConllError) as error:
        parse_conll(text, "bad.conll", strict=strict)
    assert str(error.value).startswith(f"bad.conll:{line}: {reason}")


def test_read_conll_names_the_file(tmp_path):
    path = tmp_path / "bad.conll"
    path.write_text(one_document("(1", "-"), encoding="utf-8")
    with pytest.raises(ConllError, match=rf"^{re.escape(str(path))}:2: '\(1' opens"):
        read_conll(path, strict=True)


# ---------------------------------------------------------------------------------------------- writer


def small_document(**changes) -> Document:
    fields = dict(
        id="story",
        tokens="Mary saw her friend . She waved .".split(),
        sentences=[(0, 5), (5, 8)],
        mentions=[Mention(0, 1, 0), Mention(2, 3, 0), Mention(2, 4, 1), Mention(5, 6, 0), Mention(2, 5, 9)],
        part=7,
    )
    fields.update(changes)
    return Document(**fields)


def test_writer_format_by_hand():
    assert format_conll([small_document()]) == (
        "#begin document (story); part 007\n"
        "story\t7\t0\tMary\t(0)\n"
        "story\t7\t1\tsaw\t-\n"
        "story\t7\t2\ther\t(9|(1|(0)\n"
        "story\t7\t3\tfriend\t1)\n"
        "story\t7\t4\t.\t9)\n"
        "\n"
        "story\t7\t0\tShe\t(0)\n"
        "story\t7\t1\twaved\t-\n"
        "story\t7\t2\t.\t-\n"
        "\n"
        "#end document\n"
    )


def test_writer_closes_inner_mentions_first():
    document = Document("d", "a b c".split(), mentions=[Mention(0, 3, 1), Mention(1, 3, 2), Mention(2, 3, 3)])
    assert [line.split("\t")[-1] for line in format_conll([document]).splitlines()[1:4]] == ["(1", "(2", "(3)|2)|1)"]


def test_write_then_read_gives_the_same_documents(tmp_path):
    documents = [small_document(), small_document(part=8, mentions=[Mention(0, 8, 3), Mention(0, 8, 3)])]
    path = tmp_path / "out.conll"
    write_conll(documents, path)
    assert read_conll(path, strict=True) == (documents, [])
    stream = io.StringIO()
    write_conll(documents, stream)
    assert stream.getvalue() == path.read_text(encoding="utf-8")


def scorer_reading(text: str) -> dict[str, list[tuple[int, int, int]]]:
    """Mentions (first token, last token, entity) per document name, read by the official scorer's rules
    (reference-notes §3.3, CorScorer.pm GetCoreference): ``#\\s*begin document NAME``, blank lines skipped, TAB
    split with trailing empty fields dropped, last field, ``(N)`` then ``(N`` then ``N)`` removed in turn."""
    documents: dict[str, list[tuple[int, int, int]]] = {}
    for line in text.split("\n"):
        if begin := re.match(r"#\s*begin document (.*?)$", line):
            mentions, opened, position = documents.setdefault(begin[1], []), {}, 0
        elif line and not re.search(r"#\s*end document", line):
            field = line.rstrip("\t").split("\t")[-1]
            if field != "_":
                mentions += [(position, position, int(entity)) for entity in re.findall(r"\((\d+)\)", field)]
                field = re.sub(r"\((\d+)\)", "", field)
                for entity in re.findall(r"\((\d+)", field):
                    opened.setdefault(entity, []).append(position)
                field = re.sub(r"\((\d+)", "", field)
                mentions += [(opened[entity].pop(), position, int(entity)) for entity in re.findall(r"(\d+)\)", field)]
            position += 1
    return {name: sorted(mentions) for name, mentions in documents.items()}


def as_scored(document: Document) -> list[tuple[int, int, int]]:
    return sorted((mention.start, mention.end - 1, mention.entity) for mention in document.mentions)


def test_writer_output_reads_the_same_by_the_official_scorer_rules():
    [nested], _ = parse_conll(one_document("(1", "(1|(2", "1)", "2)|1)"))
    documents = [small_document(), small_document(part=8), nested]
    assert scorer_reading(format_conll(documents)) == {
        "(story); part 007": as_scored(documents[0]),
        "(story); part 008": as_scored(documents[1]),
        "(d); part 0": as_scored(documents[2]),  # the part as its file wrote it
    }


def test_writer_refuses_two_documents_with_one_name():
    with pytest.raises(ValueError, match="two documents named 'story' part 7"):
        format_conll([small_document(), small_document(tokens=["other"], sentences=None, mentions=[])])


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (small_document(mentions=[Mention(0, 3, 1), Mention(1, 5, 1)]), r"\(0, 3\) and \(1, 5\) of entity 1 cross"),
        (small_document(tokens=["a\tb", *"saw her friend . She waved .".split()]), "token 0 .* contains a TAB"),
        (small_document(id="two\nlines"), "its id .* contains a TAB or line break"),
        (small_document(mentions=[Mention(0, 1, -1)]), "entity labels must be non-negative"),
    ],
)
def test_writer_refuses_what_the_format_cannot_carry(document, message):
    with pytest.raises(ValueError, match=message):
        format_conll([document])


# -------------------------------------------------------------------------------------------- real data


def split_of(corpus_dir: Path) -> dict[str, str]:
    with open(corpus_dir / "splits.tsv", encoding="utf-8", newline="") as file:
        return {row["document"]: row["split"] for row in csv.DictReader(file, delimiter="\t")}


@pytest.fixture(scope="module")
def litbank(litbank_dir: Path) -> tuple[list[Document], list[Problem]]:
    documents, problems = [], []
    for path in sorted((litbank_dir / "conll").glob("*.conll")):
        read, found = read_conll(path)
        documents += read
        problems += found
    return documents, problems


@pytest.fixture(scope="module")
def ontogum(ontogum_dir: Path) -> tuple[list[Document], list[Problem]]:
    documents, problems = [], []
    for path in sorted((ontogum_dir / "conll").glob("*.conll")):
        read, found = read_conll(path, conllu=ontogum_dir / "conllu" / f"{path.stem}.conllu")
        documents += read
        problems += found
    return documents, problems


def totals(documents: list[Document], splits: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """Per split: (documents, sentences, tokens)."""
    counts: Counter[tuple[str, str]] = Counter()
    for document in documents:
        split = splits[document.id]
        counts[split, "documents"] += 1
        counts[split, "sentences"] += len(document.sentences)
        counts[split, "tokens"] += len(document.tokens)
    kinds = ("documents", "sentences", "tokens")
    return {split: tuple(counts[split, kind] for kind in kinds) for split in set(splits.values())}


def test_litbank_counts_match_source_md(litbank, litbank_dir):
    documents, problems = litbank
    assert problems == []
    assert (len(documents), sum(len(document.tokens) for document in documents)) == (100, 210_532)
    assert totals(documents, split_of(litbank_dir)) == {
        "train": (80, 7_047, 166_910),
        "dev": (10, 790, 20_862),
        "test": (10, 725, 22_760),
    }


def test_litbank_crossing_mentions_are_read_and_left_to_preprocessing(litbank):
    # "my [host]" is entity 20 and "[host and hostess]" entity 22: the two spans cross on "host"
    [howards_end] = [document for document in litbank[0] if document.id == "2891_howards_end_brat"]
    assert Mention(229, 231, 20) in howards_end.mentions and Mention(230, 233, 22) in howards_end.mentions
    assert howards_end.tokens[229:233] == ("my", "host", "and", "hostess")
    _, report = preprocess_documents([howards_end], PreprocessConfig())
    assert report.crossing_mentions_dropped == 1


def test_ontogum_counts_match_source_md(ontogum, ontogum_dir):
    documents, _ = ontogum
    assert (len(documents), sum(len(document.tokens) for document in documents)) == (263, 251_725)
    by_split = {
        split: (count, tokens) for split, (count, _, tokens) in totals(documents, split_of(ontogum_dir)).items()
    }
    assert by_split == {"train": (177, 177_410), "dev": (30, 28_119), "test": (30, 28_397), "test2": (26, 17_799)}


def test_ontogum_problems_are_exactly_the_known_ones(ontogum, ontogum_dir):
    # the broken brackets of GENTLE_poetry_road and an empty word the CoNLL-U fills in (crossing mentions are
    # read as annotated, not problems)
    assert [(Path(problem.path).name, problem.line, problem.reason.split()[0]) for problem in ontogum[1]] == [
        ("GENTLE_poetry_road.conll", 21, "'3)'"),
        ("GENTLE_poetry_road.conll", 11, "'(2'"),
        ("GUM_news_iodine.conll", 381, "empty"),
    ]


def test_gentle_poetry_road_lenient_and_strict(ontogum_dir):
    path = ontogum_dir / "conll" / "GENTLE_poetry_road.conll"
    [document], problems = read_conll(path)
    assert problems == [
        Problem(str(path), 21, "GENTLE_poetry_road", "'3)' closes a mention of entity 3 that was never opened"),
        Problem(
            str(path),
            11,
            "GENTLE_poetry_road",
            "'(2' opens a mention of entity 2 that is never closed (document ends at line 164)",
        ),
    ]
    assert Mention(10, 11, 3) in document.mentions and not any(mention.start == 9 for mention in document.mentions)
    with pytest.raises(ConllError, match=rf"^{re.escape(str(path))}:21: '3\)' closes"):
        read_conll(path, strict=True)


@pytest.mark.parametrize("corpus", ["litbank", "ontogum"])
def test_every_real_document_round_trips(corpus, request):
    documents, _ = request.getfixturevalue(corpus)
    for document in documents:
        assert parse_conll(format_conll([document]), document.id, strict=True) == ([document], [])


def test_a_file_that_is_not_utf8_is_an_error_at_its_line(tmp_path):
    path = tmp_path / "latin1.conll"
    path.write_bytes(b"#begin document (x); part 000\nx\t0\t0\tcaf\xe9\t-\n#end document\n")
    with pytest.raises(ConllError, match=r"latin1.conll:2: not UTF-8 text \(byte 0xe9\)"):
        read_conll(path)


@pytest.mark.parametrize("part", ["0", "000", "12"])
def test_the_writer_keeps_the_part_as_the_file_wrote_it(part):
    text = one_document("(1)", "-", "(1)").replace("; part 0\n", f"; part {part}\n")
    [document], _ = parse_conll(text)
    assert (document.part, document.part_text) == (int(part), part)
    assert format_conll([document]).startswith(f"#begin document (d); part {part}\n")
    assert format_conll([document.replace(part=3)]).startswith("#begin document (d); part 003\n")
