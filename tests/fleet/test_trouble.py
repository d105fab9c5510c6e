"""What a runner says about a partition whose writes keep failing, and which failures are a
record's fault (dead-lettered) rather than the broker's (retried)."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from convdb.infra.dlq import ERROR_MESSAGE
from convdb.infra.errors import PublishError
from convdb.infra.ops import Health
from convdb.producers.fleet.limits import fit_dead_letter, record_fault, too_large
from convdb.producers.fleet.trouble import STALLED_AFTER, PartitionTrouble
from convdb.producers.observe import RunnerMetrics
from convdb.schemas.errors import SchemaError


def stalled(metrics: RunnerMetrics) -> float | None:
    return metrics.registry.get_sample_value("convdb_runner_stalled_partitions")


def test_a_partition_failing_without_a_commit_backs_off_and_is_reported_until_it_commits() -> None:
    health, metrics = Health(), RunnerMetrics()
    trouble = PartitionTrouble(health, metrics)
    waits = [trouble.failed(3, PublishError("broker away")) for _ in range(STALLED_AFTER + 2)]
    assert waits == [0.0, 0.5, 1.0, 2.0, 4.0]
    assert max(trouble.failed(3, PublishError("still away")) for _ in range(10)) == 30.0
    ok, details = health.report()
    assert not ok and "partition 3" in details["problems"]
    assert (
        "failed writes" in details["problems"]["partition 3"]
        and "still away" in details["problems"]["partition 3"]
    )
    assert stalled(metrics) == 1.0
    assert metrics.registry.get_sample_value("convdb_runner_write_failures_total") == 15.0
    trouble.failed(1, PublishError("once"))  # one failure is a retry, not a stall
    assert "partition 1" not in health.report()[1]["problems"]
    trouble.progressed(3)
    trouble.forget(1)
    assert health.report()[0] and stalled(metrics) == 0.0


def test_too_large_and_record_faults_are_told_from_the_broker_being_away() -> None:
    local = PublishError("events[?] key=c: rejected")
    local.__cause__ = KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE))
    delivered = PublishError("events[1] key=c: not delivered: Broker: Message size too large")
    away = PublishError("events[1] key=c: not acknowledged in time")
    assert too_large(local) and too_large(delivered) and not too_large(away)
    assert record_fault(local) and record_fault(delivered) and not record_fault(away)
    assert record_fault(SchemaError("cannot encode")) and record_fault(TypeError("a bug"))
    assert not record_fault(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert not record_fault(OSError("disk full"))


def test_a_dead_letter_too_large_to_write_loses_its_value_not_its_reason() -> None:
    headers = [(ERROR_MESSAGE, b"why"), ("convdb.original.offset", b"7")]
    small = ("dlq", b"k", b"v" * 10, headers)
    assert fit_dead_letter(small, 10_000) == small
    topic, key, value, kept = fit_dead_letter(("dlq", b"k", b"v" * 20_000, headers), 10_000)
    assert (topic, key, value) == ("dlq", b"k", b"")
    assert dict(kept)[ERROR_MESSAGE].startswith(b"why (the record's 20000-byte value is left out")
    assert dict(kept)["convdb.original.offset"] == b"7"
