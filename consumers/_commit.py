"""One batch's store transaction, as the runner commits it: the records a projector or the store
refuses are dead-lettered, the rest is applied, and only the infrastructure's errors are retried.

Every exception from folding or storing one record is that record's: the record is found
(`convdb.consumers._isolate`), dead-lettered with the error (once, however often the transaction
is tried: `convdb.consumers.dlq.BatchLetters`), and the batch applied without it. An error of the
store itself (connection refused, database locked, disk) or of the DLQ's broker is retried with
backoff (`convdb.infra.retry`), shown on `/healthz` meanwhile (`ConsumerMetrics.retrying`), and
raised as `StoreError` after `retry_s`: the process ends, visibly, instead of skipping records.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Message
from sqlalchemy.engine import Engine

from convdb.consumers._apply import apply_batch
from convdb.consumers._isolate import culprits, first_line, refusal, rolled_back, without
from convdb.consumers.base import Batch, ConsumedRecord, Projector
from convdb.consumers.dlq import BatchLetters, DeadLetters, Poison, Where
from convdb.consumers.errors import StoreError
from convdb.consumers.metrics import ConsumerMetrics
from convdb.infra.retry import Backoff

logger = logging.getLogger(__name__)

Ends = dict[tuple[str, int], int]
"""The next offset of each topic-partition a batch read (its poison included)."""


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
        self, records: list[ConsumedRecord], raw: dict[Where, Message], ends: Ends, poison: list[Poison]
    ) -> tuple[int, int]:
        """Dead-letter `poison` and what is refused, apply the rest and commit; (records applied,
        records dead-lettered).

        Raises:
            StoreError: the store (or the DLQ) kept failing for `retry_s`.
        """
        letters = BatchLetters(self.dead, raw, poison)
        backoff = Backoff(self.retry_s)
        while True:
            try:
                applied = self._commit(records, ends, letters)
            except Exception as exc:  # noqa: BLE001 - sorted into a record's error or the store's
                found = self._culprits(exc, records, ends)
                if found:
                    for record, error in found:
                        letters.add((record.topic, record.partition, record.offset), refusal(error))
                    records = without(records, found)
                else:
                    self._wait_or_give_up(backoff, exc)
            else:
                self.metrics.retrying = None
                return applied, len(letters)

    def _commit(self, records: list[ConsumedRecord], ends: Ends, letters: BatchLetters) -> int:
        letters.send()  # before the transaction: their delivery overlaps it
        with self.engine.begin() as conn:
            applied, rejected = apply_batch(conn, self.projectors, self.namespace, Batch(records), ends)
            for rejection in rejected:
                record = rejection.record
                letters.add((record.topic, record.partition, record.offset), rejection.error)
            # The DLQ copy must be durable before the offsets that skip it are.
            letters.wait_durable()
        return applied

    def _culprits(
        self, error: BaseException, records: list[ConsumedRecord], ends: Ends
    ) -> list[tuple[ConsumedRecord, BaseException]]:
        """The records the store refuses, with why; [] for an error of the infrastructure, or when
        one interrupts the search (the batch is then retried)."""
        try:
            return culprits(error, records, rolled_back(self.engine, self.projectors, self.namespace, ends))
        except Exception as exc:  # noqa: BLE001 - the store failed meanwhile: retry the batch
            logger.warning("store error while isolating a refused record: %s: %s", type(exc).__name__, exc)
            return []

    def _wait_or_give_up(self, backoff: Backoff, error: Exception) -> None:
        """Wait before the batch is tried again, on `/healthz` meanwhile.

        Raises:
            StoreError: past the deadline.
        """
        wait = backoff.failed()
        since, why = backoff.failing_since, f"{type(error).__name__}: {first_line(error)}"
        self.metrics.retrying = None if since is None else (since, why)
        if wait is None:
            raise StoreError(f"store {self.engine.url!r} failing for {self.retry_s}s: {error}") from error
        logger.warning("store error, retrying batch in %.1fs: %s: %s", wait, type(error).__name__, error)
        backoff.wait(wait)
