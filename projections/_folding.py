"""Fold an interleaved stream (one partition, many conversations) with any projection."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from convdb.schemas.events import Event

State = TypeVar("State")


def fold_conversations(
    states: Mapping[str, State],
    events: Iterable[Event],
    initial: Callable[[str], State],
    fold: Callable[[State, Event], State],
) -> dict[str, State]:
    """Fold each event into its conversation's state; returns every state, touched or not.

    `states` is not changed; conversations not in it start from `initial(conversation_id)`.
    """
    out = dict(states)
    for event in events:
        cid = event.conversation_id
        state = out.get(cid)
        out[cid] = fold(initial(cid) if state is None else state, event)
    return out
