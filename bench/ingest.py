"""OpenHands webhook ingest: batches of 5 events posted to one `convdb serve` process, durable before 2xx.

Real pieces only: `convdb serve` (uvicorn, one process) as a child process; clients post like
agent-servers do (each conversation one batch at a time, in order, the next after the 2xx), many
conversations at once, from an async httpx client in this process. A 2xx means the batch is in
the inbox topic, acknowledged by the broker (acks=all); the runner that appends it later is not
part of this figure.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta

from confluent_kafka import Consumer, TopicPartition

from bench.common import BenchContext, BenchError, Figures, drop_namespace, median
from convdb.infra.kafka import common_config
from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from convdb.infra.reader import partition_extents
from convdb.infra.settings import Settings
from convdb.schemas.topics import INBOX

API_KEY = "bench-key"
BATCH = 5
STREAMS = 48
"""Conversations posting at once (an agent-server posts one batch per conversation at a time)."""
MAX_RETRIES = 1000
"""503 answers retried in one bench run before it is called failed (a broker that stopped answering)."""

FIGURES: dict[str, tuple[str, str, str]] = {
    "ingest_events_per_s": ("OpenHands webhook ingest, batches of 5, one API process", "events/s", ">= 5k"),
    "ingest_batches_per_s": ("OpenHands webhook ingest: batches (requests) per second", "batches/s", ""),
    "ingest_p50_ms": ("OpenHands webhook ingest: request latency p50 (durable before 2xx)", "ms", ""),
    "ingest_p99_ms": ("OpenHands webhook ingest: request latency p99 (durable before 2xx)", "ms", ""),
    "ingest_appended_per_s": (
        "the inbox backlog appended to the event log by one runner (mapping, dedupe, transactions)",
        "events/s",
        "",
    ),
}


def _action(i: int, text: dict[str, object]) -> dict[str, object]:
    pattern = f"src/**/*{i}.py"
    call = {
        "id": f"call_{i}",
        "name": "glob",
        "arguments": json.dumps({"pattern": pattern}),
        "origin": "completion",
    }
    return {
        "source": "agent",
        "thought": [text],
        "thinking_blocks": [],
        "action": {"pattern": pattern, "kind": "GlobAction"},
        "tool_name": "glob",
        "tool_call_id": f"call_{i}",
        "tool_call": call,
        "llm_response_id": f"resp-{i}",
        "security_risk": "UNKNOWN",
        "kind": "ActionEvent",
    }


def _observation(i: int, text: dict[str, object], action_id: object) -> dict[str, object]:
    return {
        "source": "environment",
        "tool_name": "glob",
        "tool_call_id": f"call_{i - 1}",
        "observation": {
            "content": [text],
            "is_error": False,
            "files": [f"src/a{i}.py"],
            "kind": "GlobObservation",
        },
        "action_id": action_id,
        "extended_content": [],
        "kind": "ObservationEvent",
    }


def _message(text: dict[str, object]) -> dict[str, object]:
    return {
        "source": "agent",
        "llm_message": {"role": "assistant", "content": [text], "thinking_blocks": []},
        "activated_skills": [],
        "extended_content": [],
        "kind": "MessageEvent",
    }


def _events(count: int, start: datetime, parent: str | None) -> list[dict[str, object]]:
    """OpenHands-shaped events (action, observation, message; ~0.5-1 KB each), chained by parent."""
    out: list[dict[str, object]] = []
    for i in range(count):
        eid = str(uuid.uuid4())
        base = {"id": eid, "timestamp": (start + timedelta(milliseconds=i)).isoformat(), "parent_id": parent}
        text = {"cache_prompt": False, "type": "text", "text": f"step {i}: " + "lorem ipsum " * 30}
        kind = i % 3
        body = (
            _action(i, text)
            if kind == 0
            else _observation(i, text, out[-1]["id"])
            if kind == 1
            else _message(text)
        )
        out.append({**base, **body})
        parent = eid
    return out


def _bodies(batches: int) -> list[tuple[str, list[bytes]]]:
    """Per conversation: its id (hex) and its batch bodies, prepared before the clock starts."""
    start = datetime(2026, 5, 1, 12, 0)
    out = []
    for _ in range(STREAMS):
        events = _events(batches * BATCH, start, None)
        bodies = [json.dumps(events[i : i + BATCH]).encode() for i in range(0, len(events), BATCH)]
        out.append((uuid.uuid4().hex, bodies))
    return out


async def _stream(
    port: int, cid: str, bodies: list[bytes], latencies: list[float], retried: list[str]
) -> None:
    """One conversation's batches over one keep-alive connection, each after the previous 2xx.

    A 503 (the broker did not acknowledge in time) is retried after 0.2 s, as the agent-server
    does; the batch's latency runs from its first send to its 200, and each retry is recorded.
    A minimal HTTP/1.1 client: httpx's own per-request cost on the shared 2 cores would be
    measured instead of the API's.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"POST /openhands/webhooks/events/{cid} HTTP/1.1\r\nHost: bench\r\nX-API-Key: {API_KEY}\r\n"
    try:
        for body in bodies:
            sent = time.perf_counter()
            while True:
                writer.write(
                    f"{head}Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                status = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                answer = await reader.readexactly(length)
                if b" 503 " in status and len(retried) < MAX_RETRIES:
                    retried.append(answer[:200].decode(errors="replace"))
                    await asyncio.sleep(0.2)
                    continue
                if b" 200 " not in status:
                    raise BenchError(f"webhook answered {status.decode().strip()}: {answer[:300]!r}")
                break
            latencies.append(time.perf_counter() - sent)
    finally:
        writer.close()


async def _post_all(
    port: int, work: list[tuple[str, list[bytes]]], retried: list[str]
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    started = time.perf_counter()
    await asyncio.gather(*(_stream(port, cid, bodies, latencies, retried) for cid, bodies in work))
    return time.perf_counter() - started, latencies


def _append_backlog(settings: Settings) -> float:
    """Seconds one runner takes from its partition assignment until it committed the whole inbox."""
    topic = INBOX.name(settings.namespace)
    ends = {p: high for p, (_, high) in partition_extents(settings, topic).items()}
    log = settings.data_dir / "runner.log"
    env = direct_scripted(settings).to_env()
    runner = spawn(
        [sys.executable, "-m", "convdb", "runner", "--workspace", str(settings.data_dir)], log, env
    )
    consumer = Consumer({**common_config(settings), "group.id": settings.group("runner")})
    try:
        deadline = time.monotonic() + 60
        while '"event": "assigned"' not in (log.read_text() if log.exists() else ""):
            if time.monotonic() > deadline or runner.poll() is not None:
                raise BenchError(f"the runner did not start: {log.read_text()[-2000:]}")
            time.sleep(0.02)
        started, deadline = time.perf_counter(), time.monotonic() + 600
        while True:
            committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            if all(tp.offset >= ends[tp.partition] for tp in committed):
                return time.perf_counter() - started
            if time.monotonic() > deadline:
                raise BenchError(f"the runner did not append the backlog: {log.read_text()[-2000:]}")
            time.sleep(0.05)
    finally:
        consumer.close()
        stop_group(runner.pid)


def direct_scripted(settings: Settings) -> Settings:
    """Settings whose scripted model runs without litellm (the runner never calls it here)."""
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"scripted_backend": "direct"})})


