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

    @property
    def what(self) -> str:
        """'missing in live', 'missing in shadow' or 'different'."""
        if self.live is None:
            return "missing in live"
        return "missing in shadow" if self.shadow is None else "different"


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


@dataclass(frozen=True)
class Comparison:
    """What `compare` found: how many conversations it compared, and those that differ."""

    compared: int
    differences: list[Difference]


def compare(live: Engine, shadow: Engine, projectors: list[Projector]) -> Comparison:
    """Every conversation whose digest differs, or exists on one side only, per projector; and
    how many conversations (on either side, any projector) were compared."""
    found: list[Difference] = []
    seen: set[str] = set()
    for projector in projectors:
        a, b = digests(live, projector), digests(shadow, projector)
        seen |= set(a) | set(b)
        for conv in sorted(set(a) | set(b)):
            if a.get(conv) != b.get(conv):
                found.append(Difference(projector.name, conv, a.get(conv), b.get(conv)))
    return Comparison(len(seen), found)


def diff(live: Engine, shadow: Engine, projectors: list[Projector]) -> list[Difference]:
    """Every conversation whose digest differs, or exists on one side only, per projector."""
    return compare(live, shadow, projectors).differences


def first_differing_seq(
    live: Engine, shadow: Engine, projector: Projector, conversation_id: str
) -> int | None:
    """The first event seq whose rows differ between the stores, in the projector's tables that
    keep rows per seq (the digested columns where declared); None when none of its tables does,
    or their per-seq rows agree (the difference is elsewhere, e.g. a per-conversation row)."""
    metadata = getattr(projector, "metadata", None)
    if metadata is None:
        return None
    declared = {d.table.name: d.columns for d in getattr(projector, "digest_of", ()) if not d.precomputed}
    first: int | None = None
    for table in metadata.sorted_tables:
        if "seq" not in table.c or "conversation_id" not in table.c:
            continue
        columns = [table.c[c] for c in declared.get(table.name, ())] or list(table.columns)
        query = (
            sa.select(table.c.seq, *columns)
            .where(table.c.conversation_id == conversation_id)
            .order_by(*([table.c.seq, *table.primary_key.columns]))
        )
        sides = []
        for engine in (live, shadow):
            rows: dict[int, list[tuple[object, ...]]] = {}
            with engine.connect() as conn:
                for seq, *values in conn.execute(query):
                    rows.setdefault(seq, []).append(tuple(str(v) for v in values))
            sides.append(rows)
        for seq in sorted(set(sides[0]) | set(sides[1])):
            if sides[0].get(seq) != sides[1].get(seq):
                first = seq if first is None else min(first, seq)
                break
    return first


def view_at(trajectory: Trajectory, at: datetime | None, offset: int | None) -> view.ViewState:
    """The conversation's view as of a time or an events-topic offset (what the agent saw then)."""
    pairs = list(zip(trajectory.offsets, trajectory.events, strict=True))
    return view.view_as_of(pairs, conversation_id=trajectory.conversation_id, offset=offset, at=at)
