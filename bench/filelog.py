"""The baseline: a file-per-event JSON log searched the way a list-load-filter-sort service does.

One directory per conversation, one `event-{seq:06d}-{id}.json` file per event (the layout of
OpenHands' file event store). A search lists the directory, loads every file, filters, sorts by
timestamp and returns one page: its cost grows with the conversation, whatever the page size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from convdb.schemas import EventEnvelope

T = TypeVar("T")


def write_log(root: Path, events: list[EventEnvelope]) -> Path:
    """Write each event to its own JSON file under `root`; returns the directory."""
    root.mkdir(parents=True, exist_ok=True)
    for event in events:
        (root / f"event-{event.seq:06d}-{event.id}.json").write_text(event.model_dump_json())
    return root


def search_log(root: Path, kinds: tuple[str, ...], limit: int = 50, page: int = 0) -> list[dict[str, Any]]:
    """One page of events of the given kinds, oldest first: list, load all, filter, sort, slice."""
    found = []
    for name in os.listdir(root):
        if not name.endswith(".json"):
            continue
        with open(root / name, encoding="utf-8") as handle:
            event = json.load(handle)
        if event["kind"] in kinds:
            found.append(event)
    found.sort(key=lambda e: (e["timestamp"], e["id"]))
    return found[page * limit : (page + 1) * limit]


def load_log(root: Path, validate: Callable[[Any], T]) -> list[T]:
    """Every event of a conversation, as a resume needs them: list, load, validate each, order by seq."""
    events = []
    for name in os.listdir(root):
        if not name.endswith(".json"):
            continue
        with open(root / name, encoding="utf-8") as handle:
            events.append(json.load(handle))
    events.sort(key=lambda e: e["seq"])
    return [validate(e) for e in events]
