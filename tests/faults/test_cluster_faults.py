"""Broker faults on a 3-broker Apache Kafka cluster under the whole pipeline and a scripted workload.

Fleet runners, the read-side consumers, the archive sink and the reconciler run as `convdb`
processes while conversations with keyed side effects stream in. A broker is restarted under
the test's idempotent producer, and the leader of the busiest events partition is SIGKILLed
and later restarted. Expected: 0 lost events, 0 duplicate projection rows, 0 duplicate provider
mutations, every conversation finished, and every service caught up without being touched.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from convdb.infra.dev.apache import ApacheKafka
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import ActionEvent, EventEnvelope, InboxMessage, SingleObjectCodec, StateUpdateEvent
from convdb.schemas.topics import EVENTS, INBOX
from tests.archive.conftest import archived_records
from tests.conftest import S3Endpoint, wait_until
from tests.consumers.verify import assert_index_exact, assert_stats_exact, assert_views_exact, scalar
from tests.faults.conftest import Pipeline, leader_of, start_pipeline
from tests.producers._support import records

pytestmark = [pytest.mark.kafka, pytest.mark.chaos]


def task(i: int) -> str:
    """Two keyed issues and a file: always finishable, two provider mutations."""
    return "\n".join(
        [
            f"Task {i}.",
            f'!create_issue {{"title": "c{i} first", "body": "b"}}',
            f'!write_file {{"path": "f-{i}.txt", "content": "x"}}',
            f'!create_issue {{"title": "c{i} second", "body": "b"}}',
        ]
    )


@dataclass
class Feeder:
    """Publishes inbox messages through one idempotent producer, in chunks, from a thread."""

    settings: Settings
    ids: list[str]
    chunks: int
    error: BaseException | None = None
    sent: int = 0
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            publisher = EventPublisher(self.settings, SingleObjectCodec())
            size = -(-len(self.ids) // self.chunks)
            for start in range(0, len(self.ids), size):
                for i, cid in enumerate(self.ids[start : start + size], start):
                    msg = InboxMessage(
                        id=str(uuid.uuid4()), conversation_id=cid, tenant_id="t1",
                        timestamp=datetime.now(UTC), command="message", content=task(i),
                    )  # fmt: skip
                    publisher.publish(msg, INBOX)
                publisher.flush()
                self.sent += min(size, len(self.ids) - start)
                time.sleep(1.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def mutations(pipeline: Pipeline) -> int:
    """Provider mutations so far."""
    return int(httpx.get(f"{pipeline.provider_url}/stats", timeout=5).json()["mutations"])


def statuses(events: list[Any]) -> dict[str, str]:
    """Last execution status per conversation."""
    last: dict[str, tuple[int, str]] = {}
    for e in events:
        if isinstance(e, StateUpdateEvent) and e.seq >= last.get(e.conversation_id, (0, ""))[0]:
            last[e.conversation_id] = (e.seq, e.execution_status)
    return {cid: status for cid, (_, status) in last.items()}


def busiest_partition(settings: Settings) -> int:
    """The events partition with the most records so far."""
    counts = Counter(m.partition() for m in _raw(settings))
    return counts.most_common(1)[0][0]


def _raw(settings: Settings) -> list[Any]:
    from convdb.infra.reader import read_topic

    return list(read_topic(settings, EVENTS.name(settings.namespace)))


def kill_busy_leader(kafka: ApacheKafka, pipeline: Pipeline, expected: int, figures: dict[str, Any]) -> None:
    """SIGKILL the leader of the busiest events partition; restart it once the pipeline moved on."""
    settings = pipeline.settings
    partition = busiest_partition(settings)
    node = leader_of(kafka, EVENTS.name(settings.namespace), partition)
    before = mutations(pipeline)
    kafka.kill(node)
    figures["kills"].append({"node": node, "partition": partition, "mutations_before": before})
    goal = min(expected, before + max(2, expected // 10))
    wait_until(lambda: mutations(pipeline) >= goal, 180, f"progress with node {node} down")
    kafka.restart(node)
    figures["restarts"] += 1


def run_workload(
    kafka: ApacheKafka, root: Path, s3: S3Endpoint, conversations: int, leader_kills: int
) -> dict[str, Any]:
    """The workload with its faults; returns the figures after checking every expectation."""
    pipeline = start_pipeline(kafka, root, s3)
    figures: dict[str, Any] = {"conversations": conversations, "kills": [], "restarts": 0}
    try:
        settings = pipeline.settings
        ids = [f"fc-{i}-{uuid.uuid4().hex[:6]}" for i in range(conversations)]
        expected = 2 * conversations
        feeder = Feeder(settings, ids, chunks=8)
        wait_until(lambda: feeder.sent > 0, 60, "the first inbox messages")
        quiet = next(
            n.node_id for n in kafka.nodes if n.node_id != leader_of(kafka, INBOX.name(settings.namespace), 0)
        )
        kafka.kill(quiet)  # a broker restarted under the feeder's idempotent producer
        kafka.restart(quiet)
        figures["kills"].append({"node": quiet, "under": "idempotent producer"})
        figures["restarts"] += 1
        for round_ in range(leader_kills):
            progress = expected * (round_ + 1) // (leader_kills + 2)
            wait_until(lambda p=progress: mutations(pipeline) >= p, 240, f"{progress} mutations")
            kill_busy_leader(kafka, pipeline, expected, figures)
        feeder.thread.join(120)
        assert feeder.error is None, (
            f"the idempotent producer failed across a broker restart: {feeder.error!r}"
        )
        check_outcome(pipeline, ids, figures)
    except BaseException:
        print(f"\nfigures so far: {json.dumps(figures)}")
        pipeline.show_logs()
        raise
    finally:
        pipeline.stop()
    return figures


def check_outcome(pipeline: Pipeline, ids: list[str], figures: dict[str, Any]) -> None:
    """Every expectation of the suite, with the figures recorded as they are measured."""
    settings = pipeline.settings
    done: dict[str, str] = {}

    def finished() -> list[Any]:
        events = records(settings, EVENTS)
        done.update(statuses(events))
        return events if all(done.get(cid) == "finished" for cid in ids) else []

    try:
        events: list[EventEnvelope] = wait_until(finished, 300, "every conversation finished")  # type: ignore[assignment]
    except BaseException:
        pending = {cid: done.get(cid) for cid in ids if done.get(cid) != "finished"}
        print(f"\nunfinished conversations (last status): {pending}")
        raise
    ours = [e for e in events if e.conversation_id in set(ids)]
    figures["events"] = len(events)
    lost = 0
    for cid in ids:
        seqs = sorted(e.seq for e in ours if e.conversation_id == cid and e.seq > 0)
        lost += len(set(range(1, seqs[-1] + 1)) - set(seqs)) + (len(seqs) - len(set(seqs)))
    figures["lost_or_duplicate_events"] = lost
    store = settings.resolved_store_url
    wait_until(
        lambda: scalar(store, "SELECT COUNT(*) FROM views_events") == len(events), 180, "views caught up"
    )
    wait_until(
        lambda: scalar(store, "SELECT COUNT(*) FROM index_events") == len(events), 180, "index caught up"
    )
    assert_views_exact(store, events)
    assert_index_exact(store, events)
    assert_stats_exact(store, events)
    figures["duplicate_projection_rows"] = int(
        scalar(store, "SELECT COUNT(*) - COUNT(DISTINCT event_id) FROM views_events") or 0
    )
    stats = httpx.get(f"{pipeline.provider_url}/stats", timeout=5).json()
    issue_ops = {e.operation_id for e in ours if isinstance(e, ActionEvent) and e.tool_name == "create_issue"}
    figures["provider_mutations"] = stats["mutations"]
    figures["duplicate_mutations"] = sum(n - 1 for n in stats["by_key"].values())
    wanted = {(m.partition(), m.offset()) for m in _raw(settings)}
    wait_until(
        lambda: {(r.partition, r.offset) for r in archived_records(settings)} >= wanted,
        120,
        "archive caught up",
    )
    figures["dead_services"] = pipeline.dead()
    print("\nfault suite figures: " + json.dumps(figures))
    assert lost == 0
    assert figures["duplicate_projection_rows"] == 0
    assert stats["mutations"] == len(issue_ops) == 2 * len(ids)
    assert figures["duplicate_mutations"] == 0
    assert figures["dead_services"] == []
    assert all(p.starts == 1 for p in pipeline.procs.values()), "a service needed a restart"


@pytest.mark.timeout(900)
def test_broker_faults_lose_and_double_nothing(
    cluster: ApacheKafka, tmp_path: Path, s3_endpoint: S3Endpoint
) -> None:
    figures = run_workload(cluster, tmp_path, s3_endpoint, conversations=30, leader_kills=1)
    assert figures["restarts"] == 2


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_broker_faults_long(cluster: ApacheKafka, tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    figures = run_workload(cluster, tmp_path, s3_endpoint, conversations=150, leader_kills=3)
    assert figures["restarts"] == 4
