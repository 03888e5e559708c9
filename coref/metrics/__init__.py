"""Scores: the CoNLL-2012 coreference metrics with the official scorer's semantics, and the
entity metrics of generated stories."""
