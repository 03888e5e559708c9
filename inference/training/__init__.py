"""Training every family through one loop (loop) and one checkpoint format: each family's data, model and loss
(train: language models and the n-gram; coref_gru; mneme; context_encoder; resolution), the grid (grid)."""
