"""The Dynamic Neural Text Model (Kobayashi et al. 2017) in a notebook (:class:`DynamicTextModel`): exact
likelihoods of anonymised text, perplexity per token group, the entity vectors d_{e,i} sentence by sentence, and
the entity cloze.

A DNTM reads anonymised text, where each coreference chain is one token ``<unkK>`` (:mod:`coref.corpora.anonymise`).
Its calls take a string with the entities written ``<unkK>`` (``"<unk1> met <unk2> . <unk1> thanked <unk2> ."``),
an anonymised Document (``anonymised_corpus(...).documents``, :meth:`DynamicTextModel.documents`), or an annotated
Document, which is preprocessed and anonymised as ``coref.corpora.anonymise.anonymised_corpus`` does. The numbers are
those of the commands: ``python -m inference.perplexity`` (:func:`~inference.evaluation.perplexity.document_log_probs`,
:func:`~inference.evaluation.perplexity.group_table`) and ``python -m inference.entity_cloze``
(:func:`~inference.evaluation.entity_cloze.sample_clozes`, :func:`~inference.evaluation.entity_cloze.sentence_scores`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from coref.corpora.anonymise import ANONYMISED_PREPROCESS, ENTITY_TOKENS, anonymise
from coref.corpora.preprocess import apply_vocabulary, preprocess_document
from coref.document import Document, Mention
from coref.io.text import PLAIN_TOKEN, plain_document
from generative.dntm import DNTMConfig
from generative.layers.batch import make_batch, token_stream
from inference.api.arguments import Texts, as_documents
from inference.api.language_model import LanguageModel
from inference.api.tables import html_table
from inference.data import language_model_documents
from inference.evaluation.entity_cloze import Cloze, mean_quantile, sample_clozes, sentence_scores
from inference.evaluation.perplexity import GROUPS, document_log_probs, group_table

ENTITY = re.compile(r"<unk(\d+)>")
ANONYMISED_TOKEN = re.compile(r"<unk\d+>|" + PLAIN_TOKEN.pattern)  # a text's tokens, an entity's <unkK> one of them
BATCH_TOKENS = 32_000  # padded tokens per batch, the commands' default


def anonymised_text(text: str, id: str = "text") -> Document:
    """A text whose entities are written ``<unkK>`` as an anonymised Document: tokenised as ``entitylm posterior
    --text`` does, each ``<unkK>`` one token and a one-token mention of entity K. The entities must be numbered
    1, 2, ... in order of first appearance, as the anonymised data numbers its chains; else ValueError."""
    document = plain_document(text, id, ANONYMISED_TOKEN)
    mentions = [Mention(t, t + 1, int(found[1])) for t, token in enumerate(document.tokens)
                if (found := ENTITY.fullmatch(token))]
    first = list(dict.fromkeys(mention.entity for mention in mentions))
    if first != list(range(1, len(first) + 1)) or len(first) > len(ENTITY_TOKENS):
        raise ValueError(f"{id}: entities are written <unk1>, <unk2>, ... (at most <unk{len(ENTITY_TOKENS)}>) in "
                         f"order of first appearance, as the anonymised data numbers them; got "
                         f"{', '.join(f'<unk{k}>' for k in first)}")
    return document.replace(mentions=mentions)


def is_anonymised(document: Document) -> bool:
    """Whether every mention of ``document`` is one token ``<unkK>`` of its entity K (an anonymised document)."""
    return all(mention.end - mention.start == 1 and isinstance(mention.entity, int)
               and 1 <= mention.entity <= len(ENTITY_TOKENS)
               and document.tokens[mention.start] == ENTITY_TOKENS[mention.entity - 1]
               for mention in document.mentions)


# ---- results ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TokenGroups:
    """Perplexity per token group, as ``python -m inference.perplexity`` reports it (Kobayashi et al. Table 2):
    ``table[group]`` is ``{"perplexity", "tokens"}`` for ``all``, ``reappearing_entities`` (tokens of mentions of
    an entity seen before), ``following_entities`` (the token after a mention) and ``non_entities``, and the
    paper's breakdowns (``table["position"]``, ...) by bucket."""

    table: dict
    documents: int

    def __getitem__(self, group: str) -> float | None:
        """The perplexity of ``group`` (None: no token in it)."""
        return self.table[group]["perplexity"]

    def rows(self) -> list[tuple[str, str, str]]:
        """(group, perplexity, tokens) of every group of :data:`inference.evaluation.perplexity.GROUPS`."""
        return [(group, "-" if self[group] is None else f"{self[group]:.2f}", str(self.table[group]["tokens"]))
                for group in GROUPS]

    def __repr__(self) -> str:
        lines = [f"TokenGroups({self.documents} documents)", f"{'group':<22}{'perplexity':>12}{'tokens':>8}"]
        return "\n".join([*lines, *(f"{group:<22}{value:>12}{tokens:>8}" for group, value, tokens in self.rows())])

    def _repr_html_(self) -> str:
        return html_table(("group", "perplexity", "tokens"), self.rows(), f"{self.documents} documents")


