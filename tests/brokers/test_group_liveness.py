"""Group liveness: members without partitions say so, and groups recover after members die mid-rebalance.

On the embedded broker a runners' group was once seen stuck after members were SIGKILLed during
a rebalance (fresh members held no partitions for 20+ minutes). These tests kill members during
a rebalance on each broker and bound the recovery, and check that a member without partitions
reports it in its log, on /healthz and in its metrics.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from convdb.infra.kafka import apply_topics, group_timeouts_ms
from convdb.infra.liveness import AssignmentWatch
from convdb.infra.procs import free_port
from convdb.infra.settings import Settings
from convdb.schemas.topics import EVENTS
from tests.conftest import BrokerInfo, wait_until
from tests.fleet._support import RunnerProc, fleet_settings
from tests.reconciler.conftest import Proc

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


def test_the_watch_reports_a_member_without_partitions() -> None:
    now = [100.0]
    problems: dict[str, str | None] = {}
    registry = CollectorRegistry()
    watch = AssignmentWatch("m", 5.0, registry, problems.__setitem__, clock=lambda: now[0])
    now[0] += 4.9
    assert watch.check() is None and problems == {}
    now[0] += 0.2
    assert watch.check() == "no partitions assigned for 5 s" and problems == {"unassigned": watch.problem()}
    assert b'convdb_group_unassigned_seconds{member="m"} 5.1' in generate_latest(registry)
    now[0] += 1
    assert watch.check() is None  # logged a second ago: not again yet
    assert problems == {"unassigned": "no partitions assigned for 6 s"}
    watch.assign([("t", 0), ("t", 1)])
    assert watch.unassigned_s() == 0.0 and problems == {"unassigned": None}
    watch.revoke([("t", 0)])
    assert watch.unassigned_s() == 0.0  # still holds t[1]
    watch.revoke([("t", 1)])
    now[0] += 7
    assert watch.problem() == "no partitions assigned for 7 s"
    assert b'convdb_group_assigned_partitions{member="m"} 0.0' in generate_latest(registry)


def session_s(settings: Settings) -> float:
    """The consumer session timeout of this broker's profile, in seconds."""
    return group_timeouts_ms(settings)[0] / 1000


@pytest.fixture
def one_partition(make_settings: Callable[..., Settings], tmp_path: Path) -> Settings:
    """One partition per topic (a second member gets none); members report after 2 s."""
    settings = make_settings(
        partitions=1,
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        archive_url=f"file://{tmp_path / 'archive'}",
    )
    settings = settings.model_copy(
        update={"ops": settings.ops.model_copy(update={"unassigned_after_s": 2.0})}
    )
    apply_topics(settings)
    return settings


class Member:
    """A `convdb consume NAME` process with its ops endpoint."""

    def __init__(self, settings: Settings, name: str, log: Path) -> None:
        self.port = free_port()
        env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "CONVDB_OPS__LOG_LEVEL": "INFO"}
        argv = [sys.executable, "-m", "convdb", "consume", name, "--metrics-port", str(self.port)]
        self.proc = Proc(argv, log, env).start()

    def healthz(self) -> tuple[int, dict[str, object]] | None:
        """Status code and body of /healthz, None while the endpoint is not up."""
        try:
            reply = httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=2)
        except httpx.HTTPError:
            return None
        return reply.status_code, reply.json()

    def metric(self, name: str) -> float | None:
        """One unlabelled-by-topic sample of the member's /metrics, None while it is not up."""
        try:
            text = httpx.get(f"http://127.0.0.1:{self.port}/metrics", timeout=2).text
        except httpx.HTTPError:
            return None
        values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
        return values[0] if values else None


@pytest.mark.parametrize("consumer", ["views", pytest.param("archive", marks=pytest.mark.slow)])
def test_a_member_without_partitions_says_so_and_takes_over_when_the_owner_dies(
    one_partition: Settings, tmp_path: Path, consumer: str
) -> None:
    first = Member(one_partition, consumer, tmp_path / "first.log")
    members = [first]
    try:
        wait_until(
            lambda: (first.metric("convdb_group_assigned_partitions") or 0) > 0, 60, "the first assigned"
        )
        members.append(Member(one_partition, consumer, tmp_path / "second.log"))

        def split() -> tuple[Member, Member] | None:
            # The rebalance gives the partition to either member (the range assignor sorts member ids),
            # and a joining member rightly reports while its first assignment is pending: wait for
            # one member holding the partition and the other holding none and saying so.
            # One snapshot per member (health, partitions held, seconds without any): on a loaded
            # machine a late rebalance can move the partition between two separate reads.
            replies = [m.healthz() or (0, {}) for m in members]
            held = [m.metric("convdb_group_assigned_partitions") for m in members]
            idle_for = [m.metric("convdb_group_unassigned_seconds") or 0.0 for m in members]
            for owner, idle in ((0, 1), (1, 0)):
                unassigned = replies[idle][1].get("problems", {}).get("unassigned", "")  # type: ignore[union-attr]
                if replies[owner][0] == 200 and (held[owner] or 0) > 0 and held[idle] == 0 and unassigned:
                    assert replies[idle][0] == 503 and unassigned.startswith("no partitions assigned for")
                    if idle_for[idle] >= 2.0:
                        return members[owner], members[idle]
            return None

        owner, idle = wait_until(split, 60, "one member owning, the other reporting for 2 s")  # type: ignore[misc]
        assert "no partitions assigned for" in idle.proc.log.read_text()

        owner.proc.kill()
        killed = time.monotonic()
        wait_until(lambda: (idle.healthz() or (0, {}))[0] == 200, 60, "the idle member takes over")
        took = time.monotonic() - killed
        print(f"\n{consumer}: takeover {took:.1f}s after SIGKILL (session {session_s(one_partition)}s)")
        assert took <= session_s(one_partition) + 8.0
        assert idle.metric("convdb_group_unassigned_seconds") == 0.0
        assert "partitions assigned again after" in idle.proc.log.read_text()
    finally:
        for member in members:
            member.proc.stop()


