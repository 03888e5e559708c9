"""EntityNLM (Ji et al. 2017): the Pyro model with its proposals (`model`) and the exact
log-likelihood of a known annotation that trains it (`gold`)."""
