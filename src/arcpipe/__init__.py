"""arcpipe: ARC-AGI puzzles to trained HRM/TRM/URM models and pass@K tables."""

__version__ = "0.1.0"
