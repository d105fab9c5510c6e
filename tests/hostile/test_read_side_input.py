"""The read side survives any record on the events topic, on both brokers and both stores.

Issue 21, findings 2 and 6, on `convdb consume all` as a real process: LLM usage whose token
counts sum past 2^63 (with a NaN cost and an infinite latency), which killed it on every restart;
an event of tenant umbrella forged at the next seq of an acme conversation, which was folded into
acme's view while acme's real event was dropped as a duplicate; a second event at a seq already
folded; a record too large for the DLQ. Each is folded within bounds or dead-lettered with its
reason, the real events are folded, another tenant's conversation keeps updating, `/healthz`
stays truthful, and the process restarted after them comes back and carries on.

Below it, the runner's own layers (in process): a value a store column cannot hold, only when
two records add up, is found and dead-lettered on SQLite (OverflowError) and PostgreSQL
(DataError); a store without the table is the store's error: retried, on `/healthz` and in the
metrics, never dead-lettered; an LLM title holding a NUL is published clean.
"""

from __future__ import annotations

import math
import sys
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from confluent_kafka import Producer
from sqlalchemy.engine import Connection

from convdb.consumers.base import ConsumedRecord, Rejection, TableProjector, load_rows
from convdb.consumers.dlq import OMITTED
from convdb.consumers.metrics import MetricsServer
from convdb.consumers.runner import Runner
from convdb.consumers.store import upsert
from convdb.consumers.titles import TitlesConsumer
from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE, ORIGINAL_OFFSET
from convdb.infra.kafka import apply_topics, producer_config
from convdb.infra.settings import Settings
from convdb.schemas import EventEnvelope, SingleObjectCodec
from convdb.schemas.topics import EVENTS
from tests.conftest import wait_until
from tests.consumers.builders import conversation
from tests.consumers.procs import ConsumerProcess, metric_value
from tests.consumers.test_poison import read_dlq
from tests.consumers.verify import rows, scalar
from tests.schemas.test_validation import foreign_bytes

pytestmark = [pytest.mark.kafka, pytest.mark.brokers, pytest.mark.postgres]

INT64_MAX = 2**63 - 1
CODEC = SingleObjectCodec()
GIANT = 1_010_000
"""Bytes of a record the broker takes but the DLQ's producer cannot copy with its headers."""


def produce(settings: Settings, records: Sequence[tuple[str, bytes]]) -> None:
    """Write (key, value) records to the events topic as a foreign producer would."""
    producer = Producer({**producer_config(settings), "message.max.bytes": 2_000_000})
    for key, value in records:
        producer.produce(EVENTS.name(settings.namespace), value, key)
    assert producer.flush(30) == 0


def events_of(events: Sequence[EventEnvelope]) -> list[tuple[str, bytes]]:
    return [(e.conversation_id, foreign_bytes(e)) for e in events]


def overflowing(events: list[EventEnvelope]) -> list[EventEnvelope]:
    """The LLM usage events with tokens that sum past 2^63, a NaN cost and an infinite latency."""
    return [
        e.model_copy(update={"prompt_tokens": INT64_MAX, "cost": math.nan, "latency_ms": math.inf})
        if e.kind == "llm_usage"  # type: ignore[attr-defined]
        else e
        for e in events
    ]


@pytest.fixture
def consume_all() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    yield started
    for proc in started:
        proc.stop()


def start(settings: Settings, log: Path, started: list[ConsumerProcess]) -> ConsumerProcess:
    proc = ConsumerProcess(settings, ["all"], log, batch_size=500).start()
    started.append(proc)
    return proc


def last_seq(url: str, conv: str) -> object:
    return scalar(url, f"SELECT last_seq FROM views_conversations WHERE conversation_id = '{conv}'")


def row_of(url: str, table: str, columns: str, conv: str) -> list[tuple]:  # type: ignore[type-arg]
    return rows(url, f"SELECT {columns} FROM {table} WHERE conversation_id = '{conv}'")


