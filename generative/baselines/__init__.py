"""The baselines EntityNLM is measured against: the LSTM language model (paper eq. 1-2) and
the interpolated modified Kneser-Ney n-gram."""
