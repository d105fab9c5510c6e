"""Randomized chaos: conversations with keyed side effects while runners and the reconciler are killed.

Runners (fleet runner processes, `python -m convdb runner`, one at a time) are armed with
a random crash point and SIGKILL themselves there; the reconciler is SIGKILLed at random
moments and restarted. At the end: provider mutations == confirmed operations, zero
duplicate mutations, zero operations executing past their deadline, and every reader folds
the ledger without an illegal transition. The bounded run is in the default set;
`--chaos-long` runs 200 conversations. The seed is printed at the start and named in every
failure; `--chaos-seed N` replays the same choices.
"""

from __future__ import annotations

import json
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from convdb.infra.reader import read_topic
from convdb.producers.crashpoints import EFFECT_POINTS
from convdb.projections.effects import OperationState, OperationStatus
from convdb.schemas import EffectProposed, InboxMessage, LedgerRecord, StateUpdateEvent
from convdb.schemas.topics import EVENTS, INBOX
from tests.conftest import BrokerInfo, wait_until
from tests.helpers import now
from tests.reconciler.conftest import Proc, System, provider_stats, start_system
from tests.reconciler.ledger import CODEC, fold_ledger, publish, read_ledger, reconciler_records

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.kafka, pytest.mark.chaos, pytest.mark.brokers]

TOOL_POINTS = EFFECT_POINTS


@pytest.fixture(scope="module")
def system(broker: BrokerInfo, module_dir: Path, procs: list[Proc]) -> Iterator[System]:
    """The whole pipeline, with the provider sending receipts to the API."""
    yield start_system(broker, module_dir, procs, receipts=True)


def task(rng: random.Random, n: int) -> str:
    """1-3 create_issue steps, sometimes two in parallel (one LLM response, two operations)."""
    lines = []
    for step in range(rng.randint(1, 3)):
        lines.append(f'!create_issue {{"title": "issue {n}.{step}", "body": "chaos"}}')
        if rng.random() < 0.25:
            lines.append(f'+create_issue {{"title": "issue {n}.{step}b", "body": "parallel"}}')
    return "\n".join(lines)


def statuses(system: System) -> dict[str, str]:
    """Last execution status of every conversation."""
    last: dict[str, str] = {}
    for msg in read_topic(system.settings, EVENTS.name(system.settings.namespace)):
        event = CODEC.decode(msg.value())
        if isinstance(event, StateUpdateEvent):
            last[event.conversation_id] = event.execution_status
    return last


def arm(system: System, rng: random.Random, crashes_left: int, n: int) -> Proc:
    """A runner that will kill itself at a random crash point (or not, once the budget is spent)."""
    if crashes_left > 0:
        point = rng.choice(TOOL_POINTS)
        return system.runner("serve", f"runner-{n}", crash_at=point, crash_tool="create_issue")
    return system.runner("serve", f"runner-{n}")


def act_as_human(system: System, convs: set[str], decided: set[str]) -> int:
    """Approve a retry of every unknown operation in the queue (safe: create_issue is keyed).

    A runner that crashed at the same point on every attempt gives up after a few and asks a
    human; this is that human, through the API's queue. Returns decisions made.
    """
    body = system.api_get("/operations", status="unknown", limit=500).json()
    made = 0
    for item in body["operations"]:
        key = f"{item['operation_id']}@{item['attempt']}"
        if item["conversation_id"] not in convs or key in decided:
            continue
        answer = httpx.post(
            f"{system.api_url}/operations/{item['operation_id']}/resolve",
            json={"decision": "retry", "note": "chaos: keyed, a retry cannot duplicate it"},
            headers={"X-API-Key": "k-acme"},
            timeout=30,
        )
        if answer.status_code == 202:
            decided.add(key)
            made += 1
    return made


@pytest.mark.timeout(1500)
def test_chaos(system: System, request: pytest.FixtureRequest) -> None:
    long = bool(request.config.getoption("--chaos-long"))
    n, reconciler_kills, budget_s = (200, 8, 1200.0) if long else (20, 3, 240.0)
    chosen = request.config.getoption("--chaos-seed")
    seed = random.randrange(1 << 30) if chosen is None else int(chosen)
    print(f"\nCHAOS seed {seed} (replay with --chaos-seed {seed})", flush=True)
    chaos = Chaos(system, random.Random(seed), [f"chaos-{i}-{uuid.uuid4().hex[:6]}" for i in range(n)])
    chaos.start()
    try:
        finished = chaos.drive(budget_s, reconciler_kills)
    finally:
        chaos.runner.stop()
    elapsed = time.monotonic() - chaos.started
    replay = f"seed {seed} (replay with --chaos-seed {seed})"
    assert finished == n, f"{replay}: {n - finished} not finished after {elapsed:.0f}s"
    try:
        figures = settle_and_check(system, chaos.convs)
    except AssertionError as exc:
        raise AssertionError(f"{replay}: {exc}") from exc
    figures.update(
        seed=seed,
        conversations=n,
        runner_crashes=chaos.runner_crashes,
        reconciler_kills=chaos.kills,
        human_decisions=chaos.human,
        seconds=round(elapsed, 1),
    )
    print("CHAOS", json.dumps(figures, sort_keys=True))
    (system.dir / "chaos.json").write_text(json.dumps(figures, sort_keys=True))


