"""Which errors of a batch's store transaction are one record's, and which records they are.

An error the store raises is either the infrastructure's (the server is down, the database is
locked, the disk is full, the code and the schema disagree): the batch is retried, and
`/healthz` says so meanwhile; or a record's (a value the column cannot hold, a constraint a
value breaks, an exception a projector raises on a value: OverflowError, DataError,
IntegrityError...): the records are found by trying parts of the batch, each try rolled back,
and left out (the live runner dead-letters them, a replay skips them), and the rest is applied.
Retrying such a batch would fail for ever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from convdb.consumers._apply import apply_batch
from convdb.consumers.base import Batch, ConsumedRecord, Projector
from convdb.infra.errors import PublishError
from convdb.schemas.errors import InvalidRecordError

T = TypeVar("T")

_INFRASTRUCTURE: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,  # connection refused or lost, database locked, disk full or I/O
    sa_exc.InterfaceError,
    sa_exc.InternalError,
    sa_exc.ProgrammingError,  # a missing table, a privilege: the same for every record
    sa_exc.NotSupportedError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,  # the connection pool
    sa_exc.ResourceClosedError,
    PublishError,  # the DLQ copy was not made durable: the broker, not the record
    OSError,
    MemoryError,
)


def is_infrastructure(error: BaseException) -> bool:
    """True for an error no record causes (retry the batch), False for one a record may (isolate)."""
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, _INFRASTRUCTURE)


Try = Callable[[Sequence[T]], BaseException | None]
"""Apply a part of the batch (rolled back): the error it raised, None if it applied."""


def culprits(error: BaseException, records: Sequence[T], attempt: Try[T]) -> list[tuple[T, BaseException]]:
    """The records to blame for the batch's `error`, each with its own error: `refused`, or []
    at once when the error is the infrastructure's.

    An infrastructure error of a try propagates.
    """
    return [] if is_infrastructure(error) else refused(records, attempt)


def without(records: Sequence[T], found: Sequence[tuple[T, BaseException]]) -> list[T]:
    """The records but the ones found (by identity: records are not hashable)."""
    gone = {id(r) for r, _ in found}
    return [r for r in records if id(r) not in gone]


def refusal(error: BaseException) -> InvalidRecordError:
    """The error a refused record is dead-lettered with (the store's error is its cause)."""
    refused_by = InvalidRecordError(f"the store refuses it: {type(error).__name__}: {first_line(error)}")
    refused_by.__cause__ = error
    return refused_by


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (SQLAlchemy appends the statement), at most 500 characters."""
    return (str(exc).splitlines() or [type(exc).__name__])[0][:500]


def refused(records: Sequence[T], attempt: Try[T]) -> list[tuple[T, BaseException]]:
    """The records the store refuses, each with its error.

    First by halves, which finds every record that fails on its own; when none does (a record
    fails only after others, e.g. a sum that overflows), the last record of the shortest failing
    prefix. Empty when the whole batch does not fail again (the error was not the records').
    An infrastructure error of a try propagates.
    """
    alone = _bisect(records, attempt)
    if alone:
        return alone
    found = _shortest_failing_prefix(records, attempt)
    return [] if found is None else [found]


def _bisect(records: Sequence[T], attempt: Try[T]) -> list[tuple[T, BaseException]]:
    if not records:
        return []
    error = attempt(records)
    if error is None:
        return []
    if len(records) == 1:
        return [(records[0], error)]
    half = len(records) // 2
    return _bisect(records[:half], attempt) + _bisect(records[half:], attempt)


def _shortest_failing_prefix(records: Sequence[T], attempt: Try[T]) -> tuple[T, BaseException] | None:
    error = attempt(records) if records else None
    if error is None:
        return None
    low, high = 1, len(records)  # records[:high] fails, with `error`
    while low < high:
        middle = (low + high) // 2
        found = attempt(records[:middle])
        if found is None:
            low = middle + 1
        else:
            high, error = middle, found
    return records[high - 1], error


def rolled_back(
    engine: Engine, projectors: Sequence[Projector], namespace: str, ends: Mapping[tuple[str, int], int]
) -> Try[ConsumedRecord]:
    """The `Try` of a batch's transaction: apply a part, roll it back; a record's error, or None.

    An infrastructure error is raised, not returned: it says nothing about the part.
    """

    def attempt(part: Sequence[ConsumedRecord]) -> BaseException | None:
        try:
            with engine.connect() as conn, conn.begin() as txn:
                apply_batch(conn, projectors, namespace, Batch(list(part)), ends)
                txn.rollback()
        except Exception as exc:  # noqa: BLE001 - sorted below
            if is_infrastructure(exc):
                raise
            return exc
        return None

    return attempt
