"""Apply condensations to a branch (OpenHands-style: forget events, insert the summary)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from convdb.schemas.events import CondensationEvent, Event


def apply_condensation(visible: Iterable[Event], condensation: CondensationEvent) -> list[Event]:
    """`visible` (the branch as the agent saw it just before `condensation`) after it.

    The forgotten items (events or earlier summaries) are removed; a condensation with a
    summary takes the place of the first of them, or goes last when none of them was still
    visible; one without a summary is not shown. Ids not in `visible` are ignored.
    """
    forgotten = set(condensation.forgotten_event_ids)
    pending = condensation.summary is not None
    out: list[Event] = []
    for event in visible:
        if event.id not in forgotten:
            out.append(event)
        elif pending:
            out.append(condensation)
            pending = False
    if pending:
        out.append(condensation)
    return out


def condense(path: Sequence[Event]) -> list[Event]:
    """The root-first `path` with its condensations applied in order (O(path + Σ visible))."""
    visible: list[Event] = []
    for event in path:
        if isinstance(event, CondensationEvent):
            visible = apply_condensation(visible, event)
        else:
            visible.append(event)
    return visible
