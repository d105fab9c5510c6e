"""End-to-end latency: an event produced at a fixed offered rate until it is visible in the query API.

Real pieces only: `EventPublisher` (idempotent, acks=all) paced to the rate in this process;
`convdb consume all` (views, index, titles, stats in one exactly-once runner) as a child
process writing a SQLite store; the FastAPI app (`create_app`) over that store, polled in a
thread through `TestClient` (`GET /conversations`: each conversation's last visible seq).

An event's latency is from just before its `publish()` call to the arrival of the first API
response showing it: an upper bound, which includes up to one poll period (noted).

Besides the fixed 1k/s and 5k/s rates, the offered rate that the target is set at is half of what
this `convdb consume all` applies on this machine, measured in the same run (a backlog published
at once, timed from the first publish to the last event visible in the API): a latency target at a
fixed rate would mean something else on a machine three times slower.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchContext, BenchError, Figures, conversation, drop_namespace, median
from convdb.infra.procs import spawn, stop_group, tail
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import EventEnvelope, make_codec

API_KEY = "bench-key"
TENANT = "bench"
CONVERSATIONS = 20
POLL_PERIOD_S = 0.02
"""The API is asked at most this often: a tighter loop would take a core from the consumer (2 cores)."""
VISIBLE_TIMEOUT_S = 120.0
"""How long every published event may take to become visible before the bench fails."""

BACKLOG_S = 2.0
"""The throughput probe's backlog: this many seconds of events at the fixed 5k/s rate, at least."""

FIGURES: dict[str, tuple[str, str, str]] = {
    "e2e_p50_ms": ("produce -> visible in API at 5k events/s: p50", "ms", ""),
    "e2e_p99_ms": ("produce -> visible in API at 5k events/s: p99", "ms", ""),
    "e2e_max_ms": ("produce -> visible in API at 5k events/s: max", "ms", ""),
    "e2e_consume_all_per_s": (
        "`convdb consume all` throughput, same run (backlog: first publish -> last visible in API)",
        "events/s",
        "",
    ),
    "e2e_offered_per_s_half": ("offered rate of the 'half' rows: half the throughput above", "events/s", ""),
}
for _rate, _what in (("1k", "1k events/s"), ("5k", "5k events/s"), ("half", "half its throughput")):
    for _q in ("p50", "p99", "max"):
        FIGURES[f"e2e_{_q}_ms_{_rate}"] = (
            f"produce -> visible in API at {_what}: {_q}",
            "ms",
            "<= 250" if (_rate, _q) == ("half", "p99") else "",
        )
    FIGURES[f"e2e_achieved_per_s_{_rate}"] = (
        f"rate the publisher achieved (offered {_what})",
        "events/s",
        "",
    )


def run(ctx: BenchContext) -> Figures:
    """Median p50/p99/max latency per offered rate over `ctx.repeats` runs (headline: 5k/s)."""
    seconds = float(ctx.pick(3, 10))
    settings = ctx.fresh("e2e")
    settings = settings.model_copy(
        update={
            "store_url": f"sqlite:///{(settings.data_dir / 'store.db').resolve()}",
            "api": settings.api.model_copy(update={"keys": {API_KEY: TENANT}}),
        }
    )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log = settings.data_dir / "consume.log"
    consumer = spawn([sys.executable, "-m", "convdb", "consume", "all"], log, settings.to_env())
    probe: Probe | None = None
    try:
        probe = Probe(settings)
        publisher = EventPublisher(settings, make_codec(settings.schema_registry_url))
        probe.warm_up(publisher, consumer, log)
        throughput = probe.throughput(publisher, int(max(seconds, BACKLOG_S) * 5000), "tput")
        half = max(1, int(throughput / 2))
        per_rate = {
            label: _runs(ctx, probe, publisher, rate, seconds, (consumer, log), label)
            for rate, label in ((1000, "1k"), (5000, "5k"), (half, "half"))
        }
    finally:
        if probe is not None:
            probe.close()
        stop_group(consumer.pid)
        drop_namespace(settings)
    figures = {f"e2e_{key}_ms": per_rate["5k"][f"e2e_{key}_ms_5k"] for key in ("p50", "p99", "max")}
    figures["e2e_consume_all_per_s"] = throughput
    figures["e2e_offered_per_s_half"] = float(half)
    for fragment in per_rate.values():
        figures.update(fragment)
    print(
        f"bench: e2e: consume all applies {throughput:,.0f} events/s; offering {half:,} events/s",
        file=sys.stderr,
    )
    ctx.notes.append(
        f"e2e: {seconds:.0f} s per run, {CONVERSATIONS} conversations of 1 KB agent-shaped events, "
        "`convdb consume all` child process, SQLite store, API polled in-process via TestClient; "
        "latency = publish() call -> first API response showing the event (includes up to one poll period)"
    )
    return figures


