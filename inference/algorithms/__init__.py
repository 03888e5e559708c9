"""What is computed from a trained program: importance sampling, SMC and importance
resampling, posterior summaries, proposal refinement, story generation."""
