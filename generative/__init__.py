"""The probabilistic programs, torch and pyro only (no file I/O, no commands): EntityNLM, the DNTM, Coref-GRU,
MNEMELM, the baselines, their shared layers, and the registry of every family. Imports nothing from inference."""
