"""The Dynamic Neural Text Model: merges, entity states, where they act, its Pyro site, padding, training, pretraining.

Documents are hand-made anonymised texts: each ``<unkK>`` is a one-token mention of entity K, and the vocabulary
holds the 50 entity tokens at contiguous ids. A slow token-by-token oracle (sentences encoded one at a time, the
merge applied per entity, the LSTM cell stepped by hand, every logit written out from eq. 1, 9, 10) checks the
vectorised model.
"""

from __future__ import annotations

import dataclasses
import warnings

import pyro
import pytest
import torch

from coref.corpora.preprocess import SPECIALS, Vocabulary
from coref.document import Document, Mention
from generative.dntm import (
    MERGES,
    PLACEMENTS,
    ContextEncoder,
    DNTMConfig,
    DynamicNeuralTextModel,
    Merge,
    SentenceLayout,
    sample_negatives,
    sentence_batch,
)
from generative.layers.batch import DocumentBatch, make_batch
from tests.training import adam_losses

torch.set_flush_denormal(True)

WORDS = ("the", "man", "dog", "saw", "likes", "bones", "walked", "home", "and", "who", "?", "a", "cat", "ran")
ENTITIES = tuple(f"<unk{k}>" for k in range(1, 51))
VOCABULARY = Vocabulary((*SPECIALS, *WORDS, *ENTITIES), (5, 0, 10, 10, *[3] * len(WORDS), *[2] * len(ENTITIES)))
FIRST_ENTITY = VOCABULARY.index("<unk1>")

TEXTS = {
    # sentences are separated by " | "; "<unkK>" is a mention of entity K
    "a": "the <unk1> saw <unk2> | <unk2> likes bones | the man saw <unk1> and <unk2> walked home",
    "b": "a cat ran | the dog saw <unk1> <unk1> | <unk1> walked home | who likes <unk1> ?",
    "c": "<unk1> likes <unk2> | the <unk3> ran | <unk2> saw <unk3> and <unk1> | the man walked home | <unk3> ran",
    "d": "the man ran home",
}


def document(key: str, text: str | None = None) -> Document:
    tokens, sentences = [], []
    for sentence in (text or TEXTS[key]).split(" | "):
        start = len(tokens)
        tokens.extend(sentence.split())
        sentences.append((start, len(tokens)))
    mentions = [Mention(i, i + 1, int(token[4:-1])) for i, token in enumerate(tokens) if token in ENTITIES]
    return Document(key, tokens, sentences, mentions)


def tiny_model(placement: str = "both", merge: str = "gru_relu", dropout: float = 0.0, seed: int = 0,
               size: int = 8) -> DynamicNeuralTextModel:
    torch.manual_seed(seed)
    config = DNTMConfig(len(VOCABULARY), embedding_size=size, hidden_size=size, context_size=size, dropout=dropout,
                        placement=placement, merge=merge, first_entity_id=FIRST_ENTITY)
    model = DynamicNeuralTextModel(config)
    with torch.no_grad():  # larger dynamic terms than the default initialisation, so that their effects show
        for projection in (model.input_projection, model.output_projection):
            if projection is not None:
                projection.weight.mul_(4.0)
    return model.eval()


@pytest.fixture(autouse=True)
def fresh_param_store() -> None:
    pyro.clear_param_store()


def stream_sentences(batch: DocumentBatch, b: int) -> list[list[int]]:
    """The target positions of each sentence of document b."""
    sentences: dict[int, list[int]] = {}
    for t in range(int(batch.lengths[b])):
        sentences.setdefault(int(batch.sentence[b, t]), []).append(t)
    return [sentences[i] for i in range(len(sentences))]


def manual_entity_states(model: DynamicNeuralTextModel, batch: DocumentBatch, b: int) -> torch.Tensor:
    """(S_b, K, D) d_{e,i} of document b, one sentence and one entity at a time."""
    config = model.config
    state = torch.zeros(config.max_entities, config.context_size)
    states = []
    for positions in stream_sentences(batch, b):
        tokens = batch.words[b, positions]
        vectors = model.context_encoder(tokens[None], torch.tensor([len(positions)]))[0]
        state = state.clone()
        for k in range(config.max_entities):
            here = tokens == FIRST_ENTITY + k
            if bool(here.any()):
                state[k] = model.merge(vectors[here].mean(0)[None], state[k][None])[0]
        states.append(state)
    return torch.stack(states)


