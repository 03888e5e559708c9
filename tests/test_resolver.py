"""The mention-ranking resolver: features on hand-made stories, the score-table convention, learning, the model
file, the command line, the alignment with the preprocessed corpus and with OntoGUM's parses, and the lowercase
mode."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from coref.corpora.preprocess import (
    NUM,
    PreprocessConfig,
    is_number,
    kept_tokens,
    preprocess_document,
    preprocess_documents,
)
from coref.corpora.registry import load_corpus
from coref.document import Document, Mention
from coref.io.checkpoint import load as load_checkpoint
from coref.io.conll import read_conll
from coref.metrics.coreference import evaluate
from coref.resolution.kbest import ROOT, document_with_clusters, greedy_tree
from coref.resolution.pipeline import BUNDLED
from coref.resolution.ranker import (
    FEMININE,
    MASCULINE,
    PLURAL,
    PRONOUN,
    PROPER,
    SINGULAR,
    THIRD,
    MentionRanker,
    ResolverModelError,
    Syntax,
    arc_features,
    describe_mentions,
    evaluate_resolver,
    lowercased,
    mention_heads,
    read_conllu_syntax,
    resolver_documents,
    resolver_syntax,
)
from inference.commands.resolver import main
from inference.training.resolution import train_ranker

FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"

TOKEN = re.compile(r"(?P<open>\[?)(?P<word>.+?)(?:\](?P<entity>\d+))?")


def story(text: str, id: str = "story") -> Document:
    """A document from bracketed text: ``[Mr. Brown]1 met [her]2 .``; sentences end at ``.``, no nesting."""
    tokens, mentions, sentences, start, sentence_start = [], [], [], None, 0
    for position, piece in enumerate(text.split()):
        match = TOKEN.fullmatch(piece)
        tokens.append(match["word"])
        if match["open"]:
            start = position
        if match["entity"]:
            mentions.append(Mention(start, position + 1, int(match["entity"])))
        if match["word"] == ".":
            sentences.append((sentence_start, position + 1))
            sentence_start = position + 1
    if sentence_start < len(tokens):
        sentences.append((sentence_start, len(tokens)))
    return Document(id, tokens, sentences, mentions)


def quiet_train(documents, syntax=None, **options) -> MentionRanker:
    return train_ranker(documents, syntax, progress=False, **options)


def arc_index(document: Document, span: tuple[int, int]) -> int:
    """The mention number (1-based) of ``span``."""
    return [mention.span for mention in document.mentions].index(span) + 1


@pytest.fixture(scope="module")
def sample_model() -> MentionRanker:
    return quiet_train(resolver_documents("sample", "train", None))


# ---- mentions and features --------------------------------------------------------------------------------


def test_pronouns_carry_person_number_and_gender_and_titles_give_gender():
    document = story("[Mr. Brown]1 met [Mrs. Green]2 . [He]1 told [her]2 about [the dogs]3 . [They]3 barked .")
    mentions = describe_mentions(document)
    assert list(mentions.kind[:2]) == [PROPER, PROPER]
    assert list(mentions.gender) == [MASCULINE, FEMININE, MASCULINE, FEMININE, 0, 0]
    assert (mentions.person[2], mentions.number[2], mentions.kind[2]) == (THIRD, SINGULAR, PRONOUN)
    assert mentions.number[5] == PLURAL


def test_heuristic_heads():
    document = story("[the wife of John]1 saw [the man who sold it]2 and [Mary]3 , [his sister]2 .")
    heads = [document.tokens[head] for head in mention_heads(document)]
    assert heads == ["wife", "man", "Mary", "sister"]
    document = story("[her brother in Paris]1 met [a man from Leeds]2 .")
    assert [document.tokens[head] for head in mention_heads(document)] == ["brother", "man"]
    assert [document.tokens[head] for head in mention_heads(document, version=1)] == ["Paris", "Leeds"]


def test_features_cover_every_arc_and_hash_the_same_in_every_process():
    document = resolver_documents("sample", "dev", None)[0]
    features = arc_features(document)
    n = len(document.mentions)
    assert features.shape[0] == n * (n - 1) // 2
    assert features.min() >= 0 and features.max() < 1 << 22
    program = (
        "import numpy, coref.resolution.ranker as r; "
        "print(numpy.sum(r.arc_features(r.resolver_documents('sample', 'dev', None)[0]) % 9973))"
    )
    for seed in ("1", "2"):
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, env=environment, check=True
        )
        assert int(run.stdout) == int(np.sum(features % 9973))


# ---- learning --------------------------------------------------------------------------------------------------

TITLED = [("Brown", "Green"), ("Black", "White"), ("Stone", "Wood"), ("Hill", "Field"), ("Shore", "Lake")]


def titled_story(man: str, woman: str, man_first: bool, pronoun: str, id: str) -> Document:
    """Two titled people, then a pronoun that refers to the one of its gender."""
    people = [f"[Mr. {man}]1", f"[Mrs. {woman}]2"]
    if not man_first:
        people.reverse()
    entity = 1 if pronoun == "he" else 2
    return story(f"{people[0]} met {people[1]} . [{pronoun}]{entity} smiled .", id)


def test_gender_agreement_is_learned_for_unseen_names():
    training = [
        titled_story(man, woman, man_first, pronoun, f"train{k}")
        for k, ((man, woman), man_first, pronoun) in enumerate(
            (names, order, pronoun) for names in TITLED for order in (True, False) for pronoun in ("he", "she")
        )
    ]
    model = quiet_train(training)
    for man_first in (True, False):
        for pronoun, entity in (("he", 1), ("she", 2)):
            test = titled_story("Kettle", "Ladle", man_first, pronoun, "test")
            scores = model.arc_scores(test)
            right = [i for i, mention in enumerate(test.mentions[:2], start=1) if mention.entity == entity][0]
            assert scores[3, right] > scores[3, 3 - right], (man_first, pronoun)


def test_string_match_raises_the_arc_score():
    nouns = [("lantern", "barn"), ("cart", "field"), ("horse", "gate"), ("bell", "tower")]
    training = [  # the third mention repeats the first or the second: only the string tells which
        story(f"[the {a}]1 stood by [the {b}]2 . [the {(a, b)[e - 1]}]{e} was old .", f"train{k}{e}")
        for k, (a, b) in enumerate(nouns)
        for e in (1, 2)
    ]
    model = quiet_train(training)
    for e in (1, 2):
        test = story(f"[the kettle]1 sat by [the spoon]2 . [the {('kettle', 'spoon')[e - 1]}]{e} was hot .")
        scores = model.arc_scores(test)
        assert scores[3, e] > scores[3, 3 - e]
        assert scores[3, e] > scores[3, ROOT]


def test_training_is_deterministic_for_a_seed():
    documents = resolver_documents("sample", "train", None)[:3]
    first = quiet_train(documents, epochs=2, seed=7)
    second = quiet_train(documents, epochs=2, seed=7)
    assert first.weights.dtype == np.float32
    np.testing.assert_array_equal(first.weights, second.weights)


def test_beats_the_trivial_baselines_on_sample_dev(sample_model):
    dev = resolver_documents("sample", "dev", None)
    singletons = [d.replace(mentions=[Mention(m.start, m.end, k) for k, m in enumerate(d.mentions)]) for d in dev]
    one_cluster = [d.replace(mentions=[Mention(m.start, m.end, 1) for m in d.mentions]) for d in dev]
    score = evaluate_resolver(sample_model, dev)[1].conll_f1
    assert score > evaluate(dev, singletons).conll_f1
    assert score > evaluate(dev, one_cluster).conll_f1
    assert score > 0.6


# ---- score table and decoding ----------------------------------------------------------------------------------


def test_arc_scores_follow_the_kbest_convention(sample_model):
    document = resolver_documents("sample", "dev", None)[0]
    scores = sample_model.arc_scores(document)
    n = len(document.mentions)
    assert scores.shape == (n + 1, n + 1)
    assert np.all(scores[1:, ROOT] == 0.0)
    assert np.all(scores[np.triu_indices(n + 1)] == -np.inf)  # i >= j, row 0 included
    assert np.all(np.isfinite(scores[np.tril_indices(n + 1, -1)]))


def test_predict_is_the_greedy_tree_without_singletons(sample_model):
    for document in resolver_documents("sample", "test", None):
        predicted = sample_model.predict(document)
        greedy = document_with_clusters(document, greedy_tree(sample_model.arc_scores(document)).partition)
        sizes = Counter(mention.entity for mention in greedy.mentions)
        assert predicted.mentions == tuple(m for m in greedy.mentions if sizes[m.entity] > 1)
        assert min(Counter(mention.entity for mention in predicted.mentions).values(), default=2) >= 2
        assert {m.span for m in predicted.mentions} <= {m.span for m in document.mentions}


def test_a_document_with_one_or_no_mention():
    model = MentionRanker(np.zeros(1 << 22, dtype=np.float32))
    for text in ("nothing here .", "[it]1 rained ."):
        document = story(text)
        assert model.arc_scores(document).shape == (len(document.mentions) + 1,) * 2
        assert model.predict(document).mentions == ()


# ---- model file ---------------------------------------------------------------------------------------------


def test_save_and_load_give_identical_scores(sample_model, tmp_path):
    path = tmp_path / "model.npz"
    sample_model.save(path)
    loaded = MentionRanker.load(path)
    assert loaded.settings == sample_model.settings
    document = resolver_documents("sample", "test", None)[1]
    np.testing.assert_array_equal(loaded.arc_scores(document), sample_model.arc_scores(document))
    assert path.stat().st_size < 1_000_000


def test_loading_something_else_names_the_file(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    for path in (text, other, tmp_path / "missing.npz"):
        with pytest.raises(ResolverModelError, match=re.escape(str(path))):
            MentionRanker.load(path)


# ---- command line ---------------------------------------------------------------------------------------------


def test_train_and_predict_on_the_sample_corpus(tmp_path, capsys):
    model, conll, scores = tmp_path / "m.npz", tmp_path / "pred.conll", tmp_path / "scores.json"
    assert main(["train", "--corpus", "sample", "--out", str(model), "--epochs", "2"]) == 0
    assert "epoch 2: dev CoNLL F1" in capsys.readouterr().out
    command = ["predict", "--model", str(model), "--corpus", "sample", "--split", "test", "--out", str(conll)]
    assert main([*command, "--json", str(scores)]) == 0
    assert "CoNLL F1" in capsys.readouterr().out
    written, problems = read_conll(conll)
    expected = [MentionRanker.load(model).predict(d) for d in resolver_documents("sample", "test", None)]
    assert problems == []
    assert [d.mentions for d in written] == [d.mentions for d in expected]
    assert '"conll_f1"' in scores.read_text()


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["train", "--corpus", "nosuch", "--out", "{tmp}/m.npz"], "unknown corpus 'nosuch'"),
        (["train", "--corpus", "litbank", "--data-dir", "{tmp}/absent", "--out", "{tmp}/m.npz"], "absent"),
        (
            ["predict", "--model", "{tmp}/bad.npz", "--corpus", "sample", "--split", "dev", "--out", "{tmp}/p"],
            "bad.npz",
        ),
        (
            ["train", "--corpus", "sample", "--detector", str(BUNDLED["detector"]), "--lowercase",
             "--out", "{tmp}/m.npz"],
            "mentions.pt was trained without --lowercase: train the resolver on its mentions without it too",
        ),
    ],
)
def test_errors_are_one_line_and_status_2(arguments, message, tmp_path, capsys):
    (tmp_path / "bad.npz").write_bytes(b"garbage")
    assert main([argument.format(tmp=tmp_path) for argument in arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1 and message in error


# ---- documents, alignment and parses ---------------------------------------------------------------------------


def test_resolver_documents_keep_case_and_the_default_spans():
    raw = load_corpus("sample", "train").documents
    default = preprocess_documents(raw)[0]
    resolver = resolver_documents("sample", "train", None)
    for ours, theirs in zip(resolver, default):
        assert ours.mentions == theirs.mentions and ours.sentences == theirs.sentences
        assert len(ours.tokens) == len(theirs.tokens)
    assert any(token != token.lower() for document in resolver for token in document.tokens)


@pytest.mark.parametrize("config", [PreprocessConfig(), PreprocessConfig(lowercase=False, replace_numbers=False)])
def test_kept_tokens_is_the_alignment_preprocessing_uses(config):
    documents = [*load_corpus("sample", "dev").documents, story('" [Ann]1 , [she]1 said , " left [ 3 ]2 ( [x]2 ) 4 .')]
    for document in documents:
        processed, _ = preprocess_document(document, config)
        kept = [document.tokens[k] for k in kept_tokens(document, config)]
        if config.replace_numbers:
            kept = [NUM if is_number(token) else token.lower() for token in kept]
        assert kept == list(processed.tokens)


def test_conllu_parses_are_read_and_restricted(tmp_path):
    path = tmp_path / "tiny.conllu"
    rows = [
        "# sent_id = 1",
        "1\tAnn\tAnn\tPROPN\tNNP\t_\t2\tnsubj\t_\t_",
        "2-3\tcan't\t_\t_\t_\t_\t_\t_\t_\t_",
        "2\tca\tcan\tAUX\tMD\t_\t0\troot\t_\t_",
        "3\tn't\tnot\tPART\tRB\t_\t2\tadvmod\t_\t_",
        "4\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_",
        "",
        "1\tShe\tshe\tPRON\tPRP\t_\t2\tnsubj\t_\t_",
        "2\tleft\tleave\tVERB\tVBD\t_\t0\troot\t_\t_",
        "",
    ]
    path.write_text("\n".join(rows))
    parse = read_conllu_syntax(path)
    assert parse.form == ("Ann", "ca", "n't", ".", "She", "left")
    assert parse.head == (1, -1, 1, 1, 5, -1)
    restricted = parse.restricted([0, 2, 4, 5])  # "ca" and "." dropped
    assert restricted.head == (-1, -1, 3, -1) and restricted.xpos == ("NNP", "RB", "PRP", "VBD")


def test_ontogum_parses_align_and_give_heads_inside_mentions(ontogum_dir):
    data_dir = ontogum_dir.parent
    documents = resolver_documents("ontogum", "dev", data_dir)[:3]
    parses = resolver_syntax("ontogum", "dev", data_dir, documents)
    assert all(isinstance(parse, Syntax) for parse in parses)
    inside_last = 0
    for document, parse in zip(documents, parses):
        assert parse.form == document.tokens
        heads = mention_heads(document, parse)
        assert all(m.start <= head < m.end for m, head in zip(document.mentions, heads))
        inside_last += sum(head != m.end - 1 for m, head in zip(document.mentions, heads))
        kinds = describe_mentions(document, parse).kind
        assert all(parse.xpos[head] in ("PRP", "PRP$") for head, kind in zip(heads, kinds) if kind == PRONOUN)
    assert inside_last > 0  # the parse, not the last-word default, chose some heads


# ---- predicted mentions -----------------------------------------------------------------------------------------


def test_predicted_mentions_take_the_gold_entity_of_their_span_and_spurious_ones_their_own():
    from coref.resolution.ranker import with_predicted_mentions

    gold = story("[Mr. Brown]1 met [Mrs. Green]2 . [He]1 told [her]2 about [the dogs]3 .")
    # found: Mr. Brown, He, her; spurious: "Brown" and "told"; missed: Mrs. Green, the dogs
    predicted = with_predicted_mentions(gold, [(0, 2), (1, 2), (6, 7), (7, 8), (8, 9)])
    entities = {mention.span: mention.entity for mention in predicted.mentions}
    assert entities[0, 2] == entities[6, 7] == 1 and entities[8, 9] == 2
    assert len({entities[1, 2], entities[7, 8], 1, 2, 3}) == 5  # the spurious ones: new entities of their own
    assert predicted.tokens == gold.tokens and predicted.sentences == gold.sentences


def test_entitynlm_mentions_keep_the_outermost_non_singletons_and_the_tokens():
    from coref.corpora.preprocess import entitynlm_mentions

    document = Document("d", "the wife of John saw John and Mary .".split(), None,
                        [Mention(0, 4, 1), Mention(3, 4, 2), Mention(5, 6, 2), Mention(7, 8, 3)])
    kept = entitynlm_mentions(document)
    # the wife is a singleton, so John inside it survives; Mary is a singleton
    assert kept.mentions == (Mention(3, 4, 2), Mention(5, 6, 2)) and kept.tokens == document.tokens


def test_a_model_keeps_singletons_only_when_trained_to(sample_model):
    document = resolver_documents("sample", "dev", None)[0]
    assert not sample_model.keeps_singletons
    sizes = Counter(mention.entity for mention in sample_model.predict(document).mentions)
    assert min(sizes.values()) > 1
    keeping = MentionRanker(sample_model.weights, {**sample_model.settings, "keep_singletons": True})
    assert len(keeping.predict(document).mentions) == len(document.mentions)


# ---- lowercase mode -------------------------------------------------------------------------------------------


def test_a_lowercase_model_records_it_and_reads_documents_lowercased(sample_model, tmp_path):
    model = quiet_train(resolver_documents("sample", "train", None), lowercase=True)
    assert model.lowercase and not sample_model.lowercase
    path = tmp_path / "lower.npz"
    model.save(path)
    loaded = MentionRanker.load(path)
    assert loaded.lowercase and loaded.settings == model.settings
    for document in resolver_documents("sample", "dev", None):
        lower = lowercased(document)
        assert lower.tokens != document.tokens and lower.mentions == document.mentions
        np.testing.assert_array_equal(loaded.arc_scores(document), loaded.arc_scores(lower))
        predicted = loaded.predict(document)
        assert predicted.tokens == document.tokens  # the prediction keeps the document's own tokens
        assert predicted.mentions == loaded.predict(lower).mentions
    cased_scores = [sample_model.arc_scores(d) for d in resolver_documents("sample", "dev", None)]
    lower_scores = [sample_model.arc_scores(lowercased(d)) for d in resolver_documents("sample", "dev", None)]
    assert any(not np.array_equal(a, b) for a, b in zip(cased_scores, lower_scores))  # a cased model reads case


def test_a_lowercase_model_lowercases_the_words_of_a_parse_too():
    document = story("[Mr. Brown]1 met [Mrs. Green]2 . [He]1 thanked [her]2 .")
    size = len(document.tokens)
    parse = Syntax(document.tokens, ("PROPN",) * size, ("NNP",) * size, (-1,) * size, ("root",) * size)
    lower_parse = Syntax(tuple(word.lower() for word in parse.form), parse.upos, parse.xpos, parse.head, parse.deprel)
    model = quiet_train([document], [parse], lowercase=True, epochs=2)
    lower = model.arc_scores(lowercased(document), lower_parse)
    np.testing.assert_array_equal(model.arc_scores(document, parse), lower)


def test_a_model_saved_before_the_lowercase_setting_loads_as_cased(tmp_path):
    checkpoint = load_checkpoint(FIXTURES / "mention_ranker.npz")  # a version 1 model, of an older format
    del checkpoint.training["lowercase"]
    checkpoint.save(tmp_path / "old.pt")
    old = MentionRanker.load(tmp_path / "old.pt")
    assert "lowercase" not in old.settings and not old.lowercase and old.feature_version == 1