def _runs(
    ctx: BenchContext,
    probe: Probe,
    publisher: EventPublisher,
    rate: int,
    seconds: float,
    child: tuple[Any, Path],
    label: str,
) -> Figures:
    """`ctx.repeats` runs at one rate: median figures, and a note with the per-run p99s."""
    results = []
    for i in range(ctx.repeats):
        results.append(probe.measure(publisher, rate, seconds, f"r{label}{i:02d}"))
        _check_alive(*child)
    figures = {f"e2e_{key}_ms_{label}": median([r[key] for r in results]) for key in ("p50", "p99", "max")}
    figures[f"e2e_achieved_per_s_{label}"] = median([r["achieved"] for r in results])
    p99s = ", ".join(f"{r['p99']:.0f}" for r in results)
    poll = median([r["poll_ms"] for r in results])
    ctx.notes.append(
        f"e2e {label} (offered {rate:,}/s): poll period median {poll:.1f} ms; p99 per run {p99s} ms"
    )
    return figures


def _check_alive(consumer: Any, log: Path) -> None:
    if consumer.poll() is not None:
        raise BenchError(f"`convdb consume all` exited with {consumer.returncode}:\n{tail(log)}")


class Probe:
    """Polls the API for every conversation's last visible seq and times events becoming visible."""

    def __init__(self, settings: Settings) -> None:
        from fastapi.testclient import TestClient

        from convdb.consumers.api.app import create_app

        self.client = TestClient(create_app(settings))
        self.client.__enter__()

    def close(self) -> None:
        """Shut the app down."""
        self.client.__exit__(None, None, None)

    def visible(self, prefix: str) -> dict[str, int]:
        """conversation_id -> last visible seq, for the conversations whose id starts with `prefix`."""
        resp = self.client.get(
            "/conversations", params={"after": prefix, "limit": CONVERSATIONS}, headers={"X-API-Key": API_KEY}
        )
        if resp.status_code != 200:
            raise BenchError(f"API answered {resp.status_code}: {resp.text[:300]}")
        return {
            c["conversation_id"]: c["last_seq"]
            for c in resp.json()["conversations"]
            if c["conversation_id"].startswith(prefix)
        }

    def warm_up(self, publisher: EventPublisher, consumer: Any, log: Path, timeout: float = 90.0) -> None:
        """Wait until the consumer has joined its group and an event shows up in the API."""
        event = next(conversation("r-warm-c00", 1, TENANT))
        publisher.wait_durable([publisher.publish(event)])
        deadline = time.monotonic() + timeout
        while not self.visible("r-warm-"):
            _check_alive(consumer, log)
            if time.monotonic() > deadline:
                raise BenchError(
                    f"the warm-up event was not visible in the API after {timeout}s:\n{tail(log)}"
                )
            time.sleep(0.05)

    def throughput(self, publisher: EventPublisher, count: int, run: str) -> float:
        """Events/s the consumer applies: `count` events published at once, from the first publish
        to the API response showing the last."""
        events = _events(run, count)
        tally = Tally(f"{run}-", len(events))
        poller = threading.Thread(target=self._poll, args=(tally,), name="bench-e2e-poller", daemon=True)
        started = time.perf_counter()
        poller.start()
        for event in events:
            tally.sent[(event.conversation_id, event.seq)] = started
            publisher.publish(event)
        publisher.flush()
        poller.join(VISIBLE_TIMEOUT_S + 10)
        tally.done.set()
        if tally.errors:
            raise BenchError(f"e2e poller failed: {tally.errors[0]}") from tally.errors[0]
        if len(tally.seen) < len(events):
            raise BenchError(f"e2e: {len(tally.seen)} of {len(events)} backlog events visible")
        return len(events) / (max(tally.seen.values()) - started)

    def measure(self, publisher: EventPublisher, rate: int, seconds: float, run: str) -> dict[str, float]:
        """One run at `rate` events/s for `seconds`: latency percentiles in ms and the achieved rate."""
        events = _events(run, int(rate * seconds))
        tally = Tally(f"{run}-", len(events))
        poller = threading.Thread(target=self._poll, args=(tally,), name="bench-e2e-poller", daemon=True)
        poller.start()
        started = time.perf_counter()
        for i, event in enumerate(events):
            due = started + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)  # pacing to the offered rate, not synchronisation
            tally.sent[(event.conversation_id, event.seq)] = time.perf_counter()
            publisher.publish(event)
        publisher.flush()
        achieved = len(events) / (time.perf_counter() - started)
        poller.join(VISIBLE_TIMEOUT_S + 10)
        tally.done.set()
        if tally.errors:
            raise BenchError(f"e2e poller failed: {tally.errors[0]}") from tally.errors[0]
        if len(tally.seen) < len(events):
            raise BenchError(
                f"e2e: {len(tally.seen)} of {len(events)} events visible after {VISIBLE_TIMEOUT_S}s"
            )
        latencies = sorted((tally.seen[k] - tally.sent[k]) * 1000 for k in tally.sent)
        return {
            "p50": _quantile(latencies, 0.50),
            "p99": _quantile(latencies, 0.99),
            "max": latencies[-1],
            "achieved": achieved,
            "poll_ms": median([b - a for a, b in zip(tally.polls, tally.polls[1:], strict=False)]) * 1000,
        }

    def _poll(self, tally: Tally) -> None:
        """Ask the API until every event is visible; each newly visible seq gets the response's time."""
        last: dict[str, int] = {}
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        try:
            while len(tally.seen) < tally.expected and not tally.done.is_set():
                if time.monotonic() > deadline:
                    return
                asked = time.perf_counter()
                visible = self.visible(tally.prefix)
                now = time.perf_counter()
                tally.polls.append(now)
                for cid, seq in visible.items():
                    for s in range(last.get(cid, 0) + 1, seq + 1):
                        if (cid, s) in tally.sent:
                            tally.seen[(cid, s)] = now
                    last[cid] = seq
                pause = asked + POLL_PERIOD_S - time.perf_counter()
                if pause > 0:
                    tally.done.wait(pause)
        except Exception as exc:  # noqa: BLE001 - handed to the measuring thread, which raises it
            tally.errors.append(exc)


@dataclass
class Tally:
    """What one run sent and saw: perf_counter times per (conversation_id, seq)."""

    prefix: str
    expected: int
    sent: dict[tuple[str, int], float] = field(default_factory=dict)
    seen: dict[tuple[str, int], float] = field(default_factory=dict)
    polls: list[float] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)


def _events(run: str, count: int) -> list[EventEnvelope]:
    per = max(1, count // CONVERSATIONS)
    streams = [list(conversation(f"{run}-c{c:02d}", per, TENANT)) for c in range(CONVERSATIONS)]
    return [stream[i] for i in range(per) for stream in streams]


def _quantile(ordered: list[float], q: float) -> float:
    if not ordered:
        raise BenchError("no latencies measured")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
