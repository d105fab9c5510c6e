"""Audit: compare a live store with a shadow (replayed) one, and show a view as of a point.

`diff` compares the per-conversation digests each projector computes from its own rows
(`Projector.digests`), so it proves the replayed projection equals the live one without
knowing any projector's tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from convdb.consumers.archive.errors import StoreUrlError
from convdb.consumers.archive.export import Trajectory
from convdb.consumers.base import Projector
from convdb.consumers.store import projections
from convdb.projections import view


@dataclass(frozen=True, order=True)
class Difference:
    """One conversation whose projection differs between live and shadow (None: missing there)."""

    consumer: str
    conversation_id: str
    live: str | None
    shadow: str | None


def installed(engine: Engine) -> dict[str, int]:
    """Projectors whose tables exist in a store, with their layout version."""
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(projections.name):
                return {}
            return dict(conn.execute(sa.select(projections.c.name, projections.c.version)).all())
    except SQLAlchemyError as exc:
        raise StoreUrlError(f"cannot read store {engine.url!r}: {exc}") from exc


def digests(engine: Engine, projector: Projector) -> dict[str, str]:
    """The projector's per-conversation digests in one store."""
    try:
        with engine.connect() as conn:
            return projector.digests(conn)
    except SQLAlchemyError as exc:
        raise StoreUrlError(f"cannot read {projector.name} digests from {engine.url!r}: {exc}") from exc


def diff(live: Engine, shadow: Engine, projectors: list[Projector]) -> list[Difference]:
    """Every conversation whose digest differs, or exists on one side only, per projector."""
    found: list[Difference] = []
    for projector in projectors:
        a, b = digests(live, projector), digests(shadow, projector)
        for conv in sorted(set(a) | set(b)):
            if a.get(conv) != b.get(conv):
                found.append(Difference(projector.name, conv, a.get(conv), b.get(conv)))
    return found


def view_at(trajectory: Trajectory, at: datetime | None, offset: int | None) -> view.ViewState:
    """The conversation's view as of a time or an events-topic offset (what the agent saw then)."""
    pairs = list(zip(trajectory.offsets, trajectory.events, strict=True))
    return view.view_as_of(pairs, conversation_id=trajectory.conversation_id, offset=offset, at=at)