def manual_log_probs(model: DynamicNeuralTextModel, batch: DocumentBatch, b: int) -> torch.Tensor:
    """log p(w_t | w_<t) of document b's targets, token by token with an LSTM cell (eq. 1, 2, 9, 10)."""
    config = model.config
    states = manual_entity_states(model, batch, b) if config.placement != "none" else None
    cell = torch.nn.LSTMCell(config.embedding_size, config.hidden_size)
    cell.load_state_dict({name[: -len("_l0")]: value for name, value in model.lstm.state_dict().items()})
    hidden, log_probs = None, []
    for t in range(int(batch.lengths[b])):
        word, previous = batch.inputs[b, t], batch.words[b, t - 1] if t else None
        x = model.embedding.weight[word]
        if config.dynamic_input and previous is not None and 0 <= int(word) - FIRST_ENTITY < config.max_entities:
            sentence = int(batch.sentence[b, t - 1])  # the input is the previous target, read in its sentence
            if sentence > 0:
                x = x + model.input_projection(states[sentence - 1, int(word) - FIRST_ENTITY])
        hidden = cell(x[None], hidden)
        y = model.output.weight.clone()
        sentence = int(batch.sentence[b, t])
        if config.dynamic_output and sentence > 0:
            y[FIRST_ENTITY : FIRST_ENTITY + config.max_entities] += model.output_projection(states[sentence - 1])
        logits = y @ hidden[0][0] + model.output.bias
        log_probs.append(torch.log_softmax(logits, -1)[batch.words[b, t]])
    return torch.stack(log_probs)


# ---- merge functions ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MERGES)
def test_merge_keeps_the_shape(kind: str) -> None:
    merge = Merge(kind, 5)
    assert merge(torch.rand(2, 3, 5), torch.rand(2, 3, 5)).shape == (2, 3, 5)
    assert merge(torch.rand(7, 5), torch.rand(7, 5)).shape == (7, 5)


def fold(merge: Merge, contexts: list[torch.Tensor]) -> torch.Tensor:
    state = torch.zeros_like(contexts[0])
    for context in contexts:
        state = merge(context, state)
    return state


def test_max_pooling_ignores_the_order_of_contexts_and_the_gru_does_not() -> None:
    torch.manual_seed(0)
    contexts = [torch.relu(torch.randn(4, 6)) for _ in range(3)]
    shuffled = [contexts[2], contexts[0], contexts[1]]
    pooled = fold(Merge("max", 6), contexts)
    assert torch.equal(pooled, fold(Merge("max", 6), shuffled))
    assert torch.equal(pooled, torch.stack(contexts).amax(0))
    for kind in ("gru", "gru_relu"):
        merge = Merge(kind, 6)
        with torch.no_grad():
            assert not torch.allclose(fold(merge, contexts), fold(merge, shuffled), atol=1e-4)


def test_latest_keeps_only_the_last_context() -> None:
    contexts = [torch.rand(3, 4) for _ in range(3)]
    assert torch.equal(fold(Merge("latest", 4), contexts), contexts[-1])


def test_gru_relu_is_the_rectified_gru() -> None:
    torch.manual_seed(0)
    gru = Merge("gru", 4)
    gru_relu = Merge("gru_relu", 4)
    gru_relu.load_state_dict(gru.state_dict())
    context, state = torch.randn(5, 4), torch.randn(5, 4)
    with torch.no_grad():
        assert torch.equal(gru_relu(context, state), torch.relu(gru(context, state)))


# ---- entity states and the layout ---------------------------------------------------------------------------------


