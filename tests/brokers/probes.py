"""Probes of broker behaviour: each returns what the broker did, for the capability record to match.

A probe gives a supported feature every chance (generous deadlines) and answers False only on an
observed refusal or once its deadline passed without the behaviour; it never asserts.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

Conf = dict[str, Any]


def fresh_topic(bootstrap: str, partitions: int = 1, **config: str) -> str:
    """Create a uniquely named topic and wait until it is visible."""
    name = f"probe-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.list_topics(name, timeout=5).topics.get(name)
        if meta is not None and meta.error is None and len(meta.partitions) == partitions:
            return name
        time.sleep(0.05)
    raise TimeoutError(f"topic {name} not visible")


def produce(bootstrap: str, topic: str, values: list[bytes], key: bytes = b"k", **conf: Any) -> None:
    """Produce values to partition 0 and flush (raises on any delivery error)."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **conf})
    for v in values:
        p.produce(topic, v, key, partition=0, on_delivery=lambda err, _m: errors.append(err) if err else None)
    p.flush(30)
    if errors:
        raise KafkaException(errors[0])


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed", idle: float = 1.5) -> list[bytes]:
    """Every value of partition 0 from the start, until nothing came for `idle` seconds."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"probe-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[bytes] = []
        last = time.monotonic()
        while time.monotonic() - last < idle:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    out.append(m.value())
                    last = time.monotonic()
        return out
    finally:
        c.close()


def until(check: Callable[[], bool], timeout: float) -> bool:
    """True once `check` is, False when `timeout` passed first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def idempotence(bs: str) -> bool:
    """An idempotent producer writes 50 records, each exactly once, in order."""
    topic = fresh_topic(bs)
    values = [str(i).encode() for i in range(50)]
    try:
        produce(bs, topic, values, **{"acks": "all"})
    except KafkaException:
        return False
    return read_all(bs, topic) == values


def transactions(bs: str) -> bool:
    """Commit, abort and offsets-in-transaction succeed; the committed record and offset are there."""
    topic = fresh_topic(bs)
    group = f"probe-{uuid.uuid4().hex[:6]}"
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"probe-{uuid.uuid4().hex}"})
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"committed", b"k", partition=0)
        c = Consumer({"bootstrap.servers": bs, "group.id": group})
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"aborted", b"k", partition=0)
        p.flush(30)
        p.abort_transaction(30)
        committed = c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
        c.close()
    except KafkaException:
        return False
    return read_all(bs, topic)[:1] == [b"committed"] and committed == 7


def read_committed_hides_aborted(bs: str) -> bool:
    """A read_committed reader never sees a record of an aborted transaction."""
    topic = fresh_topic(bs)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"probe-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    for value, commit in ((b"committed", True), (b"aborted", False), (b"after", True)):
        p.begin_transaction()
        p.produce(topic, value, b"k", partition=0)
        p.flush(30)
        p.commit_transaction(30) if commit else p.abort_transaction(30)
    return read_all(bs, topic) == [b"committed", b"after"]


def fencing_aborts_open_transaction(bs: str) -> bool:
    """A zombie's open transaction is aborted by its successor: nothing of it is ever readable."""
    topic = fresh_topic(bs)
    tid = f"probe-{uuid.uuid4().hex}"
    zombie = Producer({"bootstrap.servers": bs, "transactional.id": tid, "transaction.timeout.ms": 60000})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", b"k", partition=0)
    zombie.flush(30)  # written to the log, inside the open transaction
    successor = Producer({"bootstrap.servers": bs, "transactional.id": tid})
    successor.init_transactions(60)
    successor.begin_transaction()
    successor.produce(topic, b"successor", b"k", partition=0)
    successor.commit_transaction(30)
    try:
        zombie.commit_transaction(5)
        zombie_committed = True
    except KafkaException:
        zombie_committed = False
    return not zombie_committed and read_all(bs, topic) == [b"successor"]


def aborted_visible_read_uncommitted(bs: str) -> bool:
    """Kafka keeps aborted records in the log: a read_uncommitted reader sees them."""
    topic = fresh_topic(bs)
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"probe-{uuid.uuid4().hex}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"aborted", b"k", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    return b"aborted" in read_all(bs, topic, isolation="read_uncommitted")


