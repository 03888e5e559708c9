"""The corpora in a notebook: the library's own readers under the API's names, nothing read differently.

- :func:`documents`: a named corpus's split as annotated Documents (:func:`coref.corpora.registry.load_corpus`);
- :func:`anonymised`: the same as the DNTM's anonymised data (:func:`coref.corpora.anonymise.anonymised_corpus`), with
  :func:`restore`, :func:`source_spans` and :func:`anonymised_stats` (the paper's Table 1);
- :func:`stories`: MNEMELM's prompted stories (:func:`coref.corpora.stories.load_stories`), with :func:`story_stats`;
- :func:`babi`: a bAbI task's questions (:func:`coref.corpora.babi.load_babi`), with :data:`BABI_PRONOUNS`.

``data_dir`` defaults to ``$ENTITYLM_DATA``; the ``sample`` corpus is bundled in the package and needs none. An
unknown corpus or split is a ValueError (:class:`coref.corpora.registry.CorpusError`) naming the choices. Documents
print with their mentions in brackets through :func:`bracketed`.
"""

from __future__ import annotations

from coref.corpora.anonymise import AnonymisedSplit, anonymised_corpus, restore, source_spans
from coref.corpora.anonymise import table1 as anonymised_stats
from coref.corpora.babi import PRONOUNS as BABI_PRONOUNS
from coref.corpora.babi import BabiExample, load_babi
from coref.corpora.registry import load_corpus
from coref.corpora.stories import PromptedStory, load_stories, story_stats
from coref.document import Document, Mention, bracketed


def documents(corpus: str, split: str, data_dir: str | None = None) -> list[Document]:
    """The documents of one split (``train``, ``dev``, ``test``) of a named corpus (``sample``, ``litbank``,
    ``ontogum``, ``conll2012``, ``inscript``, or several joined by ``+``) as annotated, with their gold mentions
    and clusters, before any model's preprocessing: :func:`coref.corpora.registry.load_corpus`'s documents (read
    leniently: malformed mentions are dropped, as the commands read them)."""
    return list(load_corpus(corpus, split, data_dir).documents)


def anonymised(corpus: str, split: str, data_dir: str | None = None) -> AnonymisedSplit:
    """One split as the Dynamic Neural Text Model's anonymised data (:func:`coref.corpora.anonymise.anonymised_corpus`):
    ``.documents`` with every mention one token ``<unkK>`` of its chain K, ``.originals`` the same documents
    before anonymisation (``restore(documents[i], originals[i]) == originals[i]``), ``.dropped`` the documents of
    more than 50 chains left out, ``.report()`` the sizes. (:meth:`DynamicTextModel.documents` also applies a
    model's vocabulary.)"""
    return anonymised_corpus(corpus, split, data_dir)


def stories(corpus: str, split: str, data_dir: str | None = None, max_tokens: int | None = None
            ) -> list[PromptedStory]:
    """One split of a corpus as MNEMELM's prompted stories (:func:`coref.corpora.stories.load_stories`): each a story's
    words, its entity prompt (``.entities``, each a tuple of words) and the entity label of every token.
    ``corpus``: ``sample``, ``litbank``, ``ontogum``, ``inscript`` or ``lambada``; ``max_tokens`` cuts long
    documents into stories of at most that many tokens."""
    return load_stories(corpus, split, data_dir, max_tokens=max_tokens)


def babi(task: int, split: str, data_dir: str | None = None, size: str = "1k") -> list[BabiExample]:
    """The questions of one split (``train``, ``dev``: the last 10% of the training stories, ``test``) of bAbI task
    ``task`` (1-20), in file order, with their coreference chains (:func:`coref.corpora.babi.load_babi`; the release
    under ``DATA/babi``). A question's ``.document``, ``.question``, ``.answer``, ``.sentences`` and ``.clusters`` are
    what :meth:`Reader.question` and :meth:`Reader.answer` read."""
    return load_babi(task, split, data_dir, size)


__all__ = [
    "BABI_PRONOUNS", "AnonymisedSplit", "BabiExample", "Document", "Mention", "PromptedStory", "anonymised",
    "anonymised_stats", "babi", "bracketed", "documents", "restore", "source_spans", "stories", "story_stats",
]
