"""`convdb reconcile` and `convdb consume archive` survive any record on their input topics.

The reconciler as a real faust worker: an `EffectStarted` and a receipt stamped at the end of
time raised OverflowError, in the fold (the agent crashed) and in every tick (no operation of any
tenant was decided again); an `ActionEvent` of another tenant took an operation over. Now the
first two are folded with deadlines that saturate, the third is dead-lettered with its reason,
and an ordinary operation is still decided, before and after a restart.

The archive, in process against real S3: a record without a key, with a key that is not UTF-8 or
holds control characters and commas, a tombstone, an empty value, headers without values and a
record of about 1 MB are copied byte-exact, and the sink goes on after a restart; a put that
fails (a bucket not there yet) is retried and shown on `/healthz` until it succeeds. A
transition the reconciler cannot send is on its `/healthz` until one is sent.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from confluent_kafka import Producer

from convdb.consumers.archive.container import RawRecord
from convdb.consumers.archive.sink import ArchiveSink, StoredObject
from convdb.consumers.archive.target import open_target
from convdb.consumers.reconciler import CHANGELOG
from convdb.consumers.reconciler.core import Reconciler
from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE, ORIGINAL_OFFSET
from convdb.infra.kafka import apply_topics, producer_config
from convdb.infra.ops import Health
from convdb.infra.s3 import make_s3_client
from convdb.infra.settings import Settings
from convdb.projections.operation import END_OF_TIME
from convdb.schemas import ActionEvent, EffectStarted, SingleObjectCodec
from convdb.schemas.topics import ALL_TOPICS, EFFECTS, EVENTS, RECEIPTS
from tests.archive.conftest import SinkThread, archived_records, chain, publish, rotated
from tests.conftest import BrokerInfo, S3Endpoint, settings_for, wait_until
from tests.helpers import now, read_topic
from tests.reconciler.conftest import reconciler_proc, wait_worker_ready
from tests.reconciler.ledger import publish as publish_ledger
from tests.reconciler.ledger import read_dlq, read_ledger, receipt_for, reconciler_records, started_operation

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


def decided(settings: Settings, operation_id: str) -> bool:
    """The reconciler published a decision on the operation (it is past its deadline)."""
    return operation_id in reconciler_records(read_ledger(settings))


def test_the_reconciler_survives_records_that_stopped_it(broker: BrokerInfo, tmp_path: Path) -> None:
    settings = settings_for(
        broker, tmp_path / "data", reconciler={"tick_interval_s": 0.3, "receipt_grace_s": 0.3}
    )
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    worker = reconciler_proc(settings, tmp_path / "reconciler.log").start()
    try:
        wait_worker_ready(worker)
        far, far_records = started_operation(f"far-{uuid.uuid4().hex[:6]}", deadline=timedelta(days=1))
        retried = EffectStarted(
            id=str(uuid.uuid4()), operation_id=far, conversation_id=far.split("/")[0], tenant_id="acme",
            timestamp=END_OF_TIME, attempt=2,
        )  # fmt: skip
        late, late_records = started_operation(f"late-{uuid.uuid4().hex[:6]}", deadline=timedelta(days=1))
        shared = f"shared-{uuid.uuid4().hex[:6]}"  # one partition: the ledger comes before the takeover
        taken, taken_records = started_operation(shared, deadline=timedelta(days=1))
        conv, action_id = taken.rsplit("/", 1)
        takeover = ActionEvent(
            id=action_id, conversation_id=conv, tenant_id="umbrella", seq=2, timestamp=now(), source="agent",
            tool_name="create_issue", tool_call_id="call-1", arguments="{}", llm_response_id="r",
            operation_id=taken, intent_hash="h", target="tracker:issues", effect_class="keyed",
        )  # fmt: skip
        ordinary, ordinary_records = started_operation(shared)  # past its deadline
        publish_ledger(
            settings,
            [
                *far_records, (EFFECTS, retried),
                *late_records, (RECEIPTS, receipt_for(late, at=END_OF_TIME)),
                *taken_records, *ordinary_records,
            ],
        )  # fmt: skip
        wait_until(lambda: decided(settings, ordinary), 90, "an ordinary decision", logs=[worker.log])
        publish_ledger(settings, [(EVENTS, takeover)])

        def refused() -> list[dict[str, bytes]]:
            return [h for h in read_dlq(settings) if h.get(ERROR_CLASS) == b"TenantMismatchError"]

        (headers,) = wait_until(refused, 30, "the takeover dead-lettered")  # type: ignore[misc]
        assert b"umbrella" in headers[ERROR_MESSAGE] and taken.encode()[:80] in headers[ERROR_MESSAGE]
        assert worker.alive, worker.tail()
        assert not any(decided(settings, op) for op in (far, late, taken))  # deadlines a day away

        worker.stop()
        worker.start()
        wait_worker_ready(worker)
        after, after_records = started_operation(f"after-{uuid.uuid4().hex[:6]}")
        publish_ledger(settings, after_records)
        wait_until(lambda: decided(settings, after), 90, "a decision after the restart", logs=[worker.log])
        assert worker.alive, worker.tail()
        # At least once: a re-read takeover is dead-lettered again, as the same original record.
        assert {h[ORIGINAL_OFFSET] for h in refused()} == {headers[ORIGINAL_OFFSET]}
    finally:
        worker.stop()


pytest_s3 = pytest.mark.s3

ODD = [
    (None, b"no key"),
    (b"\xff\xfe not utf-8", b"odd key"),
    (b"a,b\nc\x00d\x7f", b"control characters and commas in the key"),
    (b"tombstone", None),
    (b"empty", b""),
    (b"big", b"\x01" * 1_000_000),
]
HEADERS = [("none", None), ("traceparent", b"00-garbage"), ("bytes", b"\xff\x00")]


@pytest_s3
def test_the_archive_copies_any_record_byte_exact_and_carries_on(s3_settings: Settings) -> None:
    settings = rotated(s3_settings, max_records=4, max_age_s=0.5)
    producer = Producer({**producer_config(settings), "message.max.bytes": 2_000_000})
    for key, value in ODD:
        producer.produce(settings.topic("events"), value, key, headers=HEADERS)
    assert producer.flush(30) == 0
    events = chain("normal", 6)
    publish(settings, events)
    total = len(ODD) + len(events)
    with SinkThread(settings) as sink:
        sink.wait_records(total)
    more = chain("after", 5, start=7)
    publish(settings, more)
    with SinkThread(settings) as sink:
        sink.wait_records(len(more))
    in_kafka = read_topic(settings, settings.topic("events"), total + len(more))
    archived = archived_records(settings)
    assert Counter((r.partition, r.offset) for r in archived) == Counter((p, o) for p, o, _, _ in in_kafka)
    by_offset = {(p, o): (k, v) for p, o, k, v in in_kafka}
    assert all(by_offset[(r.partition, r.offset)] == (r.key, r.value) for r in archived)  # byte-exact
    odd = [r for r in archived if (r.key, r.value) in set(ODD)]
    assert len(odd) == len(ODD) and all(r.headers == tuple(HEADERS) for r in odd)


@pytest_s3
def test_an_archive_put_that_fails_is_retried_and_on_healthz_until_it_succeeds(
    s3_settings: Settings, s3_endpoint: S3Endpoint
) -> None:
    bucket = f"later-{uuid.uuid4().hex[:10]}"  # not created yet: every put fails
    settings = s3_settings.model_copy(update={"archive_url": f"s3://{bucket}/archive"})
    health = Health()
    target, prefix = open_target(settings)
    sink = ArchiveSink(target, prefix, settings.archive, report=lambda p: health.problem("archive", p))
    topic = settings.topic("events")
    stored: list[StoredObject] = []

    def store() -> None:
        sink.add(RawRecord(topic, 0, 0, 0, b"k", b"v"))  # lists what is stored from offset 0: retried
        stored.append(sink.flush((topic, 0)))

    flushing = threading.Thread(target=store, daemon=True)
    flushing.start()
    wait_until(lambda: not health.report()[0], 30, "the failing put on /healthz")
    assert "NoSuchBucket" in health.report()[1]["problems"]["archive"]
    client = make_s3_client(
        s3_endpoint.endpoint_url, "us-east-1", s3_endpoint.access_key_id, s3_endpoint.secret_access_key
    )
    client.create_bucket(Bucket=bucket)
    flushing.join(60)
    assert stored and stored[0].next_offset == 1
    assert health.report()[0] is True


def test_a_tick_whose_transition_is_not_sent_is_on_healthz_until_one_is() -> None:
    """The reconciler's core with its faust wiring replaced by a send that fails, then works."""
    broker_up = False
    sent: list[bytes] = []

    async def send(suffix: str, key: bytes, value: bytes, headers: object) -> None:  # noqa: ARG001
        if not broker_up:
            raise ConnectionError("no broker")
        sent.append(value)

    core = Reconciler(settings_for(), SingleObjectCodec(), {}, send, {})
    op, records = started_operation("unsent")  # past its deadline: the tick decides at once
    for offset, (topic, record) in enumerate(records):
        asyncio.run(core.ingest(topic.name("t"), 0, offset, b"unsent", SingleObjectCodec().encode(record)))
    assert asyncio.run(core.tick()) == 0
    ok, details = core.health.report()
    assert not ok and "no broker" in details["problems"]["publish"]
    broker_up = True
    assert asyncio.run(core.tick()) == 1 and len(sent) == 1
    assert core.health.report()[0] is True
    assert op in reconciler_records([SingleObjectCodec().decode(v) for v in sent])  # type: ignore[misc]