class BareMember:
    """`python -m tests.brokers.member`: assignments read from its stdout as they come."""

    def __init__(self, settings: Settings, topic: str, group: str) -> None:
        argv = [sys.executable, "-m", "tests.brokers.member", topic, group]
        env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env={**os.environ, **env})
        self.owned: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            change = json.loads(line)
            if change["event"] == "assign":
                self.owned = set(change["partitions"])
            else:
                self.owned -= set(change["partitions"])

    def kill(self) -> None:
        """SIGKILL."""
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def members() -> Iterator[list[BareMember]]:
    """Every bare member a test starts; all killed at the end."""
    started: list[BareMember] = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.kill()


@pytest.mark.parametrize("delay", [pytest.param(0.2, marks=pytest.mark.slow), 1.0])
def test_fresh_members_get_partitions_after_members_die_mid_rebalance(
    broker: BrokerInfo, settings: Settings, members: list[BareMember], delay: float
) -> None:
    topic, group = EVENTS.name(settings.namespace), f"{settings.namespace}.liveness-{uuid.uuid4().hex[:6]}"
    everything = set(range(settings.partitions))

    def start() -> BareMember:
        members.append(BareMember(settings, topic, group))
        return members[-1]

    first = [start() for _ in range(3)]
    wait_until(lambda: set().union(*(m.owned for m in first)) == everything, 60, "the first three assigned")
    start()  # a fourth member joins: a rebalance begins
    time.sleep(delay)
    for m in first[:2]:
        m.kill()
    fresh = [start(), start()]
    survivors = [first[2], members[3], *fresh]
    killed = time.monotonic()
    # A dead member is evicted after one session timeout; the rebalance that follows may wait out
    # another one for members that died while joining.
    wait_until(
        lambda: set().union(*(m.owned for m in survivors)) == everything,
        2 * session_s(settings) + 20,
        f"every partition assigned again on the {broker.name} broker",
    )
    print(f"\n{broker.name}: all partitions assigned {time.monotonic() - killed:.1f}s after the kills")
    owned = [p for m in survivors for p in m.owned]
    assert sorted(owned) == sorted(everything)  # each partition has exactly one owner


def test_a_fleet_runner_without_partitions_says_so_and_takes_over(
    one_partition: Settings, tmp_path: Path
) -> None:
    ports = [free_port(), free_port()]
    runners = [
        RunnerProc(
            fleet_settings(one_partition, tmp_path / f"r{i}"),
            tmp_path / "ws",
            None,
            tmp_path / f"runner-{i}.log",
            CONVDB_OPS__PORT=str(port),
        )
        for i, port in enumerate(ports)
    ]
    try:
        wait_until(lambda: any(r.owned() for r in runners), 60, "one runner owns the inbox partition")

        def reporting() -> list[RunnerProc]:
            return [r for r in runners if r.events("unassigned") and not r.owned()]

        (idle,) = wait_until(reporting, 60, "the other runner reporting it holds nothing")  # type: ignore[misc]
        owner = runners[1 - runners.index(idle)]
        assert idle.events("unassigned")[0]["detail"].startswith("no partitions assigned for")
        assert "no partitions assigned for" in idle.stderr()
        health = httpx.get(f"http://127.0.0.1:{ports[runners.index(idle)]}/healthz", timeout=5)
        assert health.status_code == 503 and "unassigned" in health.json()["problems"]
        metrics = httpx.get(f"http://127.0.0.1:{ports[runners.index(idle)]}/metrics", timeout=5).text
        assert (
            "convdb_group_assigned_partitions{" in metrics and "convdb_group_unassigned_seconds{" in metrics
        )

        owner.signal(signal.SIGKILL)
        wait_until(lambda: idle.owned() == {0}, session_s(one_partition) + 30, "the idle runner takes over")
        wait_until(
            lambda: (
                httpx.get(f"http://127.0.0.1:{ports[runners.index(idle)]}/healthz", timeout=5).status_code
                == 200
            ),
            30,
            "its /healthz back to 200",
        )
    finally:
        for runner in runners:
            runner.stop()
