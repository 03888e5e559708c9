"""The notebook API, imported as ``import entitylm as elm``: models, corpora, coreference and scores as a few calls,
each result printable and displayable in Jupyter; ``entitylm`` re-exports every public name of this package.

    import entitylm as elm
    model = elm.load("entitynlm")                          # or "rnnlm", or the path of any checkpoint
    model.log_likelihood("Anna met her brother. She thanked him.")    # log p_hat(x), perplexity, ESS, k-hat
    model.posterior("Anna met her brother. She thanked him.")         # posterior coreference, highlighted
    elm.coreference("Anna met her brother. She thanked him.")         # the discriminative resolver's answer
    elm.score("key.conll", "response.conll")                          # MUC, B3, CEAFe, LEA, CoNLL F1

    mneme = elm.train("d_mneme", corpus="sample", out="runs/d_mneme", epochs=5)  # as `entitylm train`
    story = mneme.generate(entities=["Sarah King", "the dog"], tokens=200, seed=0)  # annotated and measured
    story.metrics, story.memory_attention()                         # entity usage; memory reads per chunk
    mneme.log_likelihood("The dog barked. Sarah King smiled.", entities=["Sarah King", "the dog"])

    dntm = elm.train("dntm", corpus="sample", out="runs/dntm", vocab_size=200)  # Kobayashi et al.'s DNTM
    dntm.log_likelihood("<unk1> met <unk2> . <unk1> thanked <unk2> .")       # exact, on anonymised text
    dntm.entity_states(document), dntm.cloze(document), dntm.token_groups(documents)

    reader = elm.train("ga_cgru", task="babi:11", out="runs/ga_cgru", data_dir="DATA")  # Dhingra et al.'s C-GRU
    reader.answer(reader.examples("test")[0]), reader.relation_attention(story).plot()
    reader.accuracy("test", chains=False)                           # the same weights without the chains

    gold = elm.documents("sample", "dev")[0]                        # a corpus split's annotated Documents
    resolver = elm.train_resolver(corpus="sample", split="train")   # as `entitylm resolver train`
    model.rerank(gold, resolver, k=10)        # k-best structures by EntityNLM's log p(R,E,L,X), as `entitylm rerank`
    elm.stories("sample", "test"), elm.anonymised("sample", "train"), elm.babi(11, "test", "DATA")  # other data

Nothing here computes anything the commands do not: a text is tokenised as ``entitylm posterior --text`` does
(:func:`coref.io.text.plain_document`) and read with the checkpoint's preprocessing; likelihoods are
what ``entitylm marginal-ppl`` measures per document (its :func:`run_samplers`; ``entitylm perplexity``'s for the
exact models), posteriors what ``entitylm posterior`` samples (:func:`original_posteriors`), scores those of
``entitylm score``, clozes those of ``entitylm entity-cloze``, a reader's accuracy that of ``entitylm train``'s
test report. The MNEMELM story LMs (:class:`StoryLanguageModel`) are trained by ``entitylm train`` itself
(:func:`train`), sample as ``entitylm generate`` does, and score and annotate stories as ``entitylm mneme-eval``
does. Reranking (:meth:`LanguageModel.rerank`) is ``entitylm rerank``'s
(:func:`~inference.evaluation.rerank.rerank_document`) on one document, and the corpora are read by the library's
own readers (:mod:`~inference.api.corpora`). Every sampling call takes a ``seed``: the same seed gives the same
numbers, and the caller's random state is left as it was. Bad input raises ValueError with a message that names it.

The package's modules: :mod:`~inference.api.arguments` (texts, seeds and the random state, samplers),
:mod:`~inference.api.tables` (the results' HTML tables), :mod:`~inference.api.loading` (:func:`load`,
:func:`train`), :mod:`~inference.api.language_model` (EntityNLM, RNNLM), :mod:`~inference.api.dntm` (the DNTM),
:mod:`~inference.api.reader` (the Coref-GRU readers), :mod:`~inference.api.mneme` (MNEMELM),
:mod:`~inference.api.coreference` (resolver and scorer), :mod:`~inference.api.reranking` (k-best reranking) and
:mod:`~inference.api.corpora` (the corpora); everything public is here too.
"""

from inference.algorithms.config import (
    PRESETS,
    SAMPLERS,
    Preset,
    ProposalConfig,
    SamplingConfig,
    Settings,
    preset,
)
from inference.api.arguments import Texts, as_documents, kept_random_state, seeded
from inference.api.coreference import Annotations, Coreference, Scores, coreference, score
from inference.api.corpora import (
    BABI_PRONOUNS,
    AnonymisedSplit,
    BabiExample,
    Document,
    Mention,
    PromptedStory,
    anonymised,
    anonymised_stats,
    babi,
    bracketed,
    documents,
    restore,
    source_spans,
    stories,
    story_stats,
)
from inference.api.dntm import (
    Clozes,
    ClozeScore,
    DynamicTextModel,
    EntityStates,
    TokenGroups,
    anonymised_text,
    is_anonymised,
)
from inference.api.language_model import (
    LIKELIHOOD_COLUMNS,
    Generated,
    LanguageModel,
    Likelihood,
    Likelihoods,
    PosteriorCoreference,
)
from inference.api.loading import BUNDLED, TRAINABLE, Model, load, train
from inference.api.mneme import GeneratedStory, MemoryAttention, StoryLanguageModel, StoryLikelihood, story_annotator
from inference.api.reader import Answer, Question, Reader, RelationAttention, Story, WordPreferences
from inference.api.reranking import Reranking, train_resolver
from inference.training.mneme import MODELS as STORY_MODELS

__all__ = [
    "BABI_PRONOUNS", "BUNDLED", "LIKELIHOOD_COLUMNS", "PRESETS", "SAMPLERS", "STORY_MODELS", "TRAINABLE",
    "Annotations", "AnonymisedSplit", "Answer", "BabiExample", "ClozeScore", "Clozes", "Coreference", "Document",
    "DynamicTextModel", "EntityStates", "Generated", "GeneratedStory", "LanguageModel", "Likelihood", "Likelihoods",
    "Mention", "MemoryAttention", "Model", "PosteriorCoreference", "Preset", "PromptedStory", "ProposalConfig",
    "Question", "Reader", "RelationAttention", "Reranking", "SamplingConfig", "Scores", "Settings", "Story",
    "StoryLanguageModel", "StoryLikelihood", "Texts",
    "TokenGroups", "WordPreferences", "anonymised", "anonymised_stats", "anonymised_text", "as_documents", "babi",
    "bracketed", "coreference", "documents", "is_anonymised", "kept_random_state", "load", "preset", "restore", "score",
    "seeded", "source_spans", "stories", "story_annotator", "story_stats", "train", "train_resolver",
]
