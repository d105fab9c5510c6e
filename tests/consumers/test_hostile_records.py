"""Records from an older or foreign producer that break the rules: DLQ, and the service goes on.

A NUL in a text, a control character or 10k characters in an id, a key that is not the record's
conversation: each would have broken a PostgreSQL insert (and been retried until the service
died, on every restart). Here they are dead-lettered on both stores, the good records around
them are applied, and `/healthz` stays truthful. A value the store itself refuses (a data
error no rule foresaw) is isolated by bisection and dead-lettered too.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import httpx
import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from sqlalchemy.engine import Connection

from convdb.consumers.base import ConsumedRecord, Rejection, TableProjector
from convdb.consumers.index import IndexConsumer
from convdb.consumers.metrics import MetricsServer
from convdb.consumers.runner import Runner
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.store import bulk_insert
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import apply_topics, producer_config
from convdb.schemas import EventEnvelope
from convdb.schemas.topics import EVENTS
from tests.conftest import wait_until
from tests.consumers.builders import conversation
from tests.consumers.procs import metric_value
from tests.consumers.test_poison import read_dlq
from tests.consumers.verify import scalar
from tests.schemas.test_validation import foreign_bytes

pytestmark = pytest.mark.kafka


def hostile(base: EventEnvelope) -> list[tuple[str, bytes, str]]:
    """(key, value, what) of records a foreign producer could write, each breaking one rule."""
    nul_text = base.model_construct(**{**base.__dict__, "content": "nul \x00 in text"})
    nul_id = base.model_construct(**{**base.__dict__, "conversation_id": "c\x00"})
    long_tenant = base.model_construct(**{**base.__dict__, "tenant_id": "t" * 10_000})
    return [
        (base.conversation_id, foreign_bytes(nul_text), "content"),
        ("c\x00", foreign_bytes(nul_id), "conversation_id"),
        (base.conversation_id, foreign_bytes(long_tenant), "tenant_id"),
        ("another-conversation", foreign_bytes(base), "key"),
    ]


def run_runner(runner: Runner) -> threading.Thread:
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    return thread


def test_foreign_records_that_break_the_rules_go_to_the_dlq_on_both_stores(make_settings, store_url) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(store_url=store_url)
    apply_topics(settings)
    producer = Producer(producer_config(settings))
    topic = EVENTS.name(settings.namespace)
    from convdb.schemas import SingleObjectCodec

    codec = SingleObjectCodec()
    good = conversation("good", 12)
    first_message = good[0]  # a user MessageEvent
    for event in good[:6]:
        producer.produce(topic, codec.encode(event), event.conversation_id)
    for key, value, _what in hostile(first_message):
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0

    runner = Runner(settings, [ViewsConsumer(), IndexConsumer(), StatsConsumer()], name="hostile")
    server = MetricsServer(runner.metrics).start()
    thread = run_runner(runner)
    try:
        for event in good[6:]:
            producer.produce(topic, codec.encode(event), event.conversation_id)
        assert producer.flush(30) == 0
        wait_until(
            lambda: scalar(store_url, "SELECT COUNT(*) FROM index_events") == 12, 60, "the 12 good events"
        )
        dead = read_dlq(settings, 4)
        messages = sorted(h["convdb.error.message"] for _k, _v, h in dead)
        assert {h["convdb.error.class"] for _k, _v, h in dead} == {"InvalidRecordError"}
        for what in ("content", "conversation_id", "tenant_id", "key"):
            assert any(what in m for m in messages), (what, messages)
        assert all(len(m) < 1000 for m in messages)  # 10k characters are not echoed
        health = httpx.get(f"http://127.0.0.1:{server.port}/healthz")
        assert health.status_code == 200, health.text
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics").text
        assert metric_value(metrics, "convdb_consumer_dlq_total") == 4
    finally:
        runner.stop()
        thread.join(30)
        server.stop()
    assert not thread.is_alive()


narrow = sa.MetaData()
seqs = sa.Table("narrow_seqs", narrow, sa.Column("event_id", sa.String(64), primary_key=True),
                sa.Column("tag", sa.String(8)))  # fmt: skip


class NarrowConsumer(TableProjector):
    """A plugin whose table cannot hold every value: PostgreSQL refuses a tag over 8 characters."""

    name = "narrow"
    topics = (EVENTS,)
    metadata = narrow
    digest_of = ()

    bulk = False
    """Write through the sink's hot path (binary COPY on PostgreSQL) instead of an INSERT."""

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """One row per event."""
        rows = [{"event_id": r.value.id, "tag": _tag(r.value.seq)} for r in batch]
        if rows and self.bulk:
            bulk_insert(connection, seqs, ["event_id", "tag"], [(r["event_id"], r["tag"]) for r in rows])
        elif rows:
            connection.execute(sa.insert(seqs), rows)
        return ()


def _tag(seq: int) -> str:
    return str(seq) if seq < 10_000 else f"too-long-{seq}"


class NarrowBulkConsumer(NarrowConsumer):
    """The same, through COPY."""

    bulk = True


@pytest.mark.parametrize("projector", [NarrowConsumer, NarrowBulkConsumer])
def test_a_value_the_store_refuses_is_isolated_and_dead_lettered(make_settings, pg_url, projector) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(store_url=pg_url)
    apply_topics(settings)
    producer = Producer(producer_config(settings))
    topic = EVENTS.name(settings.namespace)
    from convdb.schemas import SingleObjectCodec

    codec = SingleObjectCodec()
    events = conversation("wide", 9)
    too_big = events[4].model_copy(update={"seq": 40_000, "id": "too-big"})
    for event in [*events[:4], too_big, *events[4:]]:
        producer.produce(topic, codec.encode(event), event.conversation_id)
    assert producer.flush(30) == 0
    runner = Runner(settings, [projector()], name="narrow", store_retry_s=5)
    thread = run_runner(runner)
    try:
        wait_until(lambda: scalar(pg_url, "SELECT COUNT(*) FROM narrow_seqs") == 9, 60, "the 9 storable rows")
        ((_key, _value, headers),) = read_dlq(settings, 1)
        assert headers["convdb.error.class"] == "InvalidRecordError"
        assert "store refuses" in headers["convdb.error.message"]
        assert runner.metrics.report()[0] is True
    finally:
        runner.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_healthz_reports_a_consumer_that_is_not_making_progress() -> None:
    from convdb.consumers.metrics import ConsumerMetrics

    metrics = ConsumerMetrics("stuck", stall_after_s=60.0)
    metrics.last_commit -= 600  # the loop polls, but nothing was committed for 10 minutes
    metrics.set_lag("ns.events", 0, 0)
    assert metrics.report()[0] is True  # idle, nothing behind: healthy
    metrics.set_lag("ns.events", 0, 25)
    ok, details = metrics.report()
    assert not ok and "25 record(s) behind" in details["problems"]["no_progress"]
    metrics.batch_done(25, 0, 0.1)
    metrics.set_lag("ns.events", 0, 0)
    metrics.retrying = (0.0, "OperationalError: connection refused")
    ok, details = metrics.report()
    assert not ok and "connection refused" in details["problems"]["store"]