def test_sentence_layout_moves_tokens_to_the_grid_and_back() -> None:
    batch = make_batch([document("a"), document("c"), document("d")], VOCABULARY)
    layout = SentenceLayout.of(batch)
    assert layout.shape == (3, 5, 9)  # c has 5 sentences; a's last one is 8 words + </s>
    grid = layout.to_grid(batch.words, fill=-1)
    assert torch.equal(layout.to_tokens(grid)[batch.mask], batch.words[batch.mask])
    assert int((grid >= 0).sum()) == batch.num_tokens
    tokens, lengths = sentence_batch(batch)
    assert lengths.tolist() == [len(s) for b in range(3) for s in stream_sentences(batch, b)]
    assert VOCABULARY.words[int(tokens[0, 0])] == "the" and VOCABULARY.words[int(tokens[0, 4])] == "</s>"


@pytest.mark.parametrize("merge", MERGES)
def test_entity_states_match_a_sentence_by_sentence_oracle(merge: str) -> None:
    model = tiny_model(merge=merge)
    batch = make_batch([document("a"), document("b"), document("c")], VOCABULARY)
    with torch.no_grad():
        states = model.entity_states(batch)
        assert states.shape == (3, 5, 50, 8)
        for b in range(3):
            expected = manual_entity_states(model, batch, b)
            assert torch.allclose(states[b, : len(expected)], expected, atol=1e-5)
            last = states[b, len(expected) - 1 : len(expected)]
            assert torch.equal(states[b, len(expected) :], last.expand_as(states[b, len(expected) :]))


def test_an_entity_state_changes_only_in_sentences_that_mention_it() -> None:
    model = tiny_model()
    batch = make_batch([document("c")], VOCABULARY)  # <unk1> in sentences 0, 2; <unk2> 0, 2; <unk3> 1, 2, 4
    with torch.no_grad():
        states = model.entity_states(batch)[0]
    changed = [[not torch.equal(states[i, k], states[i - 1, k] if i else torch.zeros(8)) for k in range(4)]
               for i in range(5)]
    assert changed == [[True, True, False, False], [False, False, True, False], [True, True, True, False],
                       [False, False, False, False], [False, False, True, False]]


def test_several_mentions_in_one_sentence_are_averaged() -> None:
    model = tiny_model(merge="latest")
    batch = make_batch([document("b")], VOCABULARY)  # "the dog saw <unk1> <unk1>" is sentence 1
    with torch.no_grad():
        tokens, lengths = sentence_batch(batch)
        vectors = model.context_encoder(tokens, lengths)[1]
        assert torch.allclose(model.entity_states(batch)[0, 1, 0], vectors[3:5].mean(0), atol=1e-6)


def test_entity_states_after_a_sentence_depend_only_on_sentences_up_to_it() -> None:
    model = tiny_model()
    original = document("c")
    for changed_sentence, text in [
        (2, TEXTS["c"].replace("<unk2> saw", "<unk2> walked")),
        (4, TEXTS["c"].removesuffix("ran") + "saw"),
    ]:
        batch = make_batch([original, document("c", text)], VOCABULARY)
        with torch.no_grad():
            states = model.entity_states(batch)
        assert torch.equal(states[0, :changed_sentence], states[1, :changed_sentence])
        assert not torch.allclose(states[0, changed_sentence], states[1, changed_sentence])


def test_placement_none_has_no_entity_states() -> None:
    model = tiny_model("none")
    assert model.context_encoder is None and model.input_projection is None and model.output_projection is None
    with pytest.raises(ValueError, match="none"):
        model.entity_states(make_batch([document("a")], VOCABULARY))


# ---- where the entity states act ------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_token_log_probs_match_a_token_by_token_oracle(placement: str) -> None:
    model = tiny_model(placement)
    batch = make_batch([document("a"), document("b"), document("c")], VOCABULARY)
    with torch.no_grad():
        log_probs = model.token_log_probs(batch)
        for b in range(3):
            length = int(batch.lengths[b])
            assert torch.allclose(log_probs[b, :length], manual_log_probs(model, batch, b), atol=1e-5)
            assert torch.equal(log_probs[b, length:], torch.zeros(batch.steps - length))


