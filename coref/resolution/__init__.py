"""Coreference on text: the mention detector, the mention ranker, the raw-text pipeline, k-best
antecedent trees, reranking and the POS tagger; `pretrained/` holds their bundled models."""
