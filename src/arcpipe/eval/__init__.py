"""Inference over a test split, voting across augmented views, pass@K and submission.json."""
