"""The fleet bench's moving parts: `convdb runner` children, the inbox pacer, the steps log.

Each runner is a real `python -m convdb runner` process with a data dir of its own (a machine of
its own: its snapshot store is not shared) and a stable name, passed as
`CONVDB_RUNTIME__INSTANCE_ID` as the k8s StatefulSet sets it from the pod name (static
membership). Its JSON status lines (`assigned`, `revoked`, `lost`, ...) are read from its log,
which is where the bench learns which partitions moved. Steps come from the events topic: one
`LLMUsageEvent` per agent step, stamped by the runner that wrote it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Message, TopicPartition

from bench.common import BenchContext, BenchError
from convdb.infra.kafka import apply_topics
from convdb.infra.partitioner import partition_for
from convdb.infra.procs import spawn, stop_group, tail
from convdb.infra.producer import DurableProducer
from convdb.infra.reader import consume_to_end, partitions_of, reader_consumer
from convdb.infra.settings import Settings
from convdb.schemas import InboxMessage, LLMUsageEvent, make_codec
from convdb.schemas.topics import ALL_TOPICS, EVENTS, INBOX

TENANT = "bench"


def namespace(ctx: BenchContext, label: str, partitions: int, latency_ms: float) -> Settings:
    """Settings under a fresh namespace of `partitions`, scripted model run directly, topics created."""
    name = f"bench-{label}-{uuid.uuid4().hex[:8]}"
    llm = ctx.settings.llm.model_copy(
        update={"scripted_backend": "direct", "scripted_latency_ms": latency_ms}
    )
    settings = ctx.settings.model_copy(
        update={"namespace": name, "data_dir": ctx.workdir / name, "partitions": partitions, "llm": llm}
    )
    apply_topics(settings, ALL_TOPICS)
    return settings


@dataclass
class RunnerChild:
    """One `convdb runner` process (a name survives a restart; the pid does not)."""

    name: str
    settings: Settings
    log: Path
    workspace: Path
    """Shared by the fleet: the file tools' folder is part of the agent's version."""
    proc: Any = None
    started_at: float = 0.0
    signalled: list[tuple[str, float]] = field(default_factory=list)
    """(signal name, wall time) of every signal the bench sent it."""

    def start(self) -> RunnerChild:
        """Spawn the process (again, under the same name and data dir)."""
        argv = [sys.executable, "-m", "convdb", "runner", "--workspace", str(self.workspace)]
        env = {**self.settings.to_env(), "CONVDB_RUNTIME__INSTANCE_ID": self.name}
        self.started_at = time.time()
        self.proc = spawn(argv, self.log, env)
        return self

    @property
    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signum: signal.Signals) -> float:
        """Send a signal; returns when (wall clock)."""
        at = time.time()
        os.kill(self.proc.pid, signum)
        self.signalled.append((signum.name, at))
        return at

    def wait_exit(self, timeout: float) -> float:
        """Wait for the process to end; returns when it was seen gone."""
        try:
            self.proc.wait(timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - subprocess.TimeoutExpired: say which runner
            raise BenchError(f"runner {self.name} did not exit in {timeout}s:\n{tail(self.log)}") from exc
        return time.time()

    def stop(self) -> None:
        """Stop it for good (SIGTERM, then SIGKILL after a grace period)."""
        if self.proc is not None:
            stop_group(self.proc.pid)

    def lines(self) -> list[dict[str, Any]]:
        """Its JSON status lines so far (every start of this name), each with `runner` = name."""
        out = []
        if not self.log.exists():
            return out
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith('{"event"'):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                out.append({**record, "runner": self.name})
        return out


def fleet_lines(runners: list[RunnerChild]) -> list[dict[str, Any]]:
    """Every runner's status lines in time order."""
    return sorted((line for r in runners for line in r.lines()), key=lambda line: line["at"])


def owners(lines: list[dict[str, Any]], dead: dict[str, float], at: float) -> dict[int, str]:
    """Partition -> the runner name that owns it at wall time `at`, from the status lines.

    `assigned` gives partitions (the whole set under an eager assignor, the added ones under an
    incremental one: either way they are the runner's from then on); `revoked`, `lost` and
    `fenced` take them away; a runner killed (`dead`: name -> when) owns nothing from then on,
    until its next `assigned` after a restart.
    """
    owner: dict[int, str] = {}
    for line in lines:
        if line["at"] > at:
            break
        name, kind = line["runner"], line["event"]
        if kind in ("assigned", "restored"):
            parts = line.get("partitions") or ([line["partition"]] if "partition" in line else [])
            for p in parts:
                owner[p] = name
        elif kind in ("revoked", "lost"):
            for p in line.get("partitions", []):
                if owner.get(p) == name:
                    del owner[p]
        elif kind == "fenced" and owner.get(line["partition"]) == name:
            del owner[line["partition"]]
    for name, killed in dead.items():
        restarted = any(
            line["runner"] == name and line["event"] == "assigned" and killed < line["at"] <= at
            for line in lines
        )
        if killed <= at and not restarted:
            owner = {p: n for p, n in owner.items() if n != name}
    return owner


