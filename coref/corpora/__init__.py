"""Every corpus the project reads, one module each, with the papers' preprocessing and
anonymisation; `registry` names the coreference corpora and their splits."""
