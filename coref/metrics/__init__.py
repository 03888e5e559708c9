"""Scores: the CoNLL-2012 coreference metrics with the official scorer's semantics, scoring a response file
against a key (`score`), and the entity metrics of generated stories."""