def run(ctx: BenchContext) -> Figures:
    """Median events/s and latencies over `ctx.repeats` runs against one API process."""
    settings = ctx.fresh("ingest")
    settings = settings.model_copy(
        update={
            "store_url": f"sqlite:///{(settings.data_dir / 'store.db').resolve()}",
            # one API process sized for its clients: every stream may wait on the broker at once
            "api": settings.api.model_copy(
                update={"keys": {API_KEY: "bench"}, "publish_concurrency": 2 * STREAMS}
            ),
        }
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    port, log = free_port(), settings.data_dir / "serve.log"
    server = spawn([sys.executable, "-m", "convdb", "serve", "--port", str(port)], log, settings.to_env())
    runs: dict[str, list[float]] = {k: [] for k in FIGURES}
    try:
        wait_for_port(server, port, 60, "convdb serve", log)
        retried: list[str] = []
        asyncio.run(_post_all(port, _bodies(2), retried))  # warm-up: connections, producer, code paths
        batches = ctx.pick(60, 300)
        for _ in range(ctx.repeats):
            seconds, latencies = asyncio.run(_post_all(port, _bodies(batches), retried))
            requests = len(latencies)
            runs["ingest_events_per_s"].append(requests * BATCH / seconds)
            runs["ingest_batches_per_s"].append(requests / seconds)
            runs["ingest_p50_ms"].append(statistics.median(latencies) * 1000)
            runs["ingest_p99_ms"].append(statistics.quantiles(latencies, n=100)[98] * 1000)
        stop_group(server.pid)
        posted = (2 + batches * ctx.repeats) * STREAMS * BATCH
        runs["ingest_appended_per_s"].append(posted / _append_backlog(settings))
    finally:
        stop_group(server.pid)
        drop_namespace(settings)
    ctx.notes.append(
        f"ingest: {STREAMS} conversations posting batches of {BATCH} at once (keep-alive HTTP/1.1, one "
        f"client process) on the same 2 cores as the API process and the broker; "
        f"CONVDB_API__PUBLISH_CONCURRENCY={2 * STREAMS}; "
        + (f"{len(retried)} answer(s) were 503 and retried, e.g. {retried[0]}" if retried else "no 503")
    )
    return {key: median(values) for key, values in runs.items()}
