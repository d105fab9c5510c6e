"""Zombie fencing and failover with real runner processes, a real broker and the tracker provider."""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.dev.tracker.process import ProviderProcess
from convdb.infra.partitioner import partition_for
from convdb.infra.settings import Settings
from convdb.producers.fleet import transactional_id
from convdb.producers.publisher import EventPublisher
from convdb.schemas import ActionEvent, EffectConfirmed, InboxMessage, SingleObjectCodec, StateUpdateEvent
from convdb.schemas.topics import EFFECTS, EVENTS, INBOX
from tests.conftest import wait_until
from tests.fleet._support import RunnerProc, fleet_settings, logs_of
from tests.producers._support import by_conversation, records

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[ProviderProcess]:
    """The issue-tracker provider as a real process."""
    with ProviderProcess(tmp_path / "provider.log") as proc:
        yield proc


def send(publisher: EventPublisher, conversation: str, text: str) -> None:
    """A user message on the inbox topic."""
    msg = InboxMessage(
        id=str(uuid.uuid4()),
        conversation_id=conversation,
        tenant_id="t1",
        timestamp=datetime.now(UTC),
        command="message",
        content=text,
    )
    publisher.publish(msg, INBOX)


def final_status(evs: list[Any]) -> str | None:
    """The last execution status a conversation's events record."""
    updates = [e for e in sorted(evs, key=lambda e: e.seq) if isinstance(e, StateUpdateEvent)]
    return updates[-1].execution_status if updates else None


def assert_gap_and_duplicate_free(evs: list[Any], cid: str) -> None:
    seqs = [e.seq for e in evs if e.seq > 0]
    assert sorted(seqs) == list(range(1, len(seqs) + 1)), f"{cid}: seqs {sorted(seqs)}"


