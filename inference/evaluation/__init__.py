"""The papers' evaluations: perplexities (marginal and per token group), diagnostics, entity prediction and
cloze, reranking, the story LMs' metrics and the entity usage of generated stories."""
