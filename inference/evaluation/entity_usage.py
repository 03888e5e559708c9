"""Entity usage, coherence and consistency of generated and human stories (Papalampidi et al. 2022, Table 2).

From each test story's entity prompt every model draws ``samples`` stories by nucleus sampling (§5.2: p = 0.8,
temperature 1, the full T-XL memory). Each sample is as long as the human story it is compared with (its tokens,
``<eos>`` excluded), ``<eos>`` never being drawn: C and the section curves are relative to a story's length, but
the number of entities and mentions is not, so stories are compared at equal length (the paper draws 1,000
tokens for stories of about 1,000).

Human and generated stories pass through the same annotator (§4.3: one coreference tool for both):

1. the words, joined by spaces (``<unk>`` written ``UNK``), are tokenised and split into sentences again by
   :mod:`coref.io.text`;
2. a :class:`coref.resolution.pipeline.CorefPipeline` (the bundled LitBank one by default) finds the mentions and
   entities;
3. singletons are dropped, as the paper's annotator (Lee et al. 2018, trained on OntoNotes) outputs none;
4. :mod:`coref.resolution.pos` tags every token (for attribute consistency);
5. :func:`coref.metrics.stories.story_metrics` measures the story against its prompt's entities.

Per model the metrics are means over all (prompt, sample) stories; ``spread`` is the standard deviation over
the ``samples`` sample sets of the set means (how much a figure moves with the random draws).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import pstdev
from typing import Any

import torch

from coref.corpora.preprocess import drop_singletons
from coref.corpora.stories import PromptedStory, prompt_tokens
from coref.document import Document
from coref.io.progress import progress
from coref.io.text import tokenize
from coref.metrics.stories import AVERAGED, StoryMetrics, corpus_metrics, story_metrics
from coref.resolution.pipeline import CorefPipeline
from coref.resolution.pos import PosTagger
from generative.mneme import MnemeLM
from inference.training.mneme import UNK, StoryVocabulary, never_drawn

HUMAN = "human"
UNKNOWN_WORD = "UNK"  # what the annotator reads for <unk>, which coref.io.text would cut into "<", "unk", ">"


def story_text(words: Sequence[str]) -> str:
    """The text the annotator reads for a story's words: joined by spaces, ``<unk>`` written ``UNK``."""
    return " ".join(UNKNOWN_WORD if word == UNK else word for word in words)


@dataclass
class Annotator:
    """The coreference pipeline and part-of-speech tagger that annotate every story alike."""

    pipeline: CorefPipeline
    tagger: PosTagger

    @classmethod
    def load(cls, detector: str | None = None, resolver: str | None = None, pos_model: str | None = None
             ) -> Annotator:
        """The models in these files; the bundled ones where a path is not given."""
        return cls(CorefPipeline.load(detector, resolver), PosTagger.load(pos_model))

    def annotate(self, texts: Sequence[Sequence[str]], ids: Sequence[str]) -> list[tuple[Document, list[str]]]:
        """Each text (its words) re-tokenised, resolved without singletons, and tagged."""
        documents = []
        for words, story_id in zip(texts, ids):
            tokenized = tokenize(story_text(words))
            documents.append(Document(story_id, tokenized.tokens, tokenized.sentences))
        resolved = [document.replace(mentions=tuple(drop_singletons(document.mentions)))
                    for document in self.pipeline.resolve_documents(documents)]
        return list(zip(resolved, self.tagger.tag(resolved)))

    def measure(self, texts: Sequence[Sequence[str]], stories: Sequence[PromptedStory]) -> list[StoryMetrics]:
        """The metrics of ``texts[i]``, written for the prompt of ``stories[i]``."""
        annotated = self.annotate(texts, [story.id for story in stories])
        return [story_metrics(document, tags, story.entities)
                for (document, tags), story in zip(annotated, stories)]


def draw_stories(model: MnemeLM, vocabulary: StoryVocabulary, stories: Sequence[PromptedStory], samples: int,
                 generator: torch.Generator, top_p: float = 0.8, temperature: float = 1.0, batch_size: int = 32,
                 desc: str = "sampling") -> list[list[list[str]]]:
    """``samples`` stories for the prompt of each of ``stories``, each as long as that story: result[k][i] holds
    the words of sample k for story i. Prompts are batched by story length (the batch runs to its longest)."""
    model.eval()
    prompts = [prompt_tokens(story) for story in stories]
    jobs = sorted(((i, k) for i in range(len(stories)) for k in range(samples)),
                  key=lambda job: len(stories[job[0]].tokens))
    drawn: list[list[list[str]]] = [[[] for _ in stories] for _ in range(samples)]
    banned = never_drawn(vocabulary) + [vocabulary.eos_id]
    for start in progress(range(0, len(jobs), batch_size), desc=desc, unit="batch"):
        batch = jobs[start: start + batch_size]
        ids = [vocabulary.encode(prompts[i][0]) for i, _ in batch]
        owners = [prompts[i][1] for i, _ in batch]
        length = max(len(stories[i].tokens) for i, _ in batch)
        steps = list(model.generate(ids, owners, length, top_p=top_p, temperature=temperature,
                                    generator=generator, banned=banned))
        tokens = torch.stack(steps, dim=1).tolist()
        for (i, k), row in zip(batch, tokens):
            drawn[k][i] = [vocabulary.words[t] for t in row[: len(stories[i].tokens)]]
    return drawn


def summary(sets: Sequence[Sequence[StoryMetrics]]) -> dict[str, Any]:
    """The metrics pooled over every story of every sample set, the number of sets, and per metric the
    standard deviation of the set means (None where fewer than two sets define it)."""
    pooled = corpus_metrics([story for stories in sets for story in stories])
    means = [corpus_metrics(stories) for stories in sets]
    keys = (*AVERAGED, "normalised_consistency_of_means")
    spread = {}
    for key in keys:
        values = [mean[key] for mean in means if mean[key] is not None]
        spread[key] = pstdev(values) if len(values) > 1 else None
    return {**pooled, "samples": len(sets), "spread": spread}


def gap_closed(rows: dict[str, dict[str, Any]], metric: str = "coherence") -> dict[str, float | None]:
    """Per model other than vanilla: the share of vanilla's gap to the human stories that the model closes on
    ``metric``, (model − vanilla) / (human − vanilla); 1 reaches human, < 0 widens the gap (the issue's target
    for C: >= 0.5). None where vanilla is not below the human stories: there is no gap to close."""
    if HUMAN not in rows or "vanilla" not in rows:
        return {}
    human, vanilla = rows[HUMAN][metric], rows["vanilla"][metric]
    return {name: None if None in (human, vanilla, row[metric]) or human <= vanilla
            else (row[metric] - vanilla) / (human - vanilla)
            for name, row in rows.items() if name not in (HUMAN, "vanilla")}
