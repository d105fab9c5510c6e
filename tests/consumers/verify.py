"""Checks of a store against the true event log: each event once, true counts."""

from __future__ import annotations

from collections import Counter

import sqlalchemy as sa

from convdb.consumers.store import open_engine
from convdb.schemas import EventEnvelope


def scalar(url: str, sql: str) -> object:
    """One value from the store (None when the table is not there yet)."""
    engine = open_engine(url, writer=False)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar()
    except sa.exc.OperationalError:
        return None
    except sa.exc.ProgrammingError:
        return None
    finally:
        engine.dispose()


def rows(url: str, sql: str) -> list[tuple]:
    """All rows of a query."""
    engine = open_engine(url, writer=False)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql)).all()]
    finally:
        engine.dispose()


def assert_views_exact(url: str, events: list[EventEnvelope]) -> None:
    """views_events holds each event exactly once; every conversation's last seq is right."""
    stored = rows(url, "SELECT event_id FROM views_events")
    ids = Counter(r[0] for r in stored)
    assert len(stored) == len(events), f"{len(stored)} rows for {len(events)} events"
    assert set(ids) == {e.id for e in events}
    assert max(ids.values()) == 1
    last = {}
    for e in events:
        last[e.conversation_id] = max(last.get(e.conversation_id, 0), e.seq)
    stored_last = dict(rows(url, "SELECT conversation_id, last_seq FROM views_conversations"))
    assert stored_last == last


def assert_index_exact(url: str, events: list[EventEnvelope]) -> None:
    """index_events holds each event exactly once."""
    stored = rows(url, "SELECT event_id FROM index_events")
    assert len(stored) == len(events)
    assert {r[0] for r in stored} == {e.id for e in events}


def assert_stats_exact(url: str, events: list[EventEnvelope]) -> None:
    """Per-conversation event counts by kind equal the true counts (a duplicate would inflate them)."""
    true: dict[str, Counter[str]] = {}
    for e in events:
        true.setdefault(e.conversation_id, Counter())[e.kind] += 1  # type: ignore[attr-defined]
    stored = dict(rows(url, "SELECT conversation_id, event_count FROM stats_conversations"))
    assert stored == {c: sum(k.values()) for c, k in true.items()}
