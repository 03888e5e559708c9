"""EntityNLM (Ji et al. 2017): the Pyro program and its proposal (`model`), the config and conditional
distributions (`heads`), the per-token state (`state`), log p of a known annotation for training (`annotated`)."""
