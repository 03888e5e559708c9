"""The papers' evaluations: perplexities (marginal and per token group), diagnostics,
entity prediction and cloze, reranking, story-LM metrics."""