def test_consume_all_survives_hostile_events_and_carries_on_after_a_restart(  # noqa: PLR0915
    make_settings, store_url: str, tmp_path: Path, consume_all: list[ConsumerProcess]
) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(store_url=store_url)
    apply_topics(settings)
    acme = f"acme-{uuid.uuid4().hex[:8]}"
    umbrella = f"umbrella-{uuid.uuid4().hex[:8]}"
    ours = overflowing(conversation(acme, 14, tenant="acme"))  # llm_usage at seq 2, 6, 10, 14
    theirs = conversation(umbrella, 12, tenant="umbrella")
    real = ours[6]  # seq 7
    forgery = real.model_copy(update={"tenant_id": "umbrella", "id": "forged-7", "content": "pwned"})
    second = real.model_copy(update={"id": "second-7"})  # acme's tenant, a seq already taken
    produce(settings, events_of(ours[:6] + theirs[:4] + [forgery, real, second] + ours[7:10] + theirs[4:8]))
    produce(settings, [(acme, b"\x00" * GIANT)])

    proc = start(settings, tmp_path / "consume-1.log", consume_all)
    wait_until(lambda: last_seq(store_url, acme) == 10 and last_seq(store_url, umbrella) == 8, 90,
               f"both conversations folded\n{proc.log_tail()}")  # fmt: skip
    dead = {h[ERROR_CLASS]: (k, v, h) for k, v, h in read_dlq(settings, 3)}
    assert set(dead) == {"TenantMismatchError", "SequenceConflictError", "NotAvroError"}, dead
    assert "names tenant 'umbrella'" in dead["TenantMismatchError"][2][ERROR_MESSAGE]
    conflict = dead["SequenceConflictError"][2][ERROR_MESSAGE]
    assert "has seq 7, which the log already gave to another event" in conflict
    assert dead["TenantMismatchError"][1] == foreign_bytes(forgery)  # the original bytes, kept
    _key, value, headers = dead["NotAvroError"]
    assert value is None and f"{GIANT + len(acme)} bytes" in headers[OMITTED]
    assert proc.alive() and proc.healthz() == 200, proc.log_tail()

    # acme's view holds its real event 7, never the forgery; every projection agrees.
    ((leaf_seq,),) = rows(store_url, f"SELECT seq FROM views_events WHERE event_id = '{real.id}'")
    assert leaf_seq == 7
    for table in ("views_events", "index_events"):
        found = f"SELECT COUNT(*) FROM {table} WHERE event_id IN ('forged-7', 'second-7')"
        assert scalar(store_url, found) == 0
    assert row_of(store_url, "index_conversations", "tenant_id, last_seq, last_id", acme) == [
        ("acme", 10, ours[9].id)
    ]
    assert row_of(store_url, "effects_conversations", "tenant_id, last_seq", acme) == [("acme", 10)]
    assert row_of(store_url, "titles_conversations", "tenant_id, last_seq", acme) == [("acme", 10)]
    # Sums saturate at the 64-bit bound; a NaN cost counts the call as unpriced; latency stays finite.
    ((tokens, cost, latency, unpriced, count, tenant),) = rows(
        store_url,
        "SELECT prompt_tokens, cost, llm_latency_ms, unpriced_calls, event_count, tenant_id "
        f"FROM stats_conversations WHERE conversation_id = '{acme}'",
    )
    assert (tokens, cost, unpriced, count, tenant) == (INT64_MAX, 0.0, 3, 10, "acme")
    assert latency == sys.float_info.max
    assert metric_value(proc.metrics(), "convdb_consumer_dlq_total") == 3

    # Restarted after the hostile records, it comes back and carries on; nothing is dead-lettered twice.
    assert proc.terminate() == 0, proc.log_tail()
    again = start(settings, tmp_path / "consume-2.log", consume_all)
    produce(settings, events_of(ours[10:] + theirs[8:]))
    wait_until(lambda: last_seq(store_url, acme) == 14 and last_seq(store_url, umbrella) == 12, 90,
               f"both conversations carried on\n{again.log_tail()}")  # fmt: skip
    assert row_of(store_url, "stats_conversations", "prompt_tokens", acme) == [(INT64_MAX,)]
    assert again.alive() and again.healthz() == 200, again.log_tail()
    assert metric_value(again.metrics(), "convdb_consumer_dlq_total") == 0
    assert len(read_dlq(settings, 3)) == 3


# --- the runner's layers, in process --------------------------------------------------------

naive = sa.MetaData()
totals = sa.Table(
    "naive_totals",
    naive,
    sa.Column("conversation_id", sa.String(200), primary_key=True),
    sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
)


class NaiveTotals(TableProjector):
    """A plugin that sums tokens without a bound: its column cannot hold what two records add up to."""

    name = "naive"
    topics = (EVENTS,)
    metadata = naive
    digest_of = ()

    def apply(self, connection: Connection, batch: Sequence[ConsumedRecord]) -> Sequence[Rejection]:
        """Add each usage event's prompt tokens to its conversation's total."""
        usage = [r for r in batch if getattr(r.value, "kind", "") == "llm_usage"]
        stored = load_rows(connection, totals, sorted({r.key for r in usage}))
        sums = {conv: row["prompt_tokens"] for conv, row in stored.items()}
        for record in usage:
            sums[record.key] = sums.get(record.key, 0) + record.value.prompt_tokens  # type: ignore[attr-defined]
        rows_ = [{"conversation_id": c, "prompt_tokens": t} for c, t in sums.items()]
        upsert(connection, totals, rows_, ["conversation_id"])
        return ()


def run(runner: Runner) -> threading.Thread:
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    return thread


