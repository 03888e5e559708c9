"""The pieces every neural language model shares: padded token batches, the word encoder,
output softmaxes, site-by-site log-densities and config helpers."""