def test_a_zombie_runner_is_fenced_and_never_reaches_the_provider(
    settings: Settings, tmp_path: Path, provider: ProviderProcess
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    zombie_env = {
        "CONVDB_CRASH_AT": "after_effect_proposed",
        "CONVDB_CRASH_TOOL": "create_issue",
        "CONVDB_CRASH_SIGNAL": "SIGSTOP",
    }
    a = RunnerProc(
        fleet_settings(settings, tmp_path / "a"), ws, provider.url, tmp_path / "a.log", **zombie_env
    )
    runners = [a]
    try:
        wait_until(
            lambda: a.owned() == set(range(settings.partitions)),
            60,
            "A owns every partition",
            logs=logs_of(runners),
        )
        cid = f"zombie-{uuid.uuid4().hex[:8]}"
        partition = partition_for(cid, settings.partitions)
        publisher = EventPublisher(settings, SingleObjectCodec())
        send(
            publisher, cid, '!create_issue {"title": "t", "body": "b"}\n!notify {"to": "ops", "text": "done"}'
        )
        publisher.flush()
        wait_until(a.stopped, 60, "A frozen after EffectProposed (SIGSTOP)", logs=logs_of(runners))
        stopped_at = time.monotonic()

        b = RunnerProc(fleet_settings(settings, tmp_path / "b"), ws, provider.url, tmp_path / "b.log")
        runners.append(b)
        wait_until(lambda: partition in b.owned(), 60, "B owns the zombie's partition", logs=logs_of(runners))
        print(f"\nB took the partition over {time.monotonic() - stopped_at:.2f}s after A froze")
        wait_until(
            lambda: final_status(records(settings, EVENTS, cid)) == "finished",
            60,
            "B finishes it",
            logs=logs_of(runners),
        )

        a.signal(signal.SIGCONT)  # the zombie wakes up and carries on with its EffectStarted commit
        wait_until(
            lambda: partition in {f["partition"] for f in a.events("fenced")},
            60,
            "A fenced",
            logs=logs_of(runners),
        )
        log = a.stderr()
        assert "FENCED: partition" in log and transactional_id(settings, partition) in log
        evs = records(settings, EVENTS, cid)
        assert_gap_and_duplicate_free(evs, cid)
        ops = {e.tool_name: e.operation_id for e in evs if isinstance(e, ActionEvent)}
        by_key = provider.get("/stats")["by_key"]
        assert by_key.get(ops["create_issue"]) == 1, by_key  # B's call only; A never reached it
        assert by_key.get(ops["notify"]) == 1, by_key
        assert provider.get("/stats")["mutations"] == 2
    finally:
        for runner in runners:
            runner.stop()


def task(i: int) -> str:
    """Three steps: an issue, a file, another issue (keyed and idempotent: always finishable)."""
    return "\n".join(
        [
            f"Task {i}.",
            f'!create_issue {{"title": "c{i} first", "body": "b"}}',
            f'!write_file {{"path": "f-{i}.txt", "content": "x"}}',
            f'!create_issue {{"title": "c{i} second", "body": "b"}}',
        ]
    )


def test_failover_50_conversations_over_2_runners_with_one_killed(
    settings: Settings, tmp_path: Path, provider: ProviderProcess
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    a = RunnerProc(fleet_settings(settings, tmp_path / "a"), ws, provider.url, tmp_path / "a.log")
    b = RunnerProc(fleet_settings(settings, tmp_path / "b"), ws, provider.url, tmp_path / "b.log")
    runners = [a, b]
    try:
        everything = set(range(settings.partitions))
        wait_until(
            lambda: a.owned() | b.owned() == everything and a.owned() and b.owned(),
            60,
            "a split",
            logs=logs_of(runners),
        )
        ids = [f"fo-{i}-{uuid.uuid4().hex[:6]}" for i in range(50)]
        publisher = EventPublisher(settings, SingleObjectCodec())
        for i, cid in enumerate(ids):
            send(publisher, cid, task(i))
        publisher.flush()
        wait_until(
            lambda: provider.get("/stats")["mutations"] >= 15,
            60,
            "the stream under way",
            logs=logs_of(runners),
        )
        victim = a
        lost = victim.owned()
        victim.signal(signal.SIGKILL)
        killed_at = time.time()
        victim.proc.wait(timeout=10)

        def taken_over() -> bool:
            later = [t for t in b.events("takeover") if t["at"] > killed_at]
            return b.owned() == everything and lost <= {t["partition"] for t in later}

        wait_until(taken_over, 60, "B takes A's partitions over", logs=logs_of(runners))
        takeover = [t for t in b.events("takeover") if t["at"] > killed_at and t["partition"] in lost]
        failover = max(t["at"] for t in takeover) - killed_at
        resumed = sum(len(t["conversations"]) for t in takeover)
        print(f"\nfailover: kill -> all conversations running again: {failover:.2f}s ({resumed} resumed)")
        wait_until(
            lambda: provider.get("/stats")["mutations"] >= 100,
            120,
            "every issue created",
            logs=logs_of(runners),
        )

        def all_finished() -> dict[str, list[Any]]:
            grouped = by_conversation(records(settings, EVENTS))
            done = all(final_status(grouped.get(cid, [])) == "finished" for cid in ids)
            return grouped if done else {}

        grouped = wait_until(all_finished, 120, "all 50 finished", logs=logs_of(runners))
        for cid in ids:
            assert_gap_and_duplicate_free(grouped[cid], cid)
        actions = {
            e.operation_id: e.tool_name for evs in grouped.values() for e in evs if isinstance(e, ActionEvent)
        }
        confirmed = {r.operation_id for r in records(settings, EFFECTS) if isinstance(r, EffectConfirmed)}
        issue_ops = {op for op, tool in actions.items() if tool == "create_issue"}
        stats = provider.get("/stats")
        assert stats["mutations"] == len(issue_ops & confirmed) == 100
        assert all(count == 1 for count in stats["by_key"].values()), stats["by_key"]
    finally:
        for runner in runners:
            runner.stop()