async def _aiokafka_producer(bs: str, **conf: Any) -> bool:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError as AioKafkaError

    topic = fresh_topic(bs)
    producer = AIOKafkaProducer(bootstrap_servers=bs, **conf)
    try:
        await producer.start()
        if "transactional_id" in conf:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"committed", key=b"k", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aborted", key=b"k", partition=0)
            await producer.abort_transaction()
        else:
            await producer.send_and_wait(topic, b"committed", key=b"k", partition=0)
    except AioKafkaError:
        return False
    finally:
        await producer.stop()
    return read_all(bs, topic) == [b"committed"]


def aiokafka_idempotence(bs: str) -> bool:
    """aiokafka (faust's client) starts an idempotent producer and writes through it."""
    return asyncio.run(_aiokafka_producer(bs, enable_idempotence=True))


def aiokafka_transactions(bs: str) -> bool:
    """aiokafka commits one transaction and aborts another (what faust exactly_once needs)."""
    return asyncio.run(_aiokafka_producer(bs, transactional_id=f"probe-{uuid.uuid4().hex}"))


COMPACTION_DEADLINE_S = 20.0


def compaction(bs: str) -> bool:
    """Values of one key spread over rolled segments are compacted to the latest."""
    topic = fresh_topic(
        bs,
        **{
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
            "delete.retention.ms": "0",
        },
    )
    for i in range(5):
        produce(bs, topic, [f"v{i}".encode()])
        time.sleep(0.15)  # the next record rolls the segment (segment.ms)
    produce(bs, topic, [b"other"], key=b"other")  # the active segment is never cleaned

    def compacted() -> bool:
        values = read_all(bs, topic, idle=0.5)
        return b"v0" not in values and b"v4" in values

    return until(compacted, COMPACTION_DEADLINE_S)