def test_placement_none_ignores_entity_states() -> None:
    model = tiny_model("none")
    batch = make_batch([document("a"), document("c")], VOCABULARY)
    with torch.no_grad():
        logits = model.word_logits(batch)
        assert torch.equal(logits, model.word_logits(batch, torch.randn(2, 5, 50, 8)))


def test_zero_entity_states_are_the_static_embeddings() -> None:
    """With d = 0 every placement is the baseline with the same static weights (eq. 9, 10 at d_{e,0} = 0)."""
    batch = make_batch([document("a"), document("c")], VOCABULARY)
    baseline = tiny_model("none")
    for placement in ("input", "output", "both"):
        model = tiny_model(placement)
        baseline.load_state_dict(model.state_dict(), strict=False)
        with torch.no_grad():
            assert torch.allclose(model.word_logits(batch, torch.zeros(2, 5, 50, 8)), baseline.word_logits(batch))


def positions_changed(model: DynamicNeuralTextModel, batch: DocumentBatch, states: torch.Tensor) -> list[int]:
    """The target positions of document 0 whose next-word distribution ``states`` changes (vs. zero states)."""
    with torch.no_grad():
        dynamic = torch.log_softmax(model.word_logits(batch, states), -1)[0]
        static = torch.log_softmax(model.word_logits(batch, torch.zeros_like(states)), -1)[0]
    length = int(batch.lengths[0])
    return [t for t in range(length) if not torch.allclose(dynamic[t], static[t], atol=1e-6)]


def test_dynamic_embeddings_act_only_after_the_entitys_first_sentence() -> None:
    # targets: "the <unk1> saw <unk2> </s>" 0-4 | "<unk2> likes bones </s>" 5-8 | "the man saw <unk1> and
    # <unk2> walked home </s>" 9-17
    batch = make_batch([document("a")], VOCABULARY)
    for placement in ("input", "output", "both"):
        model = tiny_model(placement)
        with torch.no_grad():
            states = model.entity_states(batch)
        only_unk1 = torch.zeros_like(states)
        only_unk1[:, :, 0] = states[:, :, 0]
        if placement == "input":
            # <unk2> is read at input 6 (it is sentence 1's first target); <unk1> at input 13.
            assert positions_changed(model, batch, states) == list(range(6, 18))
            assert positions_changed(model, batch, only_unk1) == list(range(13, 18))
        else:
            # the output layer acts at every target of every later sentence
            assert positions_changed(model, batch, states) == list(range(5, 18))
            assert positions_changed(model, batch, only_unk1) == list(range(5, 18))


def test_output_dynamics_change_the_entity_columns_only() -> None:
    model = tiny_model("output")
    batch = make_batch([document("a")], VOCABULARY)
    with torch.no_grad():
        states = model.entity_states(batch)
        difference = model.word_logits(batch, states) - model.word_logits(batch, torch.zeros_like(states))
    entity_columns = torch.zeros(len(VOCABULARY), dtype=torch.bool)
    entity_columns[FIRST_ENTITY : FIRST_ENTITY + 50] = True
    assert torch.equal(difference[..., ~entity_columns], torch.zeros_like(difference[..., ~entity_columns]))
    assert bool((difference[0, 5:, FIRST_ENTITY : FIRST_ENTITY + 2] != 0).all())  # <unk1>, <unk2> after sentence 0
    assert torch.equal(difference[0, :, FIRST_ENTITY + 2 :], torch.zeros(batch.steps, 48))  # unseen entities


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_probabilities_sum_to_one_over_the_vocabulary_and_entity_slots(placement: str) -> None:
    model = tiny_model(placement)
    batch = make_batch([document("a"), document("c")], VOCABULARY)
    trace = pyro.poutine.trace(model.model).get_trace(batch)
    probs = trace.nodes["X"]["fn"].base_dist.base_dist.probs
    assert probs.shape == (2, batch.steps, len(VOCABULARY))
    assert torch.allclose(probs.sum(-1), torch.ones(2, batch.steps))
    assert bool((probs[..., FIRST_ENTITY : FIRST_ENTITY + 50] > 0).all())