def test_a_value_the_store_cannot_hold_is_dead_lettered_and_the_rest_applied(  # type: ignore[no-untyped-def]
    make_settings, store_url: str
) -> None:
    settings = make_settings(store_url=store_url)
    apply_topics(settings)
    big = [
        e.model_copy(update={"prompt_tokens": INT64_MAX // 2 + 10}) if e.kind == "llm_usage" else e  # type: ignore[attr-defined]
        for e in conversation("big", 10)
    ]  # usage at seq 2, 6, 10: each fits, the second sum does not
    small = conversation("small", 10)
    produce(settings, events_of([e for pair in zip(big, small, strict=True) for e in pair]))
    runner = Runner(settings, [NaiveTotals()], name="naive", store_retry_s=30)
    server = MetricsServer(runner.metrics).start()
    thread = run(runner)
    try:
        wait_until(lambda: scalar(store_url, "SELECT COUNT(*) FROM naive_totals") == 2, 60, "both totals")
        dead = read_dlq(settings, 2)
        refused_at = sorted(int(h[ORIGINAL_OFFSET]) for _k, _v, h in dead)
        assert len(refused_at) == 2 and all(h[ERROR_CLASS] == "InvalidRecordError" for _k, _v, h in dead)
        expected = "OverflowError" if store_url.startswith("sqlite") else "DataError"
        assert all(f"the store refuses it: {expected}" in h[ERROR_MESSAGE] for _k, _v, h in dead), dead
        assert all(k == b"big" for k, _v, _h in dead)  # the usage at seq 6 and 10, never small's
        assert dict(rows(store_url, "SELECT conversation_id, prompt_tokens FROM naive_totals")) == {
            "big": INT64_MAX // 2 + 10,
            "small": 300,
        }
        health = httpx.get(f"http://127.0.0.1:{server.port}/healthz")
        assert health.status_code == 200, health.text
    finally:
        runner.stop()
        thread.join(30)
        server.stop()
    assert not thread.is_alive()


def test_a_store_without_the_table_is_retried_and_reported_never_dead_lettered(  # type: ignore[no-untyped-def]
    make_settings, store_url: str
) -> None:
    """Every record would fail while the table is gone: the store's error, not the records'."""
    settings = make_settings(store_url=store_url)
    apply_topics(settings)
    runner = Runner(settings, [NaiveTotals()], name="schema", store_retry_s=120)
    server = MetricsServer(runner.metrics).start()
    thread = run(runner)
    engine = sa.create_engine(store_url)
    try:
        wait_until(lambda: scalar(store_url, "SELECT COUNT(*) FROM naive_totals") == 0, 60, "the table")
        naive.drop_all(engine)
        produce(settings, events_of(conversation("waits", 6)))

        def reported() -> bool:
            body = httpx.get(f"http://127.0.0.1:{server.port}/healthz")
            return body.status_code != 200 and "naive_totals" in body.text

        wait_until(reported, 60, "/healthz reporting the store's error")
        wait_until(
            lambda: metric_value(runner.metrics.render().decode(), "convdb_consumer_retrying_seconds") > 0.5,
            30,
            "the retry in the metrics",
        )
        naive.create_all(engine)
        applied = "SELECT prompt_tokens FROM naive_totals"
        wait_until(lambda: scalar(store_url, applied) == 200, 60, "the batch")
        healthy = httpx.get(f"http://127.0.0.1:{server.port}/healthz")
        assert healthy.status_code == 200, healthy.text
        metrics = runner.metrics.render().decode()
        assert metric_value(metrics, "convdb_consumer_dlq_total") == 0
        assert metric_value(metrics, "convdb_consumer_retrying_seconds") == 0
    finally:
        runner.stop()
        thread.join(30)
        server.stop()
        engine.dispose()
    assert not thread.is_alive()


def test_an_llm_title_with_a_nul_is_published_clean_and_the_consumer_goes_on(  # type: ignore[no-untyped-def]
    make_settings, sqlite_url: str
) -> None:
    """The title effect runs outside the store: its encoding refused a NUL and ended the consumer."""
    settings = make_settings(store_url=sqlite_url, llm={"title_model": "convdb/scripted"})
    apply_topics(settings)
    produce(settings, events_of(conversation("titled", 4)))
    consumer = TitlesConsumer(settings, complete=lambda _model, _prompt: "Fix\x00 the bug")
    runner = Runner(settings, [consumer], name="titles-nul")
    thread = run(runner)
    title = "SELECT title, origin, status FROM titles_conversations WHERE conversation_id = 'titled'"
    try:
        wait_until(lambda: runner.assignment, 60, "the titles consumer assigned (its tables created)")
        clean = [("Fix\ufffd the bug", "llm", "disabled")]
        wait_until(lambda: rows(sqlite_url, title) == clean, 60, "the title")
        assert thread.is_alive() and runner.metrics.report()[0]
    finally:
        runner.stop()
        thread.join(30)
