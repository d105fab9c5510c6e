"""The reconciler's plumbing between faust and `projections/effects.py`: decode, fold, send.

No decisions are made here: `ingest` folds a record into the operation's state in the table,
`tick` hands each open operation and the current time to `decide`, runs the lookups it asks
for, and publishes what `decide`/`on_lookup` return. faust runs at-least-once, so the table
may lag what was already sent after a crash: the transitions' ids are deterministic, and every
reader (this fold included) drops an id it already applied.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from convdb.consumers.reconciler.metrics import ReconcilerMetrics
from convdb.consumers.reconciler.resolvers import Resolver
from convdb.infra import tracing
from convdb.infra.dlq import error_headers
from convdb.infra.ops import Health
from convdb.infra.settings import Settings
from convdb.projections import effects
from convdb.projections.effects import LookupResult, OperationState
from convdb.schemas import ActionEvent, AvroModel, Codec, LedgerRecord, ObservationEvent, Receipt
from convdb.schemas.errors import InvalidRecordError, SchemaError
from convdb.schemas.records import LEDGER_TYPES

logger = logging.getLogger(__name__)

INPUT_TYPES: tuple[type[AvroModel], ...] = (*LEDGER_TYPES, Receipt, ActionEvent, ObservationEvent)
"""Record types the reconciler folds; other events on its topics are skipped after decoding."""

RESEND_AFTER_S = 10.0
"""A sent transition not yet seen back on the effects topic is sent again after this long."""

Send = Callable[[str, bytes, bytes, list[tuple[str, bytes]] | None], Awaitable[None]]
"""(topic suffix, key, value, headers) -> durable; the faust side of the wiring."""


@dataclass
class Counters:
    """What the reconciler did since it started (logged at INFO whenever a tick sends something)."""

    folded: int = 0
    dead_lettered: int = 0
    emitted: int = 0
    lookups: int = 0


@dataclass
class Reconciler:
    """Folds inputs into a table of operations and publishes the machine's transitions."""

    settings: Settings
    codec: Codec
    table: Any
    """faust Table (or any mutable mapping): operation_id bytes -> state JSON bytes."""
    send: Send
    resolvers: Mapping[str, Resolver]
    policy: effects.ReconcilePolicy = field(init=False)
    counters: Counters = field(default_factory=Counters)
    metrics: ReconcilerMetrics = field(default_factory=ReconcilerMetrics)
    health: Health = field(default_factory=Health)
    _traces: dict[str, Any] = field(default_factory=dict)
    """operation_id -> trace context of its latest record: what the transitions continue (memory only)."""
    _in_flight: dict[str, float] = field(default_factory=dict)
    _lookup_failures: dict[str, int] = field(default_factory=dict)
    _undecidable_ops: set[str] = field(default_factory=set)
    _unsent_since: float = 0.0

    def __post_init__(self) -> None:
        self.health.stall_after_s = self.settings.ops.stall_after_s
        rc = self.settings.reconciler
        self.policy = effects.ReconcilePolicy(
            receipt_grace=timedelta(seconds=rc.receipt_grace_s), max_lookups=rc.max_lookups
        )

    async def ingest(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Decode one input and fold it into its operation's state (poison goes to the DLQ)."""
        with tracing.traced(headers, "reconciler ingest", **{"messaging.destination.name": topic}):
            await self._ingest(topic, partition, offset, key, value, tracing.extract(headers))

    async def _ingest(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, trace: Any
    ) -> None:
        value = value or b""  # a tombstone is not a record: it fails decoding like garbage
        try:
            record = self.codec.decode(value)
        except SchemaError as exc:
            return await self._dead_letter(topic, partition, offset, key, value, exc)
        except Exception as exc:  # noqa: BLE001 - whatever one record makes the decoder raise
            error = InvalidRecordError(f"does not decode: {type(exc).__name__}: {exc}")
            return await self._dead_letter(topic, partition, offset, key, value, error)
        if not isinstance(record, INPUT_TYPES):
            return None
        operation_id = effects.operation_id_of(record)
        if operation_id is None:
            return None
        state = self.load(operation_id)
        try:
            new = effects.fold(state or effects.initial(operation_id), record)
        except Exception as exc:  # noqa: BLE001 - an illegal transition, another tenant's record, a value
            return await self._dead_letter(topic, partition, offset, key, value, exc)
        if trace is not None:
            self._traces[operation_id] = trace
        if isinstance(record, LedgerRecord):
            self._in_flight.pop(record.id, None)
        if new != state:
            self.table[operation_id.encode()] = new.model_dump_json().encode()
            self.counters.folded += 1
        return None

    def load(self, operation_id: str) -> OperationState | None:
        """The operation's state in the table, if any."""
        raw = self.table.get(operation_id.encode())
        return None if raw is None else OperationState.model_validate_json(raw)

    def open_operations(self) -> Iterator[OperationState]:
        """Every open operation in the table (this worker's partitions)."""
        for raw in list(self.table.values()):
            state = OperationState.model_validate_json(raw)
            if state.is_open:
                yield state

    async def tick(self, now: datetime | None = None) -> int:
        """Run the machine's deadline decisions for every open operation; returns records sent."""
        # The clock lives here, in the plumbing; the machine only sees it as data.
        now = now or datetime.now(UTC)
        sent = 0
        for state in self.open_operations():
            try:
                sent += await self._decide(state, now)
            except _SendError as exc:  # the broker: the next tick decides again
                self._unsent_since = self._unsent_since or time.monotonic()
                unsent = time.monotonic() - self._unsent_since
                self.health.problem("publish", f"transitions not sent for {unsent:.0f}s: {exc}")
                logger.warning("tick stopped, a transition was not sent: %s", exc)
                break
            except Exception as exc:  # noqa: BLE001 - one operation's data: the others go on
                self._undecidable(state, exc)
        else:
            self._unsent_since = 0.0
            self.health.problem("publish", None)
        self.metrics.observe_table(
            OperationState.model_validate_json(raw) for raw in list(self.table.values())
        )
        self.health.beat()
        if sent:
            logger.info("tick sent %d transition(s); totals %s", sent, self.counters)
        return sent

    async def _decide(self, state: OperationState, now: datetime) -> int:
        """Decide one open operation and send what the machine asks for; records sent."""
        resolver = self.resolvers.get(state.tool_name)
        decision = effects.decide(state, now, self.policy, has_resolver=resolver is not None)
        records = decision.emit
        if decision.lookup and resolver is not None and self._due(state):
            records = await self._lookup(resolver, state, now)
        return await self._emit(records)

    def _undecidable(self, state: OperationState, exc: Exception) -> None:
        """An operation whose records the machine cannot decide on (logged once, counted)."""
        self.metrics.undecidable.inc()
        if state.operation_id not in self._undecidable_ops:
            self._undecidable_ops.add(state.operation_id)
            logger.error(
                "operation %s cannot be decided, skipped on every tick: %s: %s",
                state.operation_id[:200], type(exc).__name__, exc,
            )  # fmt: skip

    def _due(self, state: OperationState) -> bool:
        # A lookup is pointless while an answer we already sent is on its way back to the table.
        keys = ("confirmed", f"retry@{state.attempt}", f"unknown@{state.attempt}")
        return not any(self._recently_sent(effects.transition_id(state.operation_id, k)) for k in keys)

    async def _lookup(
        self, resolver: Resolver, state: OperationState, now: datetime
    ) -> tuple[LedgerRecord, ...]:
        self.counters.lookups += 1
        try:
            result = await asyncio.to_thread(resolver.lookup, state)
        except Exception as exc:  # noqa: BLE001 - a third-party resolver's bug is an 'unknown' answer
            logger.exception("resolver for %s failed on %s", state.tool_name, state.operation_id)
            result = LookupResult(outcome="unknown", detail=f"resolver error {type(exc).__name__}: {exc}")
        failures = self._lookup_failures.get(state.operation_id, 0)
        records = effects.on_lookup(state, result, now, self.policy, failures)
        if result.outcome == "unknown" and not records:
            self._lookup_failures[state.operation_id] = failures + 1
        else:
            self._lookup_failures.pop(state.operation_id, None)
        self.metrics.lookups.labels(result.outcome).inc()
        logger.info("lookup %s -> %s (%s)", state.operation_id, result.outcome, result.detail)
        return records

    def _recently_sent(self, record_id: str) -> bool:
        sent_at = self._in_flight.get(record_id)
        return sent_at is not None and time.monotonic() - sent_at < RESEND_AFTER_S

    async def _emit(self, records: tuple[LedgerRecord, ...]) -> int:
        sent = 0
        for record in records:
            if self._recently_sent(record.id):
                continue
            parent = self._traces.get(record.operation_id)
            value = self.codec.encode(record)
            with tracing.span(f"reconciler {record.kind}", parent=parent, attributes=_attributes(record)):
                headers = tracing.inject(None)  # faust sends: the one writer outside infra.producer
                try:
                    await self.send("effects", record.conversation_id.encode(), value, headers)
                except Exception as exc:
                    raise _SendError(f"{record.kind} for {record.operation_id[:200]}: {exc}") from exc
            self._in_flight[record.id] = time.monotonic()
            self.counters.emitted += 1
            self.metrics.resolved.labels(record.kind).inc()
            sent += 1
            logger.info("emitted %s for %s (id %s)", record.kind, record.operation_id, record.id)
        return sent

    async def _dead_letter(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes, exc: Exception
    ) -> None:
        self.counters.dead_lettered += 1
        self.metrics.dead_letters.inc()
        logger.error(
            "poison record %s[%s]@%s -> DLQ: %s: %s", topic, partition, offset, type(exc).__name__, exc
        )
        headers = error_headers("reconciler", topic, partition, offset, exc)
        await self.send("dlq", key or b"", value, headers)


class _SendError(Exception):
    """A transition was not sent (the broker): not the operation's fault, retried next tick."""


def _attributes(record: LedgerRecord) -> dict[str, str]:
    return {"convdb.operation_id": record.operation_id, "convdb.conversation_id": record.conversation_id}
