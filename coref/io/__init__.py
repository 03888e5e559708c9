"""Reading and writing: CoNLL(-U) files with FILE:LINE errors, raw-text tokenisation, HTML views,
atomic writes. No model code."""
