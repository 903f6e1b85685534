"""Resumable training segments: one process or torchrun."""