@dataclass(frozen=True, eq=False)  # numpy fields
class EntityStates:
    """The DNTM's entity vectors through one anonymised ``document``: ``states[i, k - 1]`` is d_{k,i}, entity
    ``<unkK>``'s vector after sentence i (0 before its first mention), for the document's entities 1..K;
    ``mentioned[i, k - 1]``: sentence i mentions entity k. A vector changes exactly in the sentences that
    mention its entity (:attr:`changed`)."""

    document: Document
    states: np.ndarray  # (S, K, D)
    mentioned: np.ndarray  # (S, K) bool

    @property
    def entities(self) -> int:
        """K: the document's entities (its largest ``<unkK>``)."""
        return self.states.shape[1]

    @property
    def norms(self) -> np.ndarray:
        """(S, K): ‖d_{k,i}‖."""
        return np.linalg.norm(self.states, axis=-1)

    @property
    def changed(self) -> np.ndarray:
        """(S, K) bool: d_{k,i} differs from d_{k,i-1} (d_{k,-1} = 0)."""
        return (self.states != self._before()).any(-1)

    def _before(self) -> np.ndarray:
        return np.concatenate([np.zeros_like(self.states[:1]), self.states[:-1]])

    def cosine(self) -> np.ndarray:
        """(S, K): cos(d_{k,i}, d_{k,i-1}), how far each vector turns in each sentence; 1 where the sentence
        does not mention it, NaN up to its first mention (the vector before it is 0)."""
        before = self._before()
        with np.errstate(invalid="ignore", divide="ignore"):
            return (self.states * before).sum(-1) / (self.norms * np.linalg.norm(before, axis=-1))

    def rows(self) -> list[tuple[str, ...]]:
        """Per sentence: its number and each entity's norm, starred where the sentence mentions it."""
        return [(str(i), *(f"{norm:.2f}{'*' if mark else ''}" for norm, mark in zip(norms, marks)))
                for i, (norms, marks) in enumerate(zip(self.norms, self.mentioned))]

    def summary(self) -> str:
        """One line: the document and the states' shape."""
        return (f"{self.document.id}: {len(self.document.sentences)} sentences x {self.entities} entities x "
                f"{self.states.shape[-1]} units")

    def __repr__(self) -> str:
        head = ("sentence", *(f"<unk{k}>" for k in range(1, self.entities + 1)))
        lines = [" ".join(f"{cell:>9}" for cell in row) for row in [head, *self.rows()]]
        return "\n".join([f"EntityStates({self.summary()}; ‖d‖ after each sentence, * where it mentions the "
                          "entity)", *lines])

    def _repr_html_(self) -> str:
        head = ("sentence", *(f"<unk{k}>" for k in range(1, self.entities + 1)))
        return html_table(head, self.rows(), f"{self.summary()}: ‖d‖ after each sentence, * where it mentions "
                                              "the entity")