class Pacer(threading.Thread):
    """Sends every live conversation a user message every `period_s`, staggered, until stopped.

    Each message is one run of the scripted model: one step. Messages queue in the inbox while
    a partition has no runner, so the step gap is the time a conversation waited.
    """

    def __init__(self, settings: Settings, conversations: list[str], period_s: float) -> None:
        super().__init__(daemon=True, name="fleet-pacer")
        self.settings = settings
        self.conversations = conversations
        self.period_s = period_s
        self.stopping = threading.Event()
        self.sent = 0
        self.sends: dict[str, list[float]] = {}
        """Conversation -> when each of its messages was sent (wall clock, in order)."""
        self.error: BaseException | None = None

    def run(self) -> None:
        """Produce on schedule (late sends go at once: the schedule never drifts)."""
        producer = DurableProducer(self.settings)
        codec = make_codec(self.settings.schema_registry_url)
        topic = INBOX.name(self.settings.namespace)
        step = self.period_s / max(1, len(self.conversations))
        start = time.monotonic()
        try:
            while not self.stopping.is_set():
                due = start + self.sent * step
                wait = due - time.monotonic()
                if wait > 0 and self.stopping.wait(wait):
                    break
                cid = self.conversations[self.sent % len(self.conversations)]
                self.sends.setdefault(cid, []).append(time.time())
                producer.produce_raw(topic, cid, codec.encode(message(cid, f"tick {self.sent}")))
                producer.producer.poll(0)
                self.sent += 1
            producer.flush(30)
        except BaseException as exc:  # noqa: BLE001 - reported by `stop`
            self.error = exc

    def stop(self) -> None:
        """Stop sending; raise what went wrong while sending."""
        self.stopping.set()
        self.join(60)
        if self.error is not None:
            raise BenchError(f"the inbox pacer failed: {self.error}") from self.error


def message(cid: str, text: str) -> InboxMessage:
    """A user message to a conversation (no directives: the scripted model answers in one step)."""
    return InboxMessage(
        id=str(uuid.uuid4()), conversation_id=cid, tenant_id=TENANT,
        timestamp=datetime.now(UTC), command="message", content=text,
    )  # fmt: skip


def send_all(settings: Settings, conversations: list[str], text: str) -> None:
    """One message to each conversation, durable when this returns."""
    producer = DurableProducer(settings)
    codec = make_codec(settings.schema_registry_url)
    topic = INBOX.name(settings.namespace)
    for cid in conversations:
        producer.produce_raw(topic, cid, codec.encode(message(cid, text)))
    producer.flush(60)


@dataclass(frozen=True)
class Steps:
    """Step times (wall seconds) per conversation, and each conversation's partition."""

    times: dict[str, list[float]]
    partition: dict[str, int]
    sent: dict[str, list[float]] = field(default_factory=dict)
    """Conversation -> when the pacer sent each of its messages (empty: not known)."""

    def ready(self, cid: str, step: int) -> float | None:
        """When the message that step number `step` of `cid` answers was sent: the first sent after
        the conversation's previous step (messages are answered in order, one step each); None
        when not known."""
        ts = self.times[cid]
        after = ts[step - 1] if step > 0 else float("-inf")
        return next((t for t in self.sent.get(cid, []) if after < t <= ts[step]), None)

    def count_between(self, t0: float, t1: float) -> int:
        """Steps of every conversation in [t0, t1)."""
        return sum(1 for ts in self.times.values() for t in ts if t0 <= t < t1)


def read_events(settings: Settings, *, committed: bool = True) -> Iterator[Message]:
    """The namespace's events topic, every partition to its end.

    `fetch.wait.max.ms` is 500 ms, not the readers' 10 ms on the embedded broker: there a fetch
    of a topic written in many small transactions came back with a handful of records at 10 ms
    (6 records in 15 s, a topic of 6,100) and in full at 500 ms. A committed read reaches a
    partition's end only when no transaction is open in it: while runners write steadily, a
    progress check reads uncommitted (`committed=False`) and the figures are read once they stop.
    """
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = reader_consumer(settings, "bench", **{"fetch.wait.max.ms": 500, "isolation.level": isolation})
    topic = EVENTS.name(settings.namespace)
    try:
        parts = partitions_of(consumer, topic)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        yield from consume_to_end(consumer, [(topic, p) for p in parts], {}, poll_timeout=0.5, batch=2000)
    finally:
        consumer.close()


def read_steps(settings: Settings, *, committed: bool = True) -> Steps:
    """Every step of the namespace's events topic: the timestamps of its `LLMUsageEvent`s."""
    codec = make_codec(settings.schema_registry_url)
    times: dict[str, list[float]] = {}
    for msg in read_events(settings, committed=committed):
        event = codec.decode(msg.value() or b"")
        if isinstance(event, LLMUsageEvent):
            times.setdefault(event.conversation_id, []).append(event.timestamp.timestamp())
    for ts in times.values():
        ts.sort()
    parts = {cid: partition_for(cid, settings.partitions) for cid in times}
    return Steps(times, parts)


def conversation_ids(prefix: str, count: int) -> list[str]:
    """`count` fresh conversation ids."""
    tag = uuid.uuid4().hex[:6]
    return [f"{prefix}-{tag}-{i:05d}" for i in range(count)]


def wait_for(
    condition: Any, timeout: float, what: str, runners: list[RunnerChild], poll: float = 0.1
) -> None:
    """Wait until `condition()`, or raise with the runners' log tails."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {r.name}:\n{tail(r.log, 30)}" for r in runners)
            raise BenchError(f"fleet: {what}: not within {timeout:.0f}s\n{logs}")
        time.sleep(poll)