# ---- the Pyro program, likelihood and padding -------------------------------------------------------------------


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_log_likelihood_is_the_log_density_of_the_pyro_model(placement: str) -> None:
    model = tiny_model(placement)
    batch = make_batch([document(key) for key in TEXTS], VOCABULARY)
    with torch.no_grad():
        log_likelihood = model.log_likelihood(batch)
        assert log_likelihood.shape == (4,)
        trace = pyro.poutine.trace(model.model).get_trace(batch)
        trace.compute_log_prob()
        assert torch.allclose(log_likelihood, trace.nodes["X"]["log_prob"], atol=1e-4)
        assert torch.allclose(log_likelihood, model.token_log_probs(batch).sum(-1), atol=1e-5)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_log_probs_of_chosen_targets_are_those_of_the_whole_document(placement: str) -> None:
    model = tiny_model(placement)
    batch = make_batch([document(key) for key in TEXTS], VOCABULARY)
    targets = torch.rand(batch.words.shape, generator=torch.Generator().manual_seed(0)) < 0.3
    with torch.no_grad():
        every = model.token_log_probs(batch)
        chosen = model.token_log_probs(batch, targets)
    assert torch.allclose(chosen, every * targets, atol=1e-5)
    assert bool((chosen[targets & batch.mask] < 0).all())


def test_pyro_trace_has_the_observed_words() -> None:
    model = tiny_model()
    batch = make_batch([document("a"), document("b")], VOCABULARY)
    trace = pyro.poutine.trace(model.model).get_trace(batch)
    site = trace.nodes["X"]
    assert site["is_observed"] and torch.equal(site["value"], batch.words)
    assert site["fn"].batch_shape == (2,) and site["fn"].event_shape == (batch.steps,)
    assert [frame.name for frame in site["cond_indep_stack"]] == ["documents"]
    samples = [name for name, node in trace.nodes.items() if node["type"] == "sample"]
    assert samples == ["documents", "X"]  # deterministic: the words are the only random site
    params = {name for name, node in trace.nodes.items() if node["type"] == "param"}
    assert len(params) == len(list(model.parameters()))
    loss = pyro.infer.Trace_ELBO().loss(model.model, lambda batch: None, batch)
    assert loss == pytest.approx(-model.log_likelihood(batch).sum().item(), rel=1e-5)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_padding_is_irrelevant(placement: str) -> None:
    model = tiny_model(placement)
    short, long = document("a"), document("c")  # c has more sentences and a longer stream
    batch = make_batch([short, long], VOCABULARY)
    alone = make_batch([short], VOCABULARY)
    with torch.no_grad():
        assert torch.allclose(model.token_log_probs(batch)[0, : alone.steps], model.token_log_probs(alone)[0],
                              atol=1e-5)
        assert torch.allclose(model.log_likelihood(batch)[0], model.log_likelihood(alone)[0], atol=1e-4)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_token_depends_only_on_the_tokens_before_it(placement: str) -> None:
    model = tiny_model(placement)
    # the changed word is in sentence 2, next to <unk2>: the states after sentence 2 change
    batch = make_batch([document("c"), document("c", TEXTS["c"].replace("<unk2> saw", "<unk2> ran"))], VOCABULARY)
    t = 9  # "saw" -> "ran"
    assert VOCABULARY.words[int(batch.words[0, t])] == "saw" and int(batch.sentence[0, t]) == 2
    with torch.no_grad():
        log_probs = model.token_log_probs(batch)
    assert torch.equal(log_probs[0, :t], log_probs[1, :t])
    if placement != "none":  # the first target of sentence 3 sees the changed states in the dynamic variants
        assert log_probs[0, 15] != log_probs[1, 15]


def test_dropout_acts_in_training_mode_only() -> None:
    model = tiny_model(dropout=0.5).train()
    batch = make_batch([document("a")], VOCABULARY)
    with torch.no_grad():
        assert not torch.equal(model.log_likelihood(batch), model.log_likelihood(batch))
        model.eval()
        assert torch.equal(model.log_likelihood(batch), model.log_likelihood(batch))


# ---- training ----------------------------------------------------------------------------------------------------


