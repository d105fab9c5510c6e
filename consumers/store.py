"""The projection store: SQLAlchemy Core engines, consumed offsets and projection versions.

The store, not Kafka, is the source of truth for consumer positions: a batch's rows and its
offsets are written in one transaction (`offsets` table), and on assignment the runner seeks
to what is stored here. A projector's table layout is versioned (`projections` table); when
the code's version differs from the stored one, its tables are dropped and re-created and its
offsets deleted, so the runner rebuilds it by replay (DESIGN §8: no migrations).

The events' payloads are stored once (`event_payloads`), keyed by their place in the log, and the
projectors' rows that show an event (the views' log, the index) refer to them by the partition and
offset they hold: one copy of each event's bytes whichever projectors hold it, written by the
first that does (`write_payloads`), so a projector rebuilt alone refers to the same rows.

Backends: a SQLite file (WAL; writers take the lock at BEGIN so two processes never deadlock
upgrading a read lock, and take turns on a lock file beside it, `convdb.consumers._turns`) and
PostgreSQL through psycopg 3 (offset rows locked FOR UPDATE, so a zombie consumer that lost a
partition waits, then sees the newer offsets and skips).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from convdb.consumers._bulk import bulk_insert as bulk_insert  # re-exported: part of the store API
from convdb.consumers._bulk import plain_columns, sqlite_upsert
from convdb.consumers._bulk import sqlite_insert_returning as sqlite_insert_returning  # re-exported
from convdb.consumers._turns import TurnConnection, begin_in_turn, takes_turns
from convdb.consumers.errors import StoreError


class ProjectionTables(Protocol):
    """What `ensure_projections` needs of a projector (`consumers.base.Projector` has it)."""

    @property
    def name(self) -> str:
        """The projection's name (its offsets are stored under it)."""

    @property
    def version(self) -> int:
        """The projection's schema version (a change rebuilds it)."""

    def create(self, connection: Connection) -> None:
        """Create the projection's tables if missing."""

    def drop(self, connection: Connection) -> None:
        """Drop the projection's tables."""


logger = logging.getLogger(__name__)

metadata = sa.MetaData()

