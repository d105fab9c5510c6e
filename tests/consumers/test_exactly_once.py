"""Exactly-once into the store across SIGKILLs and rebalances, with real consumer subprocesses."""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import EventEnvelope, SingleObjectCodec
from tests.conftest import wait_until
from tests.consumers.builders import interleaved
from tests.consumers.procs import ConsumerProcess, wait_assigned, wait_progress
from tests.consumers.verify import assert_index_exact, assert_stats_exact, assert_views_exact, scalar

pytestmark = [pytest.mark.kafka, pytest.mark.chaos, pytest.mark.brokers]

CONSUMERS = ["views", "index", "stats"]


def publish_slowly(settings: Settings, events: list[EventEnvelope], chunks: int) -> threading.Thread:
    """Publish in chunks from a thread, so that the events flow while consumers crash."""

    def run() -> None:
        publisher = EventPublisher(settings, SingleObjectCodec())
        size = -(-len(events) // chunks)
        for start in range(0, len(events), size):
            for event in events[start : start + size]:
                publisher.publish(event)
            publisher.flush()
            time.sleep(0.2)

    thread = threading.Thread(target=run, name="publisher")
    thread.start()
    return thread


def assert_all_exact(url: str, events: list[EventEnvelope]) -> None:
    assert_views_exact(url, events)
    assert_index_exact(url, events)
    assert_stats_exact(url, events)


def wait_complete(url: str, total: int, procs: list[ConsumerProcess], timeout: float) -> None:
    def done() -> bool:
        if not any(p.alive() for p in procs):
            pytest.fail("no consumer alive:\n" + "\n".join(p.log_tail() for p in procs))
        counts = [scalar(url, f"SELECT COUNT(*) FROM {t}") for t in ("views_events", "index_events")]
        stats = scalar(url, "SELECT SUM(event_count) FROM stats_conversations")
        return counts == [total, total] and stats == total

    wait_until(done, timeout, f"{total} events in every projection", logs=[p.log for p in procs])


def run_with_kills(
    make_settings: Callable[..., Settings], tmp_path: Path, total: int, kills: int, seed: int
) -> None:
    """Each phase: start a consumer, let a slice of the events flow, SIGKILL it at a random point."""
    rng = random.Random(seed)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = make_settings(store_url=url)
    from convdb.infra.kafka import apply_topics

    apply_topics(settings)
    events = interleaved(total // 100, 100)
    size = -(-len(events) // (kills + 1))
    procs: list[ConsumerProcess] = []
    publisher: threading.Thread | None = None
    try:
        for i in range(kills):
            proc = ConsumerProcess(settings, CONSUMERS, tmp_path / f"consumer-{i}.log").start()
            procs.append(proc)
            publisher = publish_slowly(settings, events[i * size : (i + 1) * size], chunks=8)
            wait_progress(proc, 1, timeout=60)
            time.sleep(rng.uniform(0.05, 1.5))  # a random point while events flow
            proc.kill()
            publisher.join(120)
        final = ConsumerProcess(settings, CONSUMERS, tmp_path / "consumer-final.log").start()
        procs.append(final)
        publisher = publish_slowly(settings, events[kills * size :], chunks=8)
        publisher.join(120)
        wait_complete(url, len(events), [final], timeout=120)
        assert_all_exact(url, events)
        assert final.terminate() == 0, final.log_tail()
    finally:
        if publisher is not None:
            publisher.join(120)
        for proc in procs:
            proc.stop()


def test_sigkill_at_random_points_stores_each_event_once(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    run_with_kills(make_settings, tmp_path, total=20000, kills=4, seed=7)


@pytest.mark.slow
def test_sigkill_soak_many_crashes(make_settings: Callable[..., Settings], tmp_path: Path) -> None:
    run_with_kills(make_settings, tmp_path, total=60000, kills=12, seed=11)


def test_rebalance_between_two_consumers_stores_each_event_once(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = make_settings(store_url=url)
    from convdb.infra.kafka import apply_topics

    apply_topics(settings)
    events = interleaved(200, 100)
    publisher = publish_slowly(settings, events, chunks=40)
    a = ConsumerProcess(settings, CONSUMERS, tmp_path / "a.log").start()
    b = ConsumerProcess(settings, CONSUMERS, tmp_path / "b.log")
    try:
        wait_progress(a, 1000)
        b.start()
        wait_assigned(b)  # B got partitions: the group rebalanced mid-stream
        assert a.terminate() == 0, a.log_tail()  # A leaves: B takes every partition
        publisher.join(120)
        wait_complete(url, len(events), [b], timeout=120)
        assert_all_exact(url, events)
    finally:
        publisher.join(120)
        a.stop()
        b.stop()


def test_two_consume_all_processes_share_four_partitions_and_store_each_event_once(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """The scale-out shape: one group, two `consume all` processes, two partitions each."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = make_settings(store_url=url, partitions=4)
    from convdb.infra.kafka import apply_topics

    apply_topics(settings)
    a = ConsumerProcess(settings, ["all"], tmp_path / "a.log").start()
    b = ConsumerProcess(settings, ["all"], tmp_path / "b.log").start()
    events = interleaved(100, 100)
    publisher: threading.Thread | None = None
    try:
        wait_until(lambda: len(assigned(a)) == 2 and len(assigned(b)) == 2, 60, "2 partitions each")
        assert assigned(a) | assigned(b) == {0, 1, 2, 3}
        publisher = publish_slowly(settings, events, chunks=20)
        publisher.join(120)
        wait_complete(url, len(events), [a, b], timeout=120)
        assert_all_exact(url, events)
        shares = [wait_progress(p, 1) for p in (a, b)]  # each applied some: the work was shared
        assert sum(shares) >= len(events)
        assert a.terminate() == 0, a.log_tail()
        assert b.terminate() == 0, b.log_tail()
    finally:
        if publisher is not None:
            publisher.join(120)
        a.stop()
        b.stop()


def assigned(proc: ConsumerProcess) -> set[int]:
    """Partitions of the events topic the child holds now, from its log (empty before any).

    An `assigned` line names its whole assignment; under incremental rebalancing a `revoked` line
    names only the partitions taken away, so the log is replayed in order."""
    held: set[int] = set()
    for line in proc.log_tail(400).splitlines():
        named = {int(p) for p in re.findall(r"\('[^']*\.events', (\d+)[,)]", line)}
        if " assigned [(" in line:
            held = named
        elif " revoked [(" in line:
            held -= named
    return held
