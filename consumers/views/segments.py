"""The active branch as runs of log positions: how `views_conversations.branch` stores it.

A branch is a list of positions in the conversation's log (`views_events.position`), root first.
It is stored as runs of consecutive positions, JSON `[[first, last], ...]`: a linear conversation
is one run however long it is, so a tail append rewrites one small row instead of inserting a
branch row per event. Runs are in branch order, which is not always position order: a
condensation's summary stands where the first event it forgot stood, before later events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

Segments = list[list[int]]
"""Runs `[first, last]` of consecutive log positions, in branch order."""


def encode(segments: Segments) -> str:
    """The stored text of a branch's runs."""
    return json.dumps(segments)


def decode(text: str) -> Segments:
    """The runs a stored text holds (inverse of `encode`)."""
    runs: Segments = json.loads(text)
    return runs


def extend(segments: Segments, positions: Iterable[int]) -> None:
    """Append `positions` to the branch `segments`, growing the last run where they continue it."""
    for position in positions:
        if segments and segments[-1][1] == position - 1:
            segments[-1][1] = position
        else:
            segments.append([position, position])


def runs_of(positions: Iterable[int]) -> Segments:
    """`positions`, in their order, as runs of consecutive positions."""
    segments: Segments = []
    extend(segments, positions)
    return segments


def positions(segments: Segments, start: int = 0, stop: int | None = None) -> list[int]:
    """Log positions of the branch's items `start:stop` (branch order); O(runs + window)."""
    total = sum(last - first + 1 for first, last in segments)
    stop = total if stop is None else min(stop, total)
    out: list[int] = []
    index = 0
    for first, last in segments:
        size = last - first + 1
        lo, hi = max(start - index, 0), min(stop - index, size)
        if lo < hi:
            out.extend(range(first + lo, first + hi))
        index += size
        if index >= stop:
            break
    return out
