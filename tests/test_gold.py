"""The known-annotation log-likelihood (generative.entitynlm.annotated) equals the Pyro program's, values and gradients.

The Pyro program is EntityNLM's definition; training, reranking and the diagnostics use the fast path, so it
must be the same function of the parameters: checked on real LitBank and OntoGUM documents, batched with
padding, in float64, for the model (log p(R, E, L, X)) and the proposal (log Q(R, E, L | X)), with every
modelling option and with several candidate annotations per document (reranking's form).
"""

from __future__ import annotations

import pytest
import torch
from pyro import poutine

from coref.corpora.preprocess import PreprocessConfig, Vocabulary, apply_vocabulary, preprocess_documents
from coref.corpora.registry import load_corpus
from coref.document import sentence_chunks
from generative.entitynlm.model import NEW_ENTITY_SITE, Annotation, EntityNLM, EntityNLMConfig, EntityProposal
from generative.layers.batch import make_batch
from generative.layers.density import LogDensity

RELATIVE = 1e-4


def real_documents(corpus: str, data_dir, tokens: int = 300, documents: int = 3):
    """The opening ``tokens`` (whole sentences) of the first dev documents, preprocessed as for training."""
    loaded = load_corpus(corpus, "dev", str(data_dir)).documents[:documents]
    prepared, _ = preprocess_documents(loaded, PreprocessConfig())
    pieces = [sentence_chunks(document, tokens)[0] for document in prepared]
    vocabulary = Vocabulary.build(pieces, max_size=500)
    return [apply_vocabulary(piece, vocabulary)[0] for piece in pieces], vocabulary


def models(vocabulary: Vocabulary, context: str = "forward", **changes) -> tuple[EntityNLM, EntityProposal]:
    torch.manual_seed(0)
    config = EntityNLMConfig(**{"vocab_size": len(vocabulary), "embedding_size": 12, "hidden_size": 16,
                                "dropout": 0.0, "new_entity_scale": 0.3, **changes})
    model, proposal = EntityNLM(config, list(vocabulary.counts)), EntityProposal(config, context=context)
    with torch.no_grad():  # make the distance weights matter, and the copy of an entity's words where there is one
        for heads in (model.heads, proposal.heads):
            heads.entity.distance_weights.normal_()
        if model.word_copy is not None:
            model.word_copy.gate.weight.normal_()
            if model.word_copy.query is not None:
                model.word_copy.query.weight.normal_()
    return model.double(), proposal.double()


def replayed_noise(trace: poutine.Trace, rows: int, size: int) -> torch.Tensor:
    """(rows, K, D): the eq. 7 noise the program drew for each row's k-th new entity, in the order drawn."""
    drawn = [[] for _ in range(rows)]
    for name, site in trace.nodes.items():
        if name.startswith(NEW_ENTITY_SITE):
            mask = site["fn"]._mask.expand(site["value"].shape[:-1])  # the site's .mask(needed)
            value = site["value"].reshape(rows, size)
            for row in mask.reshape(rows).nonzero().flatten().tolist():
                drawn[row].append(value[row])
    slots = max(len(row) for row in drawn)
    return torch.stack([torch.stack(row + [row[-1]] * (slots - len(row))) for row in drawn])


def program_and_fast(program, fast, parameters, rows: int, size: int):
    """Value and gradient of the summed log-density by the Pyro program and by the fast path, same noise."""
    with poutine.trace() as tracer, LogDensity(observed=True) as density:
        program()
    program_value = density.total.sum()
    program_grads = torch.autograd.grad(program_value, parameters, allow_unused=True)
    fast_value = fast(replayed_noise(tracer.trace, rows, size)).sum()
    fast_grads = torch.autograd.grad(fast_value, parameters, allow_unused=True)
    return (program_value, program_grads), (fast_value, fast_grads)


def assert_same(program, fast) -> None:
    (program_value, program_grads), (fast_value, fast_grads) = program, fast
    torch.testing.assert_close(fast_value, program_value, rtol=RELATIVE, atol=0)
    for ours, theirs in zip(fast_grads, program_grads):
        if theirs is None:
            assert ours is None or float(ours.abs().max()) == 0
            continue
        scale = float(theirs.abs().max()) or 1.0
        assert float((ours - theirs).abs().max()) <= RELATIVE * scale