offsets = sa.Table(
    "convdb_offsets",
    metadata,
    sa.Column("consumer", sa.String(100), primary_key=True),
    sa.Column("topic", sa.String(250), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
)
"""Next offset to consume, per projector and topic-partition."""

projections = sa.Table(
    "convdb_projections",
    metadata,
    sa.Column("name", sa.String(100), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)
"""Table-layout version of each projector whose tables exist in this store."""

OFFSET_BITS = 48
"""Bits of a log position that hold the offset (`log_position`); the partition is above them."""

event_payloads = sa.Table(
    "event_payloads",
    metadata,
    sa.Column(
        "position",
        # BIGINT, not INTEGER: on SQLite the key is then not the rowid but an index beside the rows,
        # which are appended in arrival order. Rows keyed by position went into the middle of the
        # tree (several partitions per batch): measured 3.7 us of the store thread per row, 2-2.7 now.
        sa.BigInteger,
        primary_key=True,
        autoincrement=False,
        doc="The record's place in the events topic: `log_position(partition, offset)`.",
    ),
    sa.Column("payload", sa.LargeBinary, nullable=False, doc="The event, Avro single-object encoded."),
)
"""Every event some projector shows, once: its bytes by log position (the record at a partition and
offset never changes, so whichever projector writes it first writes what the others would).
A store holds the projections of one events topic."""


def log_position(partition: int, offset: int) -> int:
    """A record's place in the events topic as one integer: its partition, then its offset.

    Partition-major, so that each partition appends at the end of a key range of its own (with
    the offset first, the partitions of a batch interleaved their keys: measured slower).

    Raises:
        StoreError: a coordinate out of range (a negative one, an offset past 2**48, a partition
            past 2**15).
    """
    if not 0 <= partition < 1 << (63 - OFFSET_BITS) or not 0 <= offset < 1 << OFFSET_BITS:
        raise StoreError(f"partition {partition}, offset {offset}: no log position for it")
    return partition << OFFSET_BITS | offset


def stored_payload(table: sa.FromClause) -> sa.Label[bytes]:
    """The payload of each row of `table` (found by its `partition` and `offset` columns), to select
    as `payload`: looked up for the rows a query returns only."""
    p = event_payloads.c
    # A BIGINT factor: typed after the INTEGER partition column, the product overflowed on PostgreSQL.
    position = table.c.partition * sa.literal(1 << OFFSET_BITS, sa.BigInteger) + table.c.offset
    return sa.select(p.payload).where(p.position == position).scalar_subquery().label("payload")


def write_payloads(conn: Connection, rows: Sequence[tuple[int, bytes]]) -> None:
    """Store (log position, payload) rows; those already stored are skipped (another projector's)."""
    bulk_insert(conn, event_payloads, ("position", "payload"), rows, ignore_conflicts_on=("position",))


TopicPartitionKey = tuple[str, str, int]
"""(projector name, topic, partition)."""


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain `postgresql://` URLs (SQLAlchemy would pick psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def open_engine(url: str, *, writer: bool = True, rebuild: bool = False) -> Engine:
    """An engine for a store URL; `writer` engines take SQLite's write lock at BEGIN.

    `rebuild`: for a replay into a shadow store, which is started again after a failure: SQLite
    does not sync to disk (`REBUILD_PRAGMAS`; an OS crash may corrupt the file, a process crash
    cannot), and checkpoints its WAL less often.

    Raises:
        StoreError: the URL is malformed or names a backend we do not support.
    """
    url = normalize_url(url)
    try:
        parsed = sa.make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"bad store URL {url!r}: {exc}") from exc
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return _sqlite_engine(parsed, writer, _SQLITE_PRAGMAS + (REBUILD_PRAGMAS if rebuild else ()))
    if backend == "postgresql":
        return _postgres_engine(parsed, writer)
    raise StoreError(f"unsupported store {backend!r} in {url!r}: use sqlite:/// or postgresql://")


_SQLITE_PRAGMAS = (
    # Only a new, empty file takes it (before WAL): 16 KiB pages hold more 1 KB payload rows.
    "PRAGMA page_size=16384",
    "PRAGMA journal_mode=WAL",
    # Safe for exactly-once across process crashes in WAL mode: a commit is atomic either way,
    # and only an OS crash can lose the last commits (then the runner replays them).
    "PRAGMA synchronous=NORMAL",
    "PRAGMA busy_timeout=60000",
    # A batch writes thousands of rows: keep its index pages cached, read through mmap, and
    # checkpoint every 32 MB of WAL instead of every 4 MB. Measured: 14 -> 10 us CPU per index row.
    "PRAGMA cache_size=-65536",
    "PRAGMA mmap_size=268435456",
    "PRAGMA wal_autocheckpoint=2000",
    "PRAGMA temp_store=MEMORY",
)
REBUILD_PRAGMAS = (
    "PRAGMA synchronous=OFF",
    "PRAGMA wal_autocheckpoint=16384",
    "PRAGMA cache_size=-262144",
)
"""A shadow rebuild's SQLite settings on top of the live ones: the rebuild is what gets redone."""


def _sqlite_engine(url: sa.URL, writer: bool, pragmas: tuple[str, ...]) -> Engine:
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    # The driver's cache of prepared statements holds every bulk-insert shape (`_bulk.chunk_sizes`).
    connect_args: dict[str, Any] = {"timeout": 60, "check_same_thread": False, "cached_statements": 512}
    turns = writer and takes_turns(url.database or "")
    database = str(Path(url.database or "").resolve()) if turns else ""
    if turns:
        connect_args["factory"] = TurnConnection  # writers of several processes take turns
    engine = sa.create_engine(url, connect_args=connect_args)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level, so that the BEGIN below is the only one emitted.
        dbapi_connection.isolation_level = None
        if turns:
            dbapi_connection.use_turns(database)
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        if turns:
            begin_in_turn(conn.connection.dbapi_connection)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")

    return engine


def _postgres_engine(url: sa.URL, writer: bool) -> Engine:
    engine = sa.create_engine(url, pool_pre_ping=True, insertmanyvalues_page_size=2000)
    if writer:

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            # As SQLite's synchronous=NORMAL: a commit returns before its WAL record is flushed.
            # A server or OS crash can lose the last commits (never part of one, never corrupt
            # anything); rows and offsets are lost together, so the runner replays them:
            # exactly-once holds. Measured: the sink's commit waited on the flush most of its time.
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET synchronous_commit = off")
            dbapi_connection.commit()

    return engine


def upsert(conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> None:
    """Insert rows, replacing the non-key columns of rows whose `keys` already exist."""
    if not rows:
        return
    columns = tuple(rows[0])
    if conn.dialect.name == "sqlite" and plain_columns(table, columns):
        # Straight to the driver: SQLAlchemy's per-statement work was most of a live batch's upserts.
        sqlite_upsert(conn, table, columns, [tuple(row[c] for c in columns) for row in rows], keys)
        return
    conn.execute(_upsert_statement(conn.dialect.name, table, columns, tuple(keys), True), list(rows))


_UPSERTS: dict[tuple[str, sa.Table, tuple[str, ...], tuple[str, ...], bool], Any] = {}


def _upsert_statement(
    dialect: str, table: sa.Table, columns: tuple[str, ...], keys: tuple[str, ...], replace: bool
) -> Any:
    # Built once per shape: building it (its `excluded` alias, the cache key) cost ~1 ms per
    # call, several calls per batch: most of a small (live, low-rate) batch's store time.
    cache_key = (dialect, table, columns, keys, replace)
    stmt = _UPSERTS.get(cache_key)
    if stmt is None:
        stmt = postgresql.insert(table) if dialect == "postgresql" else sqlite.insert(table)
        update = {c: stmt.excluded[c] for c in columns if c not in keys} if replace else {}
        stmt = (
            stmt.on_conflict_do_update(index_elements=list(keys), set_=update)
            if update
            else stmt.on_conflict_do_nothing(index_elements=list(keys))
        )
        if len(_UPSERTS) > 256:  # shapes are few (one per table); bounded all the same
            _UPSERTS.clear()
        _UPSERTS[cache_key] = stmt
    return stmt


def insert_ignore(
    conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> None:
    """Insert rows, skipping those whose `keys` already exist (idempotent append)."""
    if rows:
        stmt = _upsert_statement(conn.dialect.name, table, tuple(rows[0]), tuple(keys), False)
        conn.execute(stmt, list(rows))


SCHEMA_LOCK = 0x636F6E76  # "conv": one PostgreSQL advisory lock id for every schema change


def lock_schema(conn: Connection) -> None:
    """Serialize table creation between processes for the rest of this transaction.

    Services starting together (a deployment) create the same tables at once; on PostgreSQL
    two concurrent CREATE TABLEs of one name fail (pg_type unique violation) instead of one
    waiting. SQLite's writer transactions are serialized already.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})


def ensure_projections(engine: Engine, projectors: Iterable[ProjectionTables]) -> list[str]:
    """Create missing tables; rebuild (drop, create, forget offsets) projectors whose version changed.

    Returns the names of the projectors that will be rebuilt by replay.
    """
    rebuilt = []
    try:
        with engine.begin() as conn:
            lock_schema(conn)
            metadata.create_all(conn)
            stored = dict(conn.execute(sa.select(projections.c.name, projections.c.version)).all())
            for projector in projectors:
                have = stored.get(projector.name)
                if have is not None and have != projector.version:
                    logger.warning(
                        "projection %s: version %s -> %s, rebuilding by replay",
                        projector.name,
                        have,
                        projector.version,
                    )
                    projector.drop(conn)
                    conn.execute(offsets.delete().where(offsets.c.consumer == projector.name))
                    rebuilt.append(projector.name)
                projector.create(conn)
                upsert(conn, projections, [{"name": projector.name, "version": projector.version}], ["name"])
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot prepare the store {engine.url!r}: {exc}") from exc
    return rebuilt


def stored_offsets(
    conn: Connection, names: Sequence[str], topic_partitions: Iterable[tuple[str, int]]
) -> dict[TopicPartitionKey, int]:
    """Stored next offsets of these projectors for these topic-partitions (missing = not started)."""
    wanted = set(topic_partitions)
    topics = {t for t, _ in wanted}
    if not wanted or not names:
        return {}
    rows = conn.execute(
        sa.select(offsets.c.consumer, offsets.c.topic, offsets.c.partition, offsets.c.next_offset).where(
            offsets.c.consumer.in_(list(names)), offsets.c.topic.in_(sorted(topics))
        )
    ).all()
    return {(c, t, p): n for c, t, p, n in rows if (t, p) in wanted}


_OFFSET_COLUMNS = (offsets.c.consumer, offsets.c.topic, offsets.c.partition, offsets.c.next_offset)
_LOCK = (
    sa.select(*_OFFSET_COLUMNS)
    .where(
        offsets.c.consumer.in_(sa.bindparam("consumers", expanding=True)),
        offsets.c.topic.in_(sa.bindparam("topics", expanding=True)),
        offsets.c.partition.in_(sa.bindparam("partitions", expanding=True)),
    )
    .order_by(*_OFFSET_COLUMNS[:3])
)
"""The offset rows a batch advances (built once: a batch of the live rate is small)."""
_LOCK_FOR_UPDATE = _LOCK.with_for_update()


def lock_offsets(conn: Connection, keys: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    """Lock (PostgreSQL: FOR UPDATE, in key order) and read the offsets a batch will advance.

    Missing rows are created at -1, then locked, so that there is a row to lock: two consumers that
    both think they own a partition are serialized here, and the later one sees the newer
    offsets and skips what the first one stored. SQLite writers are serialized by BEGIN
    IMMEDIATE already.
    """
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    query = _LOCK_FOR_UPDATE if conn.dialect.name == "postgresql" else _LOCK
    params = {
        "consumers": sorted({n for n, _, _ in wanted}),
        "topics": sorted({t for _, t, _ in wanted}),
        "partitions": sorted({p for _, _, p in wanted}),
    }
    found = {(c, t, p): n for c, t, p, n in conn.execute(query, params).all()}
    missing = [k for k in wanted if k not in found]
    if missing:  # only a partition's first batch: the rows to lock are created, then locked
        rows = [{"consumer": n, "topic": t, "partition": p, "next_offset": -1} for n, t, p in missing]
        insert_ignore(conn, offsets, rows, ["consumer", "topic", "partition"])
        found = {(c, t, p): n for c, t, p, n in conn.execute(query, params).all()}
    return {k: found.get(k, -1) for k in wanted}


def store_offsets(conn: Connection, positions: Mapping[TopicPartitionKey, int]) -> None:
    """Write next offsets (inside the batch's transaction)."""
    rows = [
        {"consumer": n, "topic": t, "partition": p, "next_offset": o}
        for (n, t, p), o in sorted(positions.items())
    ]
    upsert(conn, offsets, rows, ["consumer", "topic", "partition"])