def training_corpus() -> list[Document]:
    """Stories where an entity's later mentions and the words after them follow from its first context."""
    stories = []
    for i in range(8):
        animal, food = ("dog", "bones") if i % 2 else ("cat", "man")
        stories.append(document(
            f"s{i}", f"the {animal} <unk1> likes {food} | a man saw <unk2> | <unk1> ran home | who likes {food} ? "
                     f"<unk1> | <unk2> walked and <unk1> ran"))
    return stories


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_adam_steps_reduce_the_loss(placement: str) -> None:
    model = tiny_model(placement, size=16).train()
    batch = make_batch(training_corpus(), VOCABULARY)
    losses = adam_losses(model, batch)
    assert losses[-1] < losses[0] - 0.5


def train_on(documents: list[Document], placement: str, merge: str, steps: int) -> torch.Tensor:
    """(B, T) token log-probabilities after ``steps`` Adam steps on ``documents``."""
    model = tiny_model(placement, merge, size=16).train()
    batch = make_batch(documents, VOCABULARY)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.03)
    for _ in range(steps):
        loss = -model.log_likelihood(batch).sum() / batch.num_tokens
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        return model.eval().token_log_probs(batch)


def pairs(template: str) -> list[Document]:
    """16 stories of two entities, one liking bones and the other home, in both roles and both orders."""
    stories = []
    for i in range(16):
        first, second = ("bones", "home") if i % 2 else ("home", "bones")
        asked = 1 + (i // 2) % 2
        stories.append(document(f"p{i}", template.format(first=first, second=second, asked=asked,
                                                        food=first if asked == 1 else second,
                                                        bones_lover=1 if first == "bones" else 2)))
    return stories


def test_dynamic_output_learns_which_entity_comes_back() -> None:
    """The answer is whichever entity liked bones: a copy from context that static embeddings cannot make."""
    stories = pairs("<unk1> likes {first} | <unk2> likes {second} | who likes bones ? <unk{bones_lover}>")
    answer = torch.tensor([len(document.tokens) + 1 for document in stories])  # the last word, before </s>
    rows = torch.arange(len(stories))
    assert bool((make_batch(stories, VOCABULARY).words[rows, answer] >= FIRST_ENTITY).all())
    assert train_on(stories, "none", "gru_relu", 60)[rows, answer].mean() < -0.6  # a coin flip: log 1/2
    assert train_on(stories, "output", "gru_relu", 60)[rows, answer].mean() > -0.1


def test_dynamic_input_learns_what_follows_an_entity() -> None:
    """The word after ``<unkX>`` in the last sentence is the one that followed X before. (The "latest" merge: from
    an untrained context encoder GRU-ReLU's states hardly differ, and it learns this only for some seeds.)"""
    stories = pairs("<unk1> {first} | <unk2> {second} | <unk{asked}> {food}")
    food = torch.tensor([len(document.tokens) + 1 for document in stories])  # the last word, before </s>
    rows = torch.arange(len(stories))
    assert {VOCABULARY.words[int(w)] for w in make_batch(stories, VOCABULARY).words[rows, food]} == {"bones", "home"}
    assert train_on(stories, "none", "latest", 150)[rows, food].mean() < -0.6  # a coin flip: log 1/2
    assert train_on(stories, "input", "latest", 150)[rows, food].mean() > -0.2


def test_a_frozen_context_encoder_gets_no_gradient_and_no_warning() -> None:
    model = tiny_model()
    model.freeze_context_encoder()
    model.train()
    assert not model.context_encoder.training and model.lstm.training
    batch = make_batch([document("a")], VOCABULARY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.log_likelihood(batch).sum().backward()
    assert all(p.grad is None for p in model.context_encoder.parameters())
    assert model.merge.gru.weight_ih.grad is not None and model.embedding.weight.grad is not None


def test_context_encoder_pretraining_lowers_the_completion_loss() -> None:
    torch.manual_seed(0)
    encoder = ContextEncoder(len(VOCABULARY), 8)
    tokens, lengths = sentence_batch(make_batch(training_corpus(), VOCABULARY))
    optimiser = torch.optim.Adam(encoder.parameters(), lr=0.02)
    generator = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(40):
        negatives = sample_negatives(VOCABULARY.counts, (*tokens.shape, 5), generator=generator)
        loss = encoder.completion_loss(tokens, lengths, negatives)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def test_completion_loss_scores_the_chosen_targets() -> None:
    torch.manual_seed(0)
    encoder = ContextEncoder(len(VOCABULARY), 4)
    tokens, lengths = sentence_batch(make_batch([document("a")], VOCABULARY))
    negatives = sample_negatives(VOCABULARY.counts, (*tokens.shape, 3))
    targets = torch.zeros_like(tokens, dtype=torch.bool)
    targets[1, 0] = True  # the first <unk2> of sentence 1
    with torch.no_grad():
        context = encoder(tokens, lengths)[1, 0]
        words = encoder.embedding.weight
        expected = -(torch.nn.functional.logsigmoid(context @ words[tokens[1, 0]])
                     + torch.nn.functional.logsigmoid(-(words[negatives[1, 0]] @ context)).sum())
        assert torch.allclose(encoder.completion_loss(tokens, lengths, negatives, targets), expected)


def test_pretrained_weights_load_and_initialise_the_embeddings() -> None:
    pretrained = ContextEncoder(len(VOCABULARY), 8)
    model = tiny_model("both")
    model.context_encoder.load_state_dict(pretrained.state_dict())
    unk = VOCABULARY.unk_id
    model.initialise_word_embeddings(pretrained.embedding.weight, unk)
    for weight in (model.embedding.weight, model.output.weight):
        assert torch.equal(weight[:FIRST_ENTITY], pretrained.embedding.weight[:FIRST_ENTITY])
        assert torch.equal(weight[FIRST_ENTITY:], pretrained.embedding.weight[unk].expand(50, 8))
    narrow = tiny_model("none", size=6)
    with pytest.raises(ValueError, match="input embeddings"):
        narrow.initialise_word_embeddings(pretrained.embedding.weight, unk, layers=("input",))


# ---- the config ------------------------------------------------------------------------------------------------


def test_config_round_trips_and_checks_its_values() -> None:
    config = DNTMConfig(len(VOCABULARY), placement="input", merge="max", first_entity_id=FIRST_ENTITY)
    assert DNTMConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown"):
        DNTMConfig.from_dict({**config.to_dict(), "typo": 1})
    for bad in [{"placement": "middle"}, {"merge": "sum"}, {"softmax": "class"}, {"first_entity_id": 30},
                {"max_entities": 0}]:
        with pytest.raises(ValueError):
            dataclasses.replace(config, **bad)
    with pytest.raises(TypeError):
        DNTMConfig(len(VOCABULARY))  # first_entity_id has no default


def test_cloze_scores_are_the_filled_sentences_log_probability_after_the_prefix() -> None:
    from coref.corpora.anonymise import ANONYMISED_PREPROCESS
    from inference.evaluation.entity_cloze import clozes, sentence_scores
    from inference.training.checkpoint import Checkpoint, module_weights

    model = tiny_model("both")
    checkpoint = Checkpoint("dntm", dataclasses.asdict(model.config), VOCABULARY, ANONYMISED_PREPROCESS,
                            {"model": module_weights(model)})
    found = clozes(document("c"))
    assert [(cloze.sentence, cloze.candidates) for cloze in found] == [(2, (1, 2, 3)), (4, (1, 2, 3))]
    scores = sentence_scores(checkpoint, found, torch.device("cpu"), batch_tokens=64)
    for cloze, score in zip(found, scores):
        first_target = cloze.document.sentences[cloze.sentence][0] + cloze.sentence
        for entity in cloze.candidates:
            with torch.no_grad():
                every = model.token_log_probs(make_batch([cloze.filled(entity)], VOCABULARY))[0]
            assert score[entity] == pytest.approx(float(every[first_target:].sum()), abs=1e-4)
    assert len({round(value, 4) for value in scores[0].values()}) == 3  # the candidates are told apart
