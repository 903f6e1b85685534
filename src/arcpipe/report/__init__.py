"""pass@K tables and learning-curve plots across runs and checkpoints."""
