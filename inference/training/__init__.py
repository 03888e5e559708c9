"""Training every family: the loop, checkpoints and each family's data, model and loss;
the hyper-parameter grid."""
