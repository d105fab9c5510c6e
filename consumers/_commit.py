"""One batch's store transaction, as the runner commits it: the records a projector or the store
refuses are dead-lettered, the rest is applied, and only the infrastructure's errors are retried.

Every exception from folding or storing one record is that record's: the record is found
(`convdb.consumers._isolate`), dead-lettered with the error, and the batch applied without it. An
error of the store itself (connection refused, database locked, disk) or of the DLQ's broker is
retried with backoff, shown on `/healthz` meanwhile (`ConsumerMetrics.retrying`), and raised as
`StoreError` after `retry_s`: the process ends, visibly, instead of skipping records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Message
from sqlalchemy.engine import Engine

from convdb.consumers._apply import apply_batch
from convdb.consumers._isolate import is_infrastructure, refused, rolled_back
from convdb.consumers.base import Batch, ConsumedRecord, Projector
from convdb.consumers.dlq import DeadLetters
from convdb.consumers.errors import StoreError
from convdb.consumers.metrics import ConsumerMetrics
from convdb.infra.errors import PublishError
from convdb.infra.records import coordinates
from convdb.schemas.errors import InvalidRecordError

logger = logging.getLogger(__name__)

Poison = tuple[Message, BaseException]
Where = tuple[str, int, int]


@dataclass
class _Letters:
    """A batch's dead letters: what was sent, to send each once per try that commits."""

    raw: dict[Where, Message]
    poison: list[Poison]
    sent: set[Where] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.sent = {coordinates(m) for m, _ in self.poison}

    def add(self, record: ConsumedRecord, error: BaseException, dead: DeadLetters) -> None:
        where = (record.topic, record.partition, record.offset)
        if where not in self.sent:  # a retried transaction does not send it twice
            self.sent.add(where)
            self.poison.append((self.raw[where], error))
            dead.send(self.raw[where], error)


@dataclass
class BatchWriter:
    """Commits batches into the store for a runner's projectors."""

    engine: Engine
    projectors: Sequence[Projector]
    namespace: str
    dead: DeadLetters
    metrics: ConsumerMetrics
    retry_s: float = 60.0

    def write(
        self,
        records: list[ConsumedRecord],
        raw: dict[Where, Message],
        ends: dict[tuple[str, int], int],
        poison: list[Poison],
    ) -> int:
        """Dead-letter `poison` and what is refused, apply the rest and commit; records applied.

        Raises:
            StoreError: the store (or the DLQ) kept failing for `retry_s`.
        """
        deadline = time.monotonic() + self.retry_s
        delay = 0.1
        letters = _Letters(raw, poison)
        resend = True  # every dead letter of the batch, again after a try whose DLQ writes failed
        while True:
            try:
                if resend:
                    for msg, error in letters.poison:
                        self.dead.send(msg, error)
                    resend = False
                applied = self._commit(records, ends, letters)
                self.metrics.retrying = None
                return applied
            except Exception as exc:  # noqa: BLE001 - sorted into a record's error or the store's
                culprits = [] if is_infrastructure(exc) else self._refused(records, ends)
                if culprits:
                    for record, error in culprits:
                        letters.add(record, _refusal(error), self.dead)
                    gone = {id(r) for r, _ in culprits}
                    records = [r for r in records if id(r) not in gone]
                    continue
                resend = resend or isinstance(exc, PublishError)
                since = self.metrics.retrying[0] if self.metrics.retrying else time.monotonic()
                self.metrics.retrying = (since, f"{type(exc).__name__}: {first_line(exc)}")
                if time.monotonic() > deadline:
                    raise StoreError(f"store {self.engine.url!r} failing for {self.retry_s}s: {exc}") from exc
                logger.warning("store error, retrying batch in %.1fs: %s: %s", delay, type(exc).__name__, exc)
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def _commit(
        self, records: list[ConsumedRecord], ends: dict[tuple[str, int], int], letters: _Letters
    ) -> int:
        with self.engine.begin() as conn:
            applied, rejected = apply_batch(conn, self.projectors, self.namespace, Batch(records), ends)
            for rejection in rejected:
                letters.add(rejection.record, rejection.error, self.dead)
            # The DLQ copy must be durable before the offsets that skip it are.
            self.dead.wait_durable()
        return applied

    def _refused(
        self, records: list[ConsumedRecord], ends: dict[tuple[str, int], int]
    ) -> list[tuple[ConsumedRecord, BaseException]]:
        """The records whose rows the store refuses, with why; [] when none is found, or when an
        infrastructure error interrupts the search (the batch is then retried)."""
        try:
            return refused(records, rolled_back(self.engine, self.projectors, self.namespace, ends))
        except Exception as exc:  # noqa: BLE001 - the store failed meanwhile: retry the batch
            logger.warning("store error while isolating a refused record: %s: %s", type(exc).__name__, exc)
            return []


def _refusal(error: BaseException) -> InvalidRecordError:
    refusal = InvalidRecordError(f"the store refuses it: {type(error).__name__}: {first_line(error)}")
    refusal.__cause__ = error
    return refusal


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (SQLAlchemy appends the statement), at most 500 characters."""
    return (str(exc).splitlines() or [type(exc).__name__])[0][:500]
