"""coref.metrics.score against the official Perl scorer: its own test suite, and perturbed responses to real keys.

1. Every case of the scorer's test suite (``test/CorefMetricTestConfig.pm`` with ``test/DataFiles/``, master for
   MUC, B3, CEAFm, CEAFe, BLANC and the LEA branch for LEA) gives the expected recall, precision and F1 to 1e-4.
2. Responses made from real LitBank and OntoGUM keys by every kind of error a system makes (mentions dropped,
   merged, split, shifted, spurious, nested, crossing, repeated; singletons on and off, in the key too) give
   the same figures as ``scorer.pl`` on the same files: every metric's recall and precision to 1e-4, F1 as the
   scorer prints it (truncated to 2 decimals in percent), BLANC's two halves as exact counts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from coref.document import Document, Mention
from coref.io.conll import read_conll, write_conll
from coref.metrics.coreference import CorefEvaluation, EvaluationError, Score, evaluate
from tests.official_scorer import LEA_BRANCH, MASTER, Counts, official_scores, require_official_scorer

TOLERANCE = 1e-4


# ------------------------------------------------------------------------------------ the scorer's own tests


def _suite_cases(folder: Path) -> list[tuple[str, Path, Path, str, tuple[float, float, float]]]:
    """(case id, key file, response file, metric, expected (recall, precision, F1)) of a test configuration.

    The expected figures are Perl arithmetic (``(1+4/3+1/2)/7``), which is also Python arithmetic.
    """
    config = folder / "test" / "CorefMetricTestConfig.pm"
    if not config.is_file():
        return []
    text = "\n".join(line.split("#", 1)[0] for line in config.read_text(encoding="utf-8").splitlines())
    case = re.compile(
        r'id\s*=>\s*"(?P<id>\w+)",\s*key_file\s*=>\s*"(?P<key>[^"]+)",\s*response_file\s*=>\s*"(?P<response>[^"]+)",'
        r"\s*expected_metrics\s*=>\s*\{(?P<metrics>.*?)\}",
        re.S,
    )
    cases = []
    for match in case.finditer(text):
        for metric, values in re.findall(r'"(\w+)"\s*=>\s*\[([^\]]*)\]', match["metrics"]):
            expected = tuple(float(eval(value, {"__builtins__": {}})) for value in values.split(","))
            key, response = (folder / "test" / match[name] for name in ("key", "response"))
            cases.append((match["id"], key, response, metric, expected))
    return cases


SUITE = [
    pytest.param(key, response, metric, expected, id=f"{folder.name[-3:]}-{case}-{metric}")
    for folder in (MASTER, LEA_BRANCH)
    for case, key, response, metric, expected in _suite_cases(folder)
    if folder == LEA_BRANCH or metric != "lea"
]


def test_the_suite_is_complete():
    """Both configurations are there and none was silently lost by the parsing above."""
    require_official_scorer()
    master, lea = _suite_cases(MASTER), _suite_cases(LEA_BRANCH)
    assert len({case for case, *_ in master}) == 36 and len(master) == 91
    assert len({case for case, *_ in lea}) == 34 and sum(metric == "lea" for *_, metric, _ in lea) == 34


@pytest.mark.parametrize(("key", "response", "metric", "expected"), SUITE)
def test_official_test_suite(key, response, metric, expected):
    require_official_scorer()
    evaluation = evaluate(read_conll(key, strict=True)[0], read_conll(response, strict=True)[0])
    score = getattr(evaluation, metric)
    assert (score.recall, score.precision, score.f1) == pytest.approx(expected, abs=TOLERANCE)


# ---------------------------------------------------------------------------- perturbed responses, scorer.pl


def _assert_counts(ours: Score, official: Counts, what: str) -> None:
    assert (ours.recall, ours.precision) == pytest.approx((official.recall, official.precision), abs=TOLERANCE), what
    # The scorer prints F1 truncated (not rounded) to 2 decimals of a percent.
    assert official.printed_f1 - 1e-9 <= ours.f1 < official.printed_f1 + TOLERANCE + 1e-9, what


def assert_same_as_official(evaluation: CorefEvaluation, key: Path, response: Path) -> None:
    """Every figure of ``evaluation`` equals what scorer.pl computes on the two files."""
    for metric, official in official_scores(key, response).items():
        what = f"{metric} of {response.name}"
        _assert_counts(evaluation.mentions, official.mentions, f"mentions ({what})")
        ours = getattr(evaluation, metric)
        if metric == "blanc":
            for half, counts in ((ours.coreference, official.coreference_links),
                                 (ours.non_coreference, official.non_coreference_links)):
                actual = (half.recall_num, half.recall_den, half.precision_num, half.precision_den)
                expected = (counts.recall_num, counts.recall_den, counts.precision_num, counts.precision_den)
                assert actual == expected, what
        _assert_counts(ours, official.coreference, what)


def _prefix(document: Document, max_tokens: int) -> Document:
    """The document's first sentences, up to about ``max_tokens`` tokens, with the mentions inside them."""
    end = next((e for _, e in document.sentences if e >= max_tokens), len(document.tokens))
    sentences = [(s, e) for s, e in document.sentences if e <= end]
    mentions = [m for m in document.mentions if m.end <= end]
    return Document(document.id, document.tokens[:end], sentences, mentions, document.part)


