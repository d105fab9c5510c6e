"""Constants shared by the conversation modules."""

STUCK_REPEATS = 3
"""Identical consecutive steps that count as stuck."""
