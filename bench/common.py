"""What every benchmark shares: the run context, medians, and agent-shaped events."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from convdb.infra.kafka import apply_topics, make_admin
from convdb.infra.settings import Settings
from convdb.schemas import ActionEvent, EventEnvelope, MessageEvent, ObservationEvent
from convdb.schemas.topics import ALL_TOPICS, Topic

Figures = dict[str, float]
"""What a benchmark returns: figure key -> value (units are in the key's description)."""


class BenchError(Exception):
    """A benchmark could not measure what it claims to (the run exits non-zero)."""


@dataclass(frozen=True)
class BenchContext:
    """Where a benchmark runs: the broker settings, the size, how often to repeat, a work dir."""

    settings: Settings
    size: str
    repeats: int
    workdir: Path
    notes: list[str] = field(default_factory=list)
    """What the table must say beside the figures (a part not measured, and why)."""

    @property
    def large(self) -> bool:
        """True for `--size large`."""
        return self.size == "large"

    def pick(self, small: int, large: int) -> int:
        """A count for this size."""
        return large if self.large else small

    def fresh(self, label: str, topics: tuple[Topic, ...] = ALL_TOPICS) -> Settings:
        """Settings under a new namespace (new topics, groups, data dir), topics created."""
        namespace = f"bench-{label}-{uuid.uuid4().hex[:8]}"
        settings = self.settings.model_copy(
            update={"namespace": namespace, "data_dir": self.workdir / namespace}
        )
        apply_topics(settings, topics)
        return settings


def drop_namespace(settings: Settings) -> None:
    """Delete a namespace's topics so the in-memory embedded broker frees their data."""
    admin = make_admin(settings)
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(settings.namespace + ".")]
    if names:
        for future in admin.delete_topics(names, request_timeout=30).values():
            future.result()


def median(values: list[float]) -> float:
    """The median of several runs."""
    if not values:
        raise BenchError("no runs to take a median of")
    return float(statistics.median(values))


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of one call."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rate(count: int, seconds: float) -> float:
    """Items per second."""
    if seconds <= 0:
        raise BenchError(f"non-positive duration {seconds} for {count} items")
    return count / seconds


BASE_TIME = datetime(2025, 1, 1, tzinfo=UTC)
CONTENT_1K = ("ls -la output: drwxr-xr-x 2 agent agent 4096 file.txt\n" * 20)[:1024]


def observation(conv: str, seq: int, content: str = CONTENT_1K) -> ObservationEvent:
    """An agent-shaped 1 KB event: a tool's observation."""
    return ObservationEvent(
        id=str(uuid.uuid4()),
        conversation_id=conv,
        tenant_id="bench",
        seq=seq,
        timestamp=BASE_TIME + timedelta(milliseconds=seq),
        source="environment",
        parent_id=None,
        action_id=str(uuid.uuid4()),
        tool_name="execute_bash",
        tool_call_id=f"call_{seq}",
        content=content,
    )


def conversation(conv: str, count: int, tenant: str = "bench") -> Iterator[EventEnvelope]:
    """A conversation of `count` events cycling message -> action -> observation, seq from 1."""
    parent: str | None = None
    for seq in range(1, count + 1):
        common = {
            "id": str(uuid.uuid4()),
            "conversation_id": conv,
            "tenant_id": tenant,
            "seq": seq,
            "timestamp": BASE_TIME + timedelta(milliseconds=seq),
            "parent_id": parent,
        }
        step = seq % 3
        event: EventEnvelope
        if step == 1:
            event = MessageEvent(
                **common, source="agent", role="assistant", content=f"step {seq}: let me look"
            )
        elif step == 2:
            event = ActionEvent(
                **common,
                source="agent",
                tool_name="execute_bash",
                tool_call_id=f"call_{seq}",
                arguments='{"command":"ls -la"}',
                llm_response_id=f"resp_{seq}",
                operation_id=f"{conv}/{common['id']}",
                intent_hash="0" * 64,
                effect_class="read_only",
            )
        else:
            event = ObservationEvent(
                **common,
                source="environment",
                action_id=str(parent),
                tool_name="execute_bash",
                tool_call_id=f"call_{seq - 1}",
                content=CONTENT_1K,
            )
        parent = event.id
        yield event


def many_conversations(count: int, conversations: int = 100) -> list[EventEnvelope]:
    """`count` 1 KB observations spread round-robin over conversations, gap-free seq in each."""
    out: list[EventEnvelope] = []
    for i in range(count):
        out.append(observation(f"conv-{i % conversations:04d}", i // conversations + 1))
    return out


def metric_sum(port: int, name: str, label_part: str = "") -> float:
    """The sum of a counter's series on a child's metrics endpoint (0 until it answers), over the
    series whose labels contain `label_part`."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and label_part in line
    )


def consumer_events_applied(port: int) -> float:
    """Events a `convdb consume` child has applied, from its metrics endpoint (0 until it answers)."""
    return metric_sum(port, "convdb_consumer_events_total")