def offsets_for_times_by_create_time(bs: str) -> bool:
    """Back-dated CreateTimes are found by timestamp, and a query past the end answers -1."""
    topic = fresh_topic(bs)
    base = int(time.time() * 1000) - 3_600_000
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    for i in range(3):
        p.produce(topic, f"r{i}".encode(), b"k", partition=0, timestamp=base + i * 1000)
        p.flush(30)
    c = Consumer({"bootstrap.servers": bs, "group.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        stamps = [base + 500, int(time.time() * 1000) + 60_000]
        found = [c.offsets_for_times([TopicPartition(topic, 0, t)], timeout=30)[0] for t in stamps]
    finally:
        c.close()
    return found[0].offset == 1 and found[1].offset in (-1, 3)


def list_offsets_latest_exact(bs: str) -> bool:
    """Three batches of five records: ListOffsets LATEST (not the fetch watermark) says 15."""
    topic = fresh_topic(bs)
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 1000})
    for b in range(3):
        for i in range(5):
            p.produce(topic, f"{b}-{i}".encode(), b"k", partition=0)
        p.flush(30)
    c = Consumer({"bootstrap.servers": bs, "group.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    finally:
        c.close()
    return high == 15


def delete_records(bs: str) -> bool:
    """DeleteRecords before offset 5 moves the log start to 5."""
    topic = fresh_topic(bs)
    produce(bs, topic, [str(i).encode() for i in range(10)])
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        result = admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=15)
        return result[TopicPartition(topic, 0, 5)].result(20).low_watermark == 5
    except KafkaException:
        return False


def create_partitions(bs: str) -> bool:
    """CreatePartitions grows a topic from 1 to 2 partitions."""
    topic = fresh_topic(bs)
    admin = AdminClient({"bootstrap.servers": bs})
    try:
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    except KafkaException:
        return False
    return until(lambda: len(admin.list_topics(topic, timeout=5).topics[topic].partitions) == 2, 10)


def _joins(bs: str, timeout: float, **conf: Any) -> bool:
    topic = fresh_topic(bs)
    c = Consumer({"bootstrap.servers": bs, "group.id": f"probe-{uuid.uuid4().hex[:6]}", **conf})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = c.poll(0.2)
            error = msg.error() if msg is not None else None
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                return False
            if c.assignment():
                return True
        return False
    finally:
        c.close()


def consumer_group_protocol(bs: str, attempts: int = 3) -> bool:
    """A KIP-848 (`group.protocol=consumer`) member gets its assignment. An assignment is proof; a
    broker without the protocol answers no error, it just never assigns, so "no" is only said
    after `attempts` joins of 8 s each got nothing (a slow machine is not a missing protocol)."""
    return any(_joins(bs, 8.0, **{"group.protocol": "consumer"}) for _ in range(attempts))


def quick_cooperative_handover(bs: str, attempts: int = 2, within_s: float = 3.0) -> bool:
    """A classic cooperative-sticky member joins a group whose only member holds all 4 partitions;
    the partitions moved to it reach it within `within_s`. Slowness can be the machine's: quick
    when any of `attempts` tries is (Tansu 0.6 never is: it holds each join round half a session)."""
    return any(_cooperative_handover_s(bs, within_s) < within_s for _ in range(attempts))


def _cooperative_handover_s(bs: str, within_s: float) -> float:
    """Seconds from a second member's subscribe to its first partition (`inf` past `within_s`)."""
    topic = fresh_topic(bs, partitions=4)
    conf = {
        "bootstrap.servers": bs,
        "group.id": f"probe-{uuid.uuid4().hex[:6]}",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500,
    }
    first, second = Consumer(conf), Consumer(conf)
    try:
        first.subscribe([topic])
        if not until(lambda: first.poll(0.1) is None and len(first.assignment()) == 4, 30):
            raise AssertionError("the first member never got the 4 partitions")
        joined = time.monotonic()
        second.subscribe([topic])

        def handed_over() -> bool:
            first.poll(0.05)
            second.poll(0.05)
            return bool(second.assignment())

        return time.monotonic() - joined if until(handed_over, within_s) else float("inf")
    finally:
        first.close()
        second.close()


def short_session_timeouts(bs: str) -> bool:
    """A classic-protocol member with a 2 s session timeout is admitted (and gets its assignment)."""
    return _joins(bs, 20.0, **{"session.timeout.ms": 2000, "heartbeat.interval.ms": 500})


def group_survives_members_leaving_together(bs: str, attempts: int = 5) -> bool:
    """Two members of a group leave at once (the first leave starts a rebalance the second is still
    in); a new member of that group then gets its assignment. Whether the leaves overlap is a race,
    and a broker that sticks (Tansu 0.6) does so in about four tries of five: it survives only when
    every one of `attempts` tries does, so that the probe does not pass on a lucky interleaving."""
    return all(_group_survives_a_joint_leave(bs) for _ in range(attempts))


def _group_survives_a_joint_leave(bs: str) -> bool:
    topic = fresh_topic(bs, partitions=4)
    conf = {
        "bootstrap.servers": bs,
        "group.id": f"probe-{uuid.uuid4().hex[:6]}",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 1000,
    }
    members = [Consumer(conf) for _ in range(2)]
    for member in members:
        member.subscribe([topic])

    def both_assigned() -> bool:
        for member in members:
            member.poll(0.1)
        return all(len(m.assignment()) == 2 for m in members)

    if not until(both_assigned, 30):
        raise AssertionError("the two members never shared the partitions")
    leaving = [threading.Thread(target=member.close) for member in members]
    for thread in leaving:
        thread.start()
    for thread in leaving:
        thread.join()
    newcomer = Consumer(conf)
    try:
        newcomer.subscribe([topic])

        def assigned() -> bool:
            newcomer.poll(0.2)
            return bool(newcomer.assignment())

        return until(assigned, 20)
    finally:
        newcomer.close()


PROBES: dict[str, Callable[[str], bool]] = {
    "idempotence": idempotence,
    "transactions": transactions,
    "read_committed_hides_aborted": read_committed_hides_aborted,
    "fencing_aborts_open_transaction": fencing_aborts_open_transaction,
    "aborted_visible_read_uncommitted": aborted_visible_read_uncommitted,
    "aiokafka_idempotence": aiokafka_idempotence,
    "aiokafka_transactions": aiokafka_transactions,
    "compaction": compaction,
    "offsets_for_times_by_create_time": offsets_for_times_by_create_time,
    "list_offsets_latest_exact": list_offsets_latest_exact,
    "delete_records": delete_records,
    "create_partitions": create_partitions,
    "consumer_group_protocol": consumer_group_protocol,
    "quick_cooperative_handover": quick_cooperative_handover,
    "short_session_timeouts": short_session_timeouts,
    "group_survives_members_leaving_together": group_survives_members_leaving_together,
}
"""Capability name -> probe on a shared broker (`idempotent_producer_survives_restart` needs its own)."""
