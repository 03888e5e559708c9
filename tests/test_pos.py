"""The part-of-speech tagger (coref.resolution.pos): training on hand-made tagged sentences, batching, files, scores,
the
bundled model and the command line's one-line errors.

Everything but the last test runs on tiny hand-made documents in seconds; that one scores the bundled model on
OntoGUM's dev split (skipped, with the reason, without ENTITYLM_DATA).
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from coref.document import Document
from coref.resolution.pipeline import BUNDLED as COREF_BUNDLED
from coref.resolution.pos import PosModelError, PosTagger, PosTaggerConfig, ontogum_tagged, tag_scores
from inference.commands.pos import main
from inference.training.resolution import train_tagger

WORDS = {
    "DET": ["the", "a", "every"],
    "ADJ": ["old", "red", "quiet", "tall"],
    "NOUN": ["door", "dog", "house", "soldier"],
    "VERB": ["opened", "saw", "painted", "found"],
    "PRON": ["she", "he", "they"],
    "ADV": ["quickly", "slowly", "again"],
    "PUNCT": [".", "!"],
}
PATTERNS = [
    ["DET", "ADJ", "NOUN", "VERB", "DET", "NOUN", "PUNCT"],
    ["PRON", "ADV", "VERB", "DET", "ADJ", "NOUN", "PUNCT"],
    ["PRON", "VERB", "DET", "NOUN", "ADV", "PUNCT"],
]
TINY = PosTaggerConfig(embedding_size=16, shape_size=4, suffix_buckets=50, suffix_size=4, hidden_size=16,
                       dropout=0.0, word_dropout=0.0)


def toy_document(rng: random.Random, number: int, sentences: int) -> tuple[Document, list[str]]:
    """A document of sentences drawn from :data:`PATTERNS`, and its tags."""
    tokens: list[str] = []
    tags: list[str] = []
    bounds = []
    for _ in range(sentences):
        start = len(tokens)
        for tag in rng.choice(PATTERNS):
            tokens.append(rng.choice(WORDS[tag]))
            tags.append(tag)
        bounds.append((start, len(tokens)))
    return Document(f"toy{number}", tokens, bounds), tags


@pytest.fixture(scope="module")
def toy() -> tuple[list[Document], list[list[str]]]:
    rng = random.Random(0)
    pairs = [toy_document(rng, n, 5) for n in range(8)]
    return [document for document, _ in pairs], [tags for _, tags in pairs]


@pytest.fixture(scope="module")
def trained(toy) -> PosTagger:
    documents, tags = toy
    return train_tagger(documents, tags, config=TINY, epochs=30, seed=0, progress=False, batch_tokens=60)


def test_a_tiny_tagger_fits_its_hand_made_sentences(trained, toy):
    documents, tags = toy
    assert tag_scores(tags, trained.tag(documents))["accuracy"] == 1.0
    history = trained.info["history"]
    assert history[-1]["loss"] < history[0]["loss"] / 10
    assert trained.tags == sorted(WORDS)


def test_tagging_documents_together_equals_tagging_each_alone(trained, toy):
    documents, _ = toy
    together = trained.tag(documents, batch_tokens=50)
    assert together == [trained.tag([document])[0] for document in documents]
    assert [len(tags) for tags in together] == [len(document.tokens) for document in documents]
    assert trained.tag([]) == []


def test_training_is_seeded(toy):
    documents, tags = toy
    first, second = (train_tagger(documents, tags, config=TINY, epochs=2, seed=5, progress=False) for _ in range(2))
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name


def test_save_and_load_give_identical_tags(trained, toy, tmp_path):
    documents, _ = toy
    path = tmp_path / "pos.pt"
    trained.save(path)
    loaded = PosTagger.load(path)
    assert loaded.tag(documents) == trained.tag(documents)
    assert loaded.config == TINY and loaded.info["best_epoch"] == trained.info["best_epoch"]


def test_tag_scores_by_hand():
    gold = [["NOUN", "VERB", "NOUN"], ["ADJ"]]
    predicted = [["NOUN", "NOUN", "NOUN"], ["ADJ"]]
    scores = tag_scores(gold, predicted)
    assert scores["accuracy"] == 0.75 and scores["tokens"] == 4
    assert scores["per_tag"]["NOUN"] == pytest.approx({"precision": 2 / 3, "recall": 1.0, "f1": 0.8, "gold": 2})
    assert scores["per_tag"]["VERB"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "gold": 1}
    with pytest.raises(ValueError, match="4 gold tags but 3 predicted"):
        tag_scores(gold, [["NOUN"] * 3])


def test_training_refuses_tags_that_do_not_fit_the_tokens(toy):
    documents, tags = toy
    with pytest.raises(ValueError, match="document 'toy0': 3[0-9] tokens but 2 tags"):
        train_tagger(documents[:1], [["NOUN", "VERB"]], config=TINY, epochs=1, progress=False)


def test_the_bundled_tagger_tags_a_sentence_sensibly():
    tagger = PosTagger.load()
    document = Document("s", "She quickly opened the old door .".split())
    assert tagger.tag([document]) == [["PRON", "ADV", "VERB", "DET", "ADJ", "NOUN", "PUNCT"]]
    assert tagger.info["dev_accuracy"] > 0.95


def test_a_file_that_is_not_a_tagger_is_one_error_naming_it(tmp_path, capsys):
    noise = tmp_path / "noise.pt"
    noise.write_bytes(random.Random(0).randbytes(1000))
    other = tmp_path / "other.pt"
    torch.save({"format": "entitylm-pos-tagger", "version": 1, "config": {"bogus": 1}}, other)
    for path, says in [(noise, "not a part-of-speech tagger"), (COREF_BUNDLED["detector"], "not a part-of-speech "
                       "tagger"), (other, "not a part-of-speech tagger \\(incomplete"),
                       (tmp_path / "absent.pt", "no such part-of-speech tagger file")]:
        with pytest.raises(PosModelError, match=f"{path}: {says}"):
            PosTagger.load(path)
    assert main(["evaluate", "--model", str(noise), "--split", "dev"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{noise}: not a part-of-speech tagger" in error


def test_the_bundled_tagger_on_ontogum_dev(ontogum_dir):
    documents, gold = ontogum_tagged("dev", ontogum_dir.parent)
    assert sum(map(len, gold)) == 28119
    assert tag_scores(gold, PosTagger.load().tag(documents))["accuracy"] > 0.96


def test_the_epoch_kept_is_the_best_on_dev(toy):
    documents, tags = toy
    model = train_tagger(documents[2:], tags[2:], documents[:2], tags[:2], TINY, epochs=4, seed=1, progress=False)
    history = model.info["history"]
    best = max(history, key=lambda entry: entry["dev_accuracy"])
    assert model.info["best_epoch"] == best["epoch"]
    assert model.info["dev_accuracy"] == pytest.approx(best["dev_accuracy"], abs=0.02)  # float16-rounded weights


def test_command_line_trains_and_evaluates_on_ontogum(ontogum_dir, tmp_path, capsys):
    model, result = tmp_path / "pos.pt", tmp_path / "pos.json"
    data = str(ontogum_dir.parent)
    assert main(["train", "--data-dir", data, "--epochs", "1", "--hidden-size", "4", "--vocabulary-size", "100",
                 "--out", str(model)]) == 0
    assert main(["evaluate", "--model", str(model), "--data-dir", data, "--split", "dev", "--json", str(result)]) == 0
    assert "ontogum/dev: accuracy" in capsys.readouterr().out
    scores = json.loads(result.read_text())
    assert scores["splits"]["dev"]["tokens"] == 28119 and scores["training"]["epochs"] == 1
