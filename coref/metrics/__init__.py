"""Scores: the CoNLL-2012 coreference metrics with the official scorer's semantics, scoring a response file
against a key (`score`), GAP's metric as its official scorer computes it (`gap`), and the entity metrics of
generated stories."""
