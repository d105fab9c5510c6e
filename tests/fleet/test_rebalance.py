"""Runners joining, leaving and restarting while conversations run (real runner processes).

Rebalances move only the partitions that change hands: a runner never restores a partition it
kept (its `assigned` status lines say how often it restored each one), and no inbox message is
lost or answered twice. On Apache Kafka a runner with a stable name (static membership) that is
restarted within the session timeout gets its partitions back and nobody else rebalances.
"""

from __future__ import annotations

import signal
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.kafka import apply_topics
from convdb.infra.partitioner import partition_for
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import MessageEvent, SingleObjectCodec
from convdb.schemas.topics import EVENTS
from tests.conftest import BrokerInfo, settings_for, wait_until
from tests.fleet._support import RunnerProc, fleet_settings, logs_of
from tests.fleet.test_fencing import assert_gap_and_duplicate_free, send
from tests.producers._support import by_conversation, records

pytestmark = [pytest.mark.kafka]

CONVERSATIONS = 8
EVERY_S = 1.2
"""Each conversation gets a user message this often while the fleet changes."""


def spread(partitions: int) -> list[str]:
    """`CONVERSATIONS` conversation ids, as many on each partition."""
    ids: list[str] = []
    per = CONVERSATIONS // partitions
    while len(ids) < per * partitions:
        cid = f"rb-{uuid.uuid4().hex[:8]}"
        if sum(partition_for(c, partitions) == partition_for(cid, partitions) for c in ids) < per:
            ids.append(cid)
    return ids


class Feeder:
    """Sends each conversation a user message every `EVERY_S` from a thread, and remembers when."""

    def __init__(self, settings: Settings) -> None:
        self.ids = spread(settings.partitions)
        self.publisher = EventPublisher(settings, SingleObjectCodec())
        self.sent: dict[str, float] = {}
        """Message text -> when it was sent."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            for cid in self.ids:
                text = f"m {cid} {k}"
                self.sent[text] = time.time()
                send(self.publisher, cid, text)
            self.publisher.flush()
            k += 1
            self._stop.wait(EVERY_S)

    def __enter__(self) -> Feeder:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def answered(settings: Settings, feeder: Feeder) -> dict[str, list[Any]] | None:
    """Every conversation's events once every sent message is in them and answered, else None."""
    grouped = by_conversation(records(settings, EVENTS))
    for cid in feeder.ids:
        evs = sorted(grouped.get(cid, []), key=lambda e: e.seq)
        if not evs or not (isinstance(evs[-1], MessageEvent) or evs[-1].kind == "state_update"):
            return None
        texts = {e.content for e in evs if isinstance(e, MessageEvent) and e.role == "user"}
        if not {t for t in feeder.sent if t.split()[1] == cid} <= texts:
            return None
    return grouped


def answer_delays(grouped: dict[str, list[Any]], feeder: Feeder) -> dict[str, list[float]]:
    """Per conversation: seconds from sending each user message to the agent's answer after it."""
    delays: dict[str, list[float]] = {}
    for cid, evs in grouped.items():
        pending: float | None = None
        for e in sorted(evs, key=lambda e: e.seq):
            if isinstance(e, MessageEvent) and e.role == "user":
                pending = feeder.sent.get(e.content)
            elif isinstance(e, MessageEvent) and e.role == "assistant" and pending is not None:
                delays.setdefault(cid, []).append(e.timestamp.timestamp() - pending)
                pending = None
    return delays


def assert_each_message_once(grouped: dict[str, list[Any]], feeder: Feeder) -> None:
    """Nothing lost, nothing twice: each sent message is one user event, each conversation gap-free."""
    for cid in feeder.ids:
        assert_gap_and_duplicate_free(grouped[cid], cid)
        users = [e.content for e in grouped[cid] if isinstance(e, MessageEvent) and e.role == "user"]
        mine = sorted(t for t in feeder.sent if t.split()[1] == cid)
        assert sorted(users) == mine, f"{cid}: {len(users)} user events for {len(mine)} messages"


def restores(runner: RunnerProc) -> dict[int, int]:
    """The runner's own count of restores per partition (its latest `assigned` line)."""
    lines = runner.events("assigned")
    return {int(p): n for p, n in lines[-1]["restores"].items()} if lines else {}