@dataclass(frozen=True)
class ClozeScore:
    """One entity cloze (:class:`inference.evaluation.entity_cloze.Cloze`: a sentence whose first mention of an entity
    seen before is the slot) and ``scores[k]``: log p(the sentence with the slot filled by ``<unkK>`` | the document
    before it), for every candidate k (the entities mentioned before the sentence)."""

    cloze: Cloze
    scores: dict[int, float]

    @property
    def answer(self) -> int:
        """The entity the slot mentions (e+)."""
        return self.cloze.answer

    @property
    def quantile(self) -> float:
        """The fraction of the wrong candidates scored strictly below the answer (eq. 11 for one cloze)."""
        return mean_quantile([self.scores], [self.answer])

    def sentence(self) -> str:
        """The cloze sentence, its slot written ``___``."""
        start, end = self.cloze.document.sentences[self.cloze.sentence]
        tokens = list(self.cloze.document.tokens[start:end])
        tokens[self.cloze.slot - start] = "___"
        return " ".join(tokens)

    def rows(self) -> list[tuple[str, str, str]]:
        """(candidate, its score, "answer" or "") per candidate."""
        return [(f"<unk{k}>", f"{self.scores[k]:.2f}", "answer" if k == self.answer else "")
                for k in self.cloze.candidates]

    def __repr__(self) -> str:
        cells = ", ".join(f"{entity} {value}{' (answer)' if note else ''}" for entity, value, note in self.rows())
        return (f"ClozeScore({self.cloze.document.id} sentence {self.cloze.sentence}: {self.sentence()!r}; "
                f"log p per candidate: {cells}; quantile {self.quantile:.2f})")

    def _repr_html_(self) -> str:
        return html_table(("candidate", "log p (nats)", ""), self.rows(),
                           f"sentence {self.cloze.sentence}: {self.sentence()}")


@dataclass(frozen=True)
class Clozes(Sequence[ClozeScore]):
    """The scored clozes of some documents (``clozes``: a seeded sample of ``total`` when there were more than
    asked for) and their Mean Quantile (Kobayashi et al. eq. 11; 0.5 is chance)."""

    clozes: list[ClozeScore]
    total: int

    def __getitem__(self, index):  # type: ignore[override]
        return self.clozes[index]

    def __len__(self) -> int:
        return len(self.clozes)

    @property
    def mean_quantile(self) -> float:
        """The mean over clozes of the fraction of wrong candidates scored below the answer (NaN: no cloze)."""
        return mean_quantile([c.scores for c in self.clozes], [c.answer for c in self.clozes])

    def summary(self) -> str:
        """One line: how many clozes, their mean number of candidates, the Mean Quantile."""
        candidates = np.mean([len(c.cloze.candidates) for c in self.clozes]) if self.clozes else 0.0
        return (f"{len(self)} of {self.total} clozes, {candidates:.1f} candidates on average, mean quantile "
                f"{self.mean_quantile:.3f}")

    def __repr__(self) -> str:
        return f"Clozes({self.summary()})"

    def _repr_html_(self) -> str:
        rows = [(c.cloze.document.id, c.cloze.sentence, c.sentence(), len(c.cloze.candidates), f"{c.quantile:.2f}")
                for c in self.clozes]
        return html_table(("document", "sentence", "cloze", "candidates", "quantile"), rows, self.summary())


# ---- the model ------------------------------------------------------------------------------------------------


