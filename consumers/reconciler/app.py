"""The faust-streaming app of the reconciler: one agent over events + effects + receipts, a timer.

The three input topics are co-partitioned by conversation_id, and an operation_id starts with
its conversation_id, so an operation's records all arrive on one partition number and its
table entry lives in the matching changelog partition. faust runs `exactly_once` where
aiokafka's transactions work (Apache Kafka) and `at_least_once` on the embedded broker, which
cannot serve them (capability record, `aiokafka_transactions`); either way every transition is
idempotent. Records are raw bytes in faust and go through our Avro codec, never faust Records
or pickle. The table's values are `OperationState` JSON (internal state, not a wire contract).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import faust
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]  # aiokafka ships no types

from convdb.consumers.reconciler.core import Reconciler
from convdb.consumers.reconciler.resolvers import Resolver, load_resolvers
from convdb.infra.capabilities import capabilities
from convdb.infra.kafka import group_timeouts_ms
from convdb.infra.procs import exit_after
from convdb.infra.settings import Settings
from convdb.schemas import AvroModel, make_codec
from convdb.schemas.topics import DLQ, EFFECTS, EVENTS, RECEIPTS, Topic

logger = logging.getLogger(__name__)

APP_NAME = "reconciler"
"""The consumer group is '<namespace>.reconciler'."""

TABLE_NAME = "operations"

CHANGELOG: Topic[AvroModel] = Topic(
    f"{APP_NAME}-{TABLE_NAME}-changelog",
    (),
    {"cleanup.policy": "compact"},
    "faust changelog of the reconciler's table of operations",
)
"""The table's changelog, named as faust names it (`<app id>-<table>-changelog`)."""

INPUTS = (EVENTS, EFFECTS, RECEIPTS)
"""Topics the reconciler's agent consumes."""

_RAW: Mapping[str, Any] = MappingProxyType({"key_serializer": "raw", "value_serializer": "raw"})


def faust_config(settings: Settings) -> dict[str, Any]:
    """faust App settings for this deployment (embedded broker: short timeouts, batches of one)."""
    caps = capabilities(settings)
    session_ms, heartbeat_ms = group_timeouts_ms(settings)
    servers = (settings.bootstrap_servers or "").split(",")
    conf: dict[str, Any] = {
        "broker": [f"kafka://{s.strip()}" for s in servers if s.strip()],
        "store": "memory://",
        "datadir": str(settings.data_dir / APP_NAME),
        "processing_guarantee": "exactly_once" if caps.aiokafka_transactions else "at_least_once",
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        "topic_disable_leader": True,
        "web_enabled": False,
        "consumer_auto_offset_reset": "earliest",
        "table_standby_replicas": 0,
        "broker_commit_interval": 1.0,
        "broker_session_timeout": session_ms / 1000,
        "broker_heartbeat_interval": heartbeat_ms / 1000,
    }
    if not caps.list_offsets_latest_exact:
        # Embedded broker workaround: its ListOffsets is wrong for multi-record batches, and faust
        # reads the changelog's end through it: one record per batch, or table state is lost on restart.
        conf["producer_max_batch_size"] = 1
    return conf


_TIMER_PARTITIONS: ContextVar[set[int] | None] = ContextVar("reconciler_timer_partitions", default=None)
"""Partitions the running timer tick sent to (set only inside the tick's task)."""


async def commit_timer_output(app: faust.App, partitions: set[int]) -> None:
    """Commit the transactions a timer tick wrote into (exactly_once only).

    faust commits a partition's transaction only together with newly consumed offsets, so a
    transition the timer sent on an idle partition would stay in an open transaction, invisible
    to read_committed readers, until the next input arrives there. New offsets are committed
    first; the timer's transactions are then closed with the offsets already committed.
    """
    await app.consumer.commit()
    # faust has no public view of it (nor is it on faust's ConsumerT)
    committed = app.consumer._committed_offset  # type: ignore[attr-defined]  # noqa: SLF001
    # aiokafka wants its own TopicPartition; faust keys restored offsets by its TP tuple.
    offsets = {
        TopicPartition(tp.topic, tp.partition): o
        for tp, o in committed.items()
        if tp.partition in partitions and o is not None
    }
    if offsets:
        await app.consumer.transactions.commit(offsets, start_new_transaction=True)


def build_app(settings: Settings, resolvers: Mapping[str, Resolver] | None = None) -> faust.App:
    """The reconciler's faust App: table, agent and timer, wired to a `Reconciler`."""
    ns = settings.namespace
    (settings.data_dir / APP_NAME).mkdir(parents=True, exist_ok=True)
    app = faust.App(settings.group(APP_NAME), **faust_config(settings))
    source = app.topic(*(t.name(ns) for t in INPUTS), partitions=settings.partitions, **_RAW)
    table = app.Table(TABLE_NAME, partitions=settings.partitions, key_type=bytes, value_type=bytes)
    outputs = {
        "effects": app.topic(EFFECTS.name(ns), partitions=settings.partitions, **_RAW),
        "dlq": app.topic(DLQ.name(ns), partitions=settings.partitions, **_RAW),
    }

    async def send(suffix: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]] | None) -> None:
        # Wait for the broker's ack: a transition counts as sent only once it is durable.
        fut = await outputs[suffix].send(key=key, value=value, headers=headers)
        metadata = await fut
        touched = _TIMER_PARTITIONS.get()
        if touched is not None:
            touched.add(metadata.partition)

    reconciler = Reconciler(
        settings=settings,
        codec=make_codec(settings.schema_registry_url),
        table=table,
        send=send,
        resolvers=load_resolvers(settings) if resolvers is None else resolvers,
    )

    @app.agent(source, name=f"{APP_NAME}.ingest")
    async def ingest(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            headers = msg.headers.items() if isinstance(msg.headers, Mapping) else msg.headers
            await reconciler.ingest(
                msg.topic, msg.partition, msg.offset, msg.key, event.value, list(headers or ())
            )

    @app.timer(interval=settings.reconciler.tick_interval_s, name=f"{APP_NAME}.tick")
    async def tick() -> None:
        if app.in_recovery or app.rebalancing:
            return
        touched: set[int] = set()
        token = _TIMER_PARTITIONS.set(touched)
        try:
            await reconciler.tick()
        finally:
            _TIMER_PARTITIONS.reset(token)
        if touched and app.in_transaction:
            await commit_timer_output(app, touched)

    app.reconciler = reconciler  # type: ignore[attr-defined]
    logger.info("reconciler app %s built; resolvers: %s", app.conf.id, sorted(reconciler.resolvers))
    return app


class Worker(faust.Worker):
    """faust's worker with a bounded stop: told to stop by a signal, it ends the process
    `stop_grace_s` later if it still runs (`convdb.infra.procs.exit_after`). aiokafka's commit and group
    leave wait for ever when every broker is gone, and an orphaned reconciler used to spin."""

    def __init__(self, app: faust.App, *, stop_grace_s: float, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.stop_grace_s = stop_grace_s

    def _schedule_shutdown(self, sig: signal.Signals) -> None:
        # mode's one entry for SIGTERM and SIGINT (its `_on_sigterm` / `_on_sigint` call it)
        exit_after(self.stop_grace_s, "reconciler")
        super()._schedule_shutdown(sig)