@contextmanager
def fleet() -> Iterator[list[RunnerProc]]:
    """The runner processes a test starts (appended as it goes), all stopped at the end."""
    runners: list[RunnerProc] = []
    try:
        yield runners
    finally:
        for runner in runners:
            runner.stop()


def start(settings: Settings, tmp_path: Path, name: str, **runtime: Any) -> RunnerProc:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return RunnerProc(
        fleet_settings(settings, tmp_path / name, **runtime), ws, None, tmp_path / f"{name}.log"
    )


@pytest.mark.brokers
def test_a_runner_joins_and_leaves_while_conversations_run(
    broker: BrokerInfo, settings: Settings, tmp_path: Path
) -> None:
    everything = set(range(settings.partitions))
    with fleet() as runners:
        a = start(settings, tmp_path, "a")
        runners.append(a)
        wait_until(lambda: a.owned() == everything, 60, "A owns every partition", logs=logs_of(runners))
        with Feeder(settings) as feeder:
            time.sleep(2)
            b = start(settings, tmp_path, "b")
            started = time.time()
            runners.append(b)
            wait_until(lambda: a.owned() and b.owned(), 60, "B takes a share", logs=logs_of(runners))
            kept, moved = a.owned(), b.owned()
            time.sleep(3)
            stopping = time.time()
            b.signal(signal.SIGTERM)
            b.proc.wait(timeout=30)
            wait_until(
                lambda: a.owned() == everything, 60, "A owns every partition again", logs=logs_of(runners)
            )
            time.sleep(2)
        grouped = wait_until(
            lambda: answered(settings, feeder), 60, "every message answered", logs=logs_of(runners)
        )
        revoked = {p for line in a.events("revoked") for p in line["partitions"]}  # before A stops

    # A restored each partition it kept once (when it first got it), and B's twice (back from B).
    assert restores(a) == {p: 1 if p in kept else 2 for p in everything}, restores(a)
    assert kept and moved and kept | moved == everything
    if broker.capabilities.consumer_group_protocol:  # incremental: the kept ones were never revoked
        assert revoked == moved, revoked
    assert_each_message_once(grouped, feeder)
    joined = next(line for line in b.events("assigned") if line["added"])["at"] - started
    # (A may get B's partitions before B's process has exited: timed from B's SIGTERM)
    back = next(line["at"] for line in a.events("assigned") if line["at"] > stopping and line["added"])
    print(
        f"\n{broker.name}: B assigned {joined:.2f}s after start, "
        f"A reassigned {back - stopping:.2f}s after B's SIGTERM"
    )
    delays = answer_delays(grouped, feeder)
    for side, part in (("kept", kept), ("moved", moved)):
        ds = [d for cid, ds in delays.items() if partition_for(cid, settings.partitions) in part for d in ds]
        median, worst = statistics.median(ds), max(ds)
        print(f"\n{broker.name}: answer delay on {side} partitions: median {median:.2f}s, max {worst:.2f}s")


def test_a_static_member_restarted_within_the_session_gets_its_partitions_back_without_a_rebalance(
    apache_broker: BrokerInfo, tmp_path: Path
) -> None:
    settings = settings_for(apache_broker, tmp_path / "data")
    apply_topics(settings)
    everything = set(range(settings.partitions))
    with fleet() as runners:
        a = start(settings, tmp_path, "a", instance_id="runner-a")
        b = start(settings, tmp_path, "b", instance_id="runner-b")
        runners += [a, b]
        wait_until(lambda: a.owned() | b.owned() == everything and a.owned() and b.owned(), 60, "a split",
                   logs=logs_of(runners))  # fmt: skip
        mine = b.owned()
        a_lines = len(a.lines)
        b.signal(signal.SIGTERM)
        b.proc.wait(timeout=30)
        stopped = time.time()
        again = start(settings, tmp_path, "b", instance_id="runner-b")
        runners.append(again)
        wait_until(lambda: again.owned() == mine, 60, "B's partitions back", logs=logs_of(runners))
        back = again.events("assigned")[0]["at"] - stopped
        print(f"\nstatic member restarted: partitions back {back:.2f}s after the old process ended")
        assert back < settings.kafka.session_timeout_ms / 1000
        time.sleep(2)
        changes = [line for line in a.lines[a_lines:] if line["event"] in ("assigned", "revoked", "lost")]
        assert changes == [], changes