class DynamicTextModel(LanguageModel):
    """A DNTM checkpoint (``kind`` "dntm", any placement: "none" is the paper's baseline LSTM LM) on a device,
    made by :func:`~inference.api.load`. Its likelihoods are exact (:meth:`log_likelihood`, as for the RNNLM);
    posterior and generate, which need EntityNLM's latent entities, are refused."""

    @property
    def config(self) -> DNTMConfig:
        """The model's sizes and choices (placement, merge, ...)."""
        return self.module.config

    def read(self, text: Texts) -> tuple[list[Document], list[Document]]:
        """The texts as Documents (a string through :func:`anonymised_text`) and as the DNTM reads them:
        anonymised (an annotated Document preprocessed with ``ANONYMISED_PREPROCESS`` and anonymised first, as
        ``coref.corpora.anonymise.anonymised_corpus`` does; an anonymised one as it is), then the vocabulary applied."""
        originals = as_documents(text, anonymised_text)
        prepared = []
        for document in originals:
            if not is_anonymised(document):
                document = anonymise(preprocess_document(document, ANONYMISED_PREPROCESS)[0])
            prepared.append(apply_vocabulary(document, self.checkpoint.vocabulary)[0])
        return originals, prepared

    def documents(self, corpus: str, split: str, data_dir: str | None = None) -> list[Document]:
        """A corpus split as the commands give it to the DNTM (``inference.data.language_model_documents``):
        anonymised, documents of more than 50 chains left out, the vocabulary applied."""
        return language_model_documents("anonymised", corpus, split, data_dir, self.checkpoint.preprocess,
                                        self.checkpoint.vocabulary, quiet=True)

    def _log_probs(self, documents: Sequence[Document], batch_tokens: int) -> list[np.ndarray]:
        return document_log_probs(self.checkpoint, documents, self.device, batch_tokens, progress=False,
                                  model=self.module)

    def token_groups(self, text: Texts, batch_tokens: int = BATCH_TOKENS) -> TokenGroups:
        """Perplexity per token group of a text or texts together, as ``python -m inference.perplexity``: all
        tokens, reappearing entities, the tokens following a mention, non-entities, and the paper's
        breakdowns (Figures 4-6)."""
        _, prepared = self.read(text)
        streams = [token_stream(document, self.checkpoint.vocabulary) for document in prepared]
        return TokenGroups(group_table(streams, self._log_probs(prepared, batch_tokens)), len(prepared))

    def entity_states(self, document: str | Document) -> EntityStates:
        """d_{e,i} of every entity of one document after every sentence (``module.entity_states``): the vectors
        built from the contexts of its mentions (eq. 4-8). ValueError for placement "none", which has none."""
        if not isinstance(document, (str, Document)):
            raise ValueError(f"entity_states takes one text (a str or a Document), not a {type(document).__name__}")
        if self.config.placement == "none":
            raise ValueError(f"{self.path}: a DNTM of placement 'none' (the baseline LSTM LM) has no entity states")
        _, (prepared,) = self.read(document)
        slots = {token: k for k, token in enumerate(ENTITY_TOKENS, start=1)}
        entities = max((slots.get(token, 0) for token in prepared.tokens), default=0)
        with torch.no_grad():
            states = self.module.entity_states(make_batch([prepared], self.checkpoint.vocabulary).to(self.device))
        mentioned = np.array([[ENTITY_TOKENS[k] in prepared.tokens[start:end] for k in range(entities)]
                              for start, end in prepared.sentences], dtype=bool).reshape(-1, entities)
        return EntityStates(prepared, states[0, :, :entities].cpu().numpy(), mentioned)

    def cloze(self, text: Texts, max_clozes: int | None = None, seed: int = 0,
              batch_tokens: int = BATCH_TOKENS) -> Clozes:
        """The entity clozes of a text or texts, scored as ``python -m inference.entity_cloze`` scores them: each
        candidate fills the slot and the sentence's log-likelihood given the document before it is its score.
        ``max_clozes``: a random sample of that many, drawn as the command draws it from ``seed`` (None: all)."""
        _, prepared = self.read(text)
        found, total = sample_clozes(prepared, max_clozes, seed)
        scores = sentence_scores(self.checkpoint, found, self.device, batch_tokens, model=self.module,
                                 progress=False) if found else []
        return Clozes([ClozeScore(cloze, score) for cloze, score in zip(found, scores)], total)

