"""What every model reads, without pyro: documents, corpora, CoNLL(-U) and text I/O, the coreference pipeline
(mentions, ranker, tagger) and the coreference and story metrics. Imports nothing from generative or inference."""