class Chaos:
    """Drives conversations through crashing runners and a crashing reconciler."""

    def __init__(self, system: System, rng: random.Random, convs: list[str]) -> None:
        self.system, self.rng, self.convs, self.wanted = system, rng, convs, set(convs)
        self.crashes_left, self.runner_crashes, self.kills, self.human = len(convs) // 3 + 2, 0, 0, 0
        self.decided: set[str] = set()
        self.restart_at: float | None = None
        self.started = time.monotonic()

    def start(self) -> None:
        """Send every task to the inbox and start the first runner."""
        inbox = [
            InboxMessage(
                id=str(uuid.uuid4()),
                conversation_id=c,
                tenant_id="acme",
                timestamp=now(),
                command="message",
                content=task(self.rng, i),
            )  # fmt: skip
            for i, c in enumerate(self.convs)
        ]
        publish(self.system.settings, [(INBOX, m) for m in inbox])
        self.started = time.monotonic()
        self.runner = arm(self.system, self.rng, self.crashes_left, 0)

    def drive(self, budget_s: float, reconciler_kills: int) -> int:
        """Restart what dies, kill the reconciler now and then, answer the human queue; returns finished."""
        finished = 0
        while time.monotonic() - self.started < budget_s:
            last = {c: s for c, s in statuses(self.system).items() if c in self.wanted}
            finished = sum(1 for s in last.values() if s == "finished")
            if finished == len(self.convs):
                break
            self._restart_runner()
            if "waiting_for_human" in last.values():
                self.human += act_as_human(self.system, self.wanted, self.decided)
            if self.kills < reconciler_kills and self.rng.random() < 0.15:
                self.kills += 1
                self.system.reconciler.kill()
                self.system.reconciler.start()
            time.sleep(0.5)  # poll interval, not synchronization: the loop re-checks the log
        return finished

    def _restart_runner(self) -> None:
        if not self.runner.alive and self.restart_at is None:
            self.runner_crashes += 1
            self.crashes_left -= 1
            # Half the time the runner stays down past the deadline: the reconciler decides first.
            self.restart_at = time.monotonic() + self.rng.choice((0.0, self.rng.uniform(3.0, 6.0)))
        if self.restart_at is not None and time.monotonic() >= self.restart_at:
            self.runner = arm(self.system, self.rng, self.crashes_left, self.runner_crashes)
            self.restart_at = None


def settle_and_check(system: System, convs: list[str]) -> dict[str, object]:
    """Wait until no operation is executing, then check the invariants; returns the figures."""
    wanted = set(convs)
    executing: list[str] = []

    def settled() -> tuple[list[LedgerRecord], dict[str, OperationState]] | None:
        ledger = read_ledger(system.settings)
        states = {op: s for op, s in fold_ledger(ledger).items() if s.conversation_id in wanted}
        executing[:] = [op for op, s in states.items() if s.status is OperationStatus.EXECUTING]
        return None if executing else (ledger, states)

    try:
        ledger, states = wait_until(settled, 120, "no operation executing", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"operations stuck executing past their deadline: {executing[:5]}") from exc
    by_key = {k: v for k, v in provider_stats(system.provider_url)["by_key"].items() if k in states}  # type: ignore[union-attr]
    confirmed = {op for op, s in states.items() if s.status is OperationStatus.CONFIRMED}
    assert all(count == 1 for count in by_key.values()), [k for k, v in by_key.items() if v > 1]
    assert set(by_key) == confirmed, set(by_key) ^ confirmed
    proposed = {
        r.operation_id for r in ledger if isinstance(r, EffectProposed) and r.conversation_id in wanted
    }
    assert proposed == set(states)
    emitted = reconciler_records(ledger)
    repeated = sum(len(v) - len({r.id for r in v}) for op, v in emitted.items() if op in states)
    for op in states:
        kinds = Counter(r.kind for r in {r.id: r for r in emitted.get(op, [])}.values())
        assert kinds["effect_confirmed"] <= 1, (op, kinds)
    origins = Counter(
        getattr(r, "origin", "?")
        for r in {r.id: r for r in ledger if r.kind == "effect_confirmed"}.values()
        if r.operation_id in states
    )
    return {
        "operations": len(states),
        "provider_mutations": sum(by_key.values()),
        "confirmed": len(confirmed),
        "duplicate_mutations": sum(v - 1 for v in by_key.values()),
        "stuck_executing": len(executing),
        "confirmations_by_origin": dict(origins),
        "reconciler_transitions": sum(len({r.id for r in v}) for op, v in emitted.items() if op in states),
        "reconciler_redeliveries": repeated,
    }