class Perturbation:
    """Responses made from a key by the errors systems make; each method returns the new mentions."""

    def __init__(self, document: Document, rng: np.random.Generator) -> None:
        self.size = len(document.tokens)
        self.rng = rng

    def _pick(self, mentions: list[Mention], fraction: float) -> np.ndarray:
        return self.rng.random(len(mentions)) < fraction

    def drop(self, mentions: list[Mention]) -> list[Mention]:
        return [m for m, gone in zip(mentions, self._pick(mentions, 0.2)) if not gone]

    def merge(self, mentions: list[Mention]) -> list[Mention]:
        entities = sorted({m.entity for m in mentions})
        pairs = self.rng.choice(entities, size=(max(1, len(entities) // 8), 2))
        into = {int(a): int(b) for a, b in pairs}
        return [Mention(m.start, m.end, into.get(m.entity, m.entity)) for m in mentions]

    def split(self, mentions: list[Mention]) -> list[Mention]:
        fresh = max(m.entity for m in mentions) + 1
        return [Mention(m.start, m.end, m.entity + fresh) if moved else m
                for m, moved in zip(mentions, self._pick(mentions, 0.25))]

    def shift(self, mentions: list[Mention]) -> list[Mention]:
        shifted = []
        for m, moved in zip(mentions, self._pick(mentions, 0.15)):
            if moved:
                start, end = m.start + int(self.rng.integers(-1, 2)), m.end + int(self.rng.integers(-1, 2))
                start, end = max(0, start), min(self.size, end)
                m = Mention(start, end, m.entity) if start < end else m
            shifted.append(m)
        return shifted

    def spurious(self, mentions: list[Mention]) -> list[Mention]:
        fresh = max(m.entity for m in mentions) + 1
        added = []
        for k in range(max(2, len(mentions) // 10)):
            start = int(self.rng.integers(0, self.size - 3))
            entity = fresh + k if self.rng.random() < 0.5 else mentions[int(self.rng.integers(len(mentions)))].entity
            added.append(Mention(start, start + int(self.rng.integers(1, 4)), entity))
        return mentions + added

    def nested(self, mentions: list[Mention]) -> list[Mention]:
        long = [m for m in mentions if len(m) > 2]
        fresh = max(m.entity for m in mentions) + 1
        picked = [m for m, chosen in zip(long, self._pick(long, 0.3)) if chosen]
        return mentions + [Mention(m.start + 1, m.end - 1, fresh + k % 3) for k, m in enumerate(picked)]

    def crossing(self, mentions: list[Mention]) -> list[Mention]:
        long = [m for m in mentions if len(m) > 1 and m.end < self.size]
        fresh = max(m.entity for m in mentions) + 1
        picked = [m for m, chosen in zip(long, self._pick(long, 0.3)) if chosen][:6]
        return mentions + [Mention(m.start + 1, m.end + 1, fresh + k) for k, m in enumerate(picked)]

    def repeated(self, mentions: list[Mention], limit: int = 2) -> list[Mention]:
        """Some spans again, in their own entity or another one (the scorer refuses > 10 repeats per file)."""
        picked = self.rng.choice(len(mentions), size=min(limit, len(mentions)), replace=False)
        entities = sorted({m.entity for m in mentions})
        copies = [Mention(mentions[i].start, mentions[i].end,
                          mentions[i].entity if k % 2 else int(self.rng.choice(entities)))
                  for k, i in enumerate(picked)]
        return mentions + copies

    def repeated_once(self, mentions: list[Mention]) -> list[Mention]:
        return self.repeated(mentions, limit=1)

    def singletons_off(self, mentions: list[Mention]) -> list[Mention]:
        sizes = {}
        for m in mentions:
            sizes[m.entity] = sizes.get(m.entity, 0) + 1
        return [m for m in mentions if sizes[m.entity] > 1]


# Each response applies these perturbations in order to every key document. "key:" recipes change the key.
RECIPES = {
    "identical": [],
    "dropped": ["drop"],
    "merged+split": ["merge", "split"],
    "shifted+spurious": ["shift", "spurious"],
    "nested+crossing": ["nested", "crossing"],
    "repeated": ["repeated"],
    "all-errors": ["drop", "merge", "split", "shift", "spurious", "nested", "crossing"],
    "no-singletons": ["singletons_off", "drop", "merge"],
}
KEY_RECIPES = {"as-annotated": [], "no-singletons": ["singletons_off"],
               "repeated+crossing": ["repeated_once", "crossing"]}


def _writable(mentions: list[Mention]) -> list[Mention]:
    """Without the mentions that would cross another mention of their own entity (CoNLL brackets of one
    entity pair up like parentheses, so no file can hold that)."""
    kept: list[Mention] = []
    for mention in sorted(mentions):
        if not any(other.entity == mention.entity and other.crosses(mention) for other in kept):
            kept.append(mention)
    return kept


def perturbed(document: Document, recipe: list[str], seed: int) -> Document:
    change = Perturbation(document, np.random.default_rng(seed))
    mentions = list(document.mentions)
    for step in recipe:
        mentions = _writable(getattr(change, step)(mentions))
    return document.replace(mentions=mentions)


def _keys(folder: Path, count: int, max_tokens: int) -> list[Document]:
    files = sorted((folder / "conll").glob("*.conll"))[:count]
    # Lenient: a few real files have a broken bracket, which the generated keys then leave out.
    return [_prefix(document, max_tokens) for path in files for document in read_conll(path)[0]]


@pytest.fixture(scope="module", params=["litbank", "ontogum"])
def real_keys(request, data_dir: Path) -> list[Document]:
    require_official_scorer()
    folder = data_dir / request.param
    if not folder.is_dir():
        pytest.skip(f"corpus {request.param!r} unavailable: {folder} does not exist")
    return _keys(folder, count=3, max_tokens=400)


@pytest.mark.parametrize("key_recipe", KEY_RECIPES)
@pytest.mark.parametrize("response_recipe", RECIPES)
def test_perturbed_real_keys_score_as_the_official_scorer(real_keys, key_recipe, response_recipe, tmp_path):
    seed = sum(map(ord, key_recipe + response_recipe))
    keys = [perturbed(document, KEY_RECIPES[key_recipe], seed) for document in real_keys]
    responses = [perturbed(document, RECIPES[response_recipe], seed + 1) for document in keys]
    key_file, response_file = tmp_path / "key.conll", tmp_path / "response.conll"
    write_conll(keys, key_file)
    write_conll(responses, response_file)
    evaluation = evaluate(read_conll(key_file, strict=True)[0], read_conll(response_file, strict=True)[0])
    assert_same_as_official(evaluation, key_file, response_file)


def test_both_refuse_a_response_with_more_than_ten_repeated_key_spans(tmp_path):
    require_official_scorer()
    key = Document("d", [f"w{i}" for i in range(12)], mentions=[Mention(i, i + 1, i) for i in range(11)])
    response = key.replace(mentions=[*key.mentions, *(Mention(m.start, m.end, 20) for m in key.mentions)])
    key_file, response_file = tmp_path / "key.conll", tmp_path / "response.conll"
    write_conll([key], key_file)
    write_conll([response], response_file)
    with pytest.raises(EvaluationError, match="repeats key mention spans 11 times"):
        evaluate([key], [response])
    with pytest.raises(AssertionError, match=r"refusing to score"):
        official_scores(key_file, response_file)