@pytest.mark.parametrize("corpus", ["litbank", "ontogum"])
@pytest.mark.parametrize("options", [{}, {"distance": "reference", "update": "reference", "context": "bidirectional"},
                                     {"entity_words": 4}, {"entity_words": 4, "copy_weighting": "attention"},
                                     {"entity_words": 4, "document_cache": 0.2}])
def test_fast_joint_equals_program_on_real_documents(corpus, options, data_dir):
    documents, vocabulary = real_documents(corpus, data_dir)
    batch = make_batch(documents, vocabulary)
    assert bool(batch.R.any()) and not bool(batch.mask.all())  # mentions, and padding
    model, proposal = models(vocabulary, **options)
    size = model.config.hidden_size
    parameters = list(model.parameters())
    gold = Annotation.of(batch)
    assert_same(*program_and_fast(lambda: model.story(batch, 1, gold),
                                  lambda noise: model.log_joint(batch, gold, noise), parameters, batch.size, size))
    parameters = list(proposal.parameters())
    assert_same(*program_and_fast(lambda: proposal.guide(batch, 1, True),
                                  lambda noise: proposal.log_likelihood(batch, noise), parameters, batch.size, size))


def test_fast_joint_of_candidate_annotations(data_dir):
    """P annotations per document at once (reranking): each row equals the program's particle."""
    documents, vocabulary = real_documents("ontogum", data_dir, tokens=150, documents=2)
    batch = make_batch(documents, vocabulary)
    model, _ = models(vocabulary)
    gold = Annotation.of(batch)
    no_mentions = Annotation(torch.zeros_like(gold.R), torch.zeros_like(gold.E), torch.zeros_like(gold.L))
    candidates = Annotation(*(torch.stack([getattr(gold, n), getattr(no_mentions, n)]) for n in "REL"))
    size = model.config.hidden_size
    (program_value, _), (fast_value, _) = program_and_fast(
        lambda: model.story(batch, 2, candidates), lambda noise: model.log_joint(batch, candidates, noise),
        list(model.parameters()), 2 * batch.size, size)
    with poutine.trace() as tracer, LogDensity(observed=True) as density:
        model.story(batch, 2, candidates)
    per_row = model.log_joint(batch, candidates, replayed_noise(tracer.trace, 2 * batch.size, size))
    torch.testing.assert_close(per_row, density.total, rtol=RELATIVE, atol=0)
    assert per_row.shape == (2, batch.size) and not torch.allclose(per_row[0], per_row[1])


def test_per_token_terms_add_up(data_dir):
    documents, vocabulary = real_documents("litbank", data_dir, tokens=120, documents=2)
    batch = make_batch(documents, vocabulary)
    model, _ = models(vocabulary, new_entity_scale=0.0)
    with torch.no_grad():
        terms = model.token_log_probs(batch, Annotation.of(batch))
    outside = ~batch.mask
    assert float(terms.X[outside].abs().max()) == 0 and float(terms.structure[outside].abs().max()) == 0
    assert bool((terms.E[batch.R == 0] == 0).all())  # entity choices only in mentions
    torch.testing.assert_close(terms.total, model.program_log_joint(batch, Annotation.of(batch)).squeeze(0),
                               rtol=RELATIVE, atol=0)


def test_bidirectional_proposal_ignores_padding(data_dir):
    """The backward half reads each document from its own end: batched with longer documents or alone, the
    proposal's log Q is the same."""
    documents, vocabulary = real_documents("ontogum", data_dir, tokens=100, documents=3)
    _, proposal = models(vocabulary, context="bidirectional", new_entity_scale=0.0)
    together = proposal.log_likelihood(make_batch(documents, vocabulary))
    alone = torch.cat([proposal.log_likelihood(make_batch([document], vocabulary)) for document in documents])
    torch.testing.assert_close(together, alone, rtol=1e-9, atol=0)
