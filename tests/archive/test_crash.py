"""The archive sink SIGKILLed between upload and commit: the restart rewrites the same keys, identically."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from collections.abc import Callable

import pytest

from convdb.infra.settings import Settings
from tests.archive.conftest import archive_objects, archived_records, chain, interleave, publish, rotated
from tests.conftest import wait_until
from tests.helpers import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.chaos]

Start = Callable[..., subprocess.Popen[bytes]]


def _killed(proc: subprocess.Popen[bytes]) -> bool:
    return proc.poll() == -signal.SIGKILL


def _archived_count(settings: Settings) -> int:
    return sum(1 for _ in archived_records(settings))


def _assert_exactly_once(settings: Settings, expected: int) -> None:
    in_kafka = read_topic(settings, settings.topic("events"), expected)
    archived = Counter((r.partition, r.offset) for r in archived_records(settings))
    assert max(archived.values()) == 1, "a record is in two objects"
    assert set(archived) == {(p, o) for p, o, _, _ in in_kafka}, "a record is missing"


def test_crash_after_upload_before_commit_rewrites_identical_objects(
    s3_settings: Settings, sink_process: Start
) -> None:
    settings = rotated(s3_settings, max_records=40, max_age_s=1.0)
    events = interleave(*(chain(f"conv-{i}", 100) for i in range(6)))
    publish(settings, events)
    first = sink_process(rotated(settings, crash_at="after_put:4"), "sink-1")
    wait_until(lambda: _killed(first), 60, "the sink to SIGKILL itself after its 4th upload")
    before = archive_objects(settings)
    assert len(before) == 4  # the 4th one is stored but its offset was never committed
    second = sink_process(settings, "sink-2")
    wait_until(
        lambda: _archived_count(settings) >= len(events), 90, "every record archived after the restart"
    )
    after = archive_objects(settings)
    assert {k: after.get(k) for k in before} == before  # no object differs
    _assert_exactly_once(settings, len(events))
    assert second.poll() is None


def test_time_rotated_object_is_adopted_after_a_crash(s3_settings: Settings, sink_process: Start) -> None:
    settings = rotated(s3_settings, max_records=1000, max_age_s=0.3)
    publish(settings, chain("solo", 30))
    first = sink_process(rotated(settings, crash_at="after_put:1"), "sink-1")
    wait_until(lambda: _killed(first), 60, "the sink to SIGKILL itself after its first (time-rotated) upload")
    before = archive_objects(settings)
    assert len(before) == 1 and next(iter(before)).endswith("00000000000000000029.avro")
    # More records arrive before the restart: a fresh time rotation would cut 0..59, doubling 0..29.
    publish(settings, chain("solo", 30, start=31, text="later"))
    sink_process(settings, "sink-2")
    wait_until(lambda: _archived_count(settings) >= 60, 90, "60 records archived after the restart")
    after = archive_objects(settings)
    assert {k: after.get(k) for k in before} == before
    _assert_exactly_once(settings, 60)
