"""End to end with receipts: provider → POST /receipts → reconciler → runner resume; the human queue.

Real processes: the tracker (posting signed receipts to the API), `convdb serve`,
`convdb reconcile`, `convdb consume effects`, and runners killed at named crash points.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import EffectConfirmed, EffectProposed, EffectUnknown, ObservationEvent, StateUpdateEvent
from convdb.schemas.topics import EVENTS
from tests.conftest import BrokerInfo, wait_until
from tests.reconciler.conftest import Proc, System, provider_stats, start_system
from tests.reconciler.ledger import CODEC, read_ledger

pytestmark = [pytest.mark.kafka]


@pytest.fixture(scope="module")
def system(broker: BrokerInfo, module_dir: Path, procs: list[Proc]) -> Iterator[System]:
    """The whole pipeline, with the provider sending receipts to the API."""
    yield start_system(broker, module_dir, procs, receipts=True)


def conversation_events(settings: Settings, conversation_id: str) -> list:
    out = []
    for msg in read_topic(settings, EVENTS.name(settings.namespace)):
        if msg.key() == conversation_id.encode():
            out.append(CODEC.decode(msg.value()))
    return out


def finish(proc: Proc, timeout: float = 90.0) -> int:
    assert proc.proc is not None
    try:
        return proc.proc.wait(timeout)
    except Exception:
        print(proc.tail())
        raise


def operation_of(settings: Settings, conversation_id: str, tool: str) -> str:
    ops = [
        r.operation_id
        for r in read_ledger(settings)
        if isinstance(r, EffectProposed) and r.conversation_id == conversation_id and r.tool_name == tool
    ]
    assert len(ops) == 1, ops
    return ops[0]


def ledger_has(settings: Settings, op: str, kind: type, **fields: object) -> bool:
    return any(
        isinstance(r, kind) and r.operation_id == op and all(getattr(r, k) == v for k, v in fields.items())
        for r in read_ledger(settings)
    )


def test_receipt_backfills_after_the_runner_died_after_the_call(system: System) -> None:
    conv = f"conv-{uuid.uuid4().hex[:8]}"
    task = '!create_issue {"title": "disk full", "body": "on db-1"}'
    died = system.runner("run", conv, task, crash_at="after_provider_call", crash_tool="create_issue")
    assert finish(died) == -9, died.tail()
    op = operation_of(system.settings, conv, "create_issue")
    wait_until(
        lambda: ledger_has(system.settings, op, EffectConfirmed, origin="receipt"),
        60,
        "the reconciler's EffectConfirmed from the receipt",
    )
    resumed = system.runner("resume", conv)
    assert finish(resumed) == 0, resumed.tail()
    events = conversation_events(system.settings, conv)
    (observation,) = [e for e in events if isinstance(e, ObservationEvent)]
    assert (
        observation.backfilled
        and observation.provider_receipt
        and observation.provider_receipt.startswith("trk-")
    )
    assert [e.execution_status for e in events if isinstance(e, StateUpdateEvent)][-1] == "finished"
    assert provider_stats(system.provider_url)["by_key"][op] == 1  # type: ignore[index]

    def status() -> dict | None:
        found = system.api_get(f"/conversations/{conv}/status")
        body = found.json() if found.status_code == 200 else None
        return body if body and body["effects_all_confirmed"] and body["run_loop_stopped"] else None

    shown = wait_until(status, 60, "the API to show the conversation settled")
    assert shown["agent_says_done"] is True and shown["execution_status"] == "finished"  # type: ignore[index]


def test_irreversible_unknown_goes_to_the_human_queue(system: System) -> None:
    conv = f"conv-{uuid.uuid4().hex[:8]}"
    task = '!notify {"to": "oncall", "text": "db-1 restarted"}'
    died = system.runner("run", conv, task, crash_at="after_provider_call", crash_tool="notify")
    assert finish(died) == -9, died.tail()
    op = operation_of(system.settings, conv, "notify")
    wait_until(
        lambda: ledger_has(system.settings, op, EffectUnknown, origin="reconciler"), 60, "EffectUnknown"
    )

    def queued() -> list:
        body = system.api_get("/operations", status="unknown").json()
        return [o for o in body["operations"] if o["operation_id"] == op]

    (item,) = wait_until(queued, 60, "the operation in the human queue")  # type: ignore[misc]
    assert item["intent"]["tool"] == "notify"
    assert item["intent"]["arguments"] == {"text": "db-1 restarted", "to": "oncall"}
    assert item["target"] == "notify:oncall" and "no lookup" in item["evidence"]["reason"]

    serving = system.runner("serve", conv)
    resolved = httpx.post(
        f"{system.api_url}/operations/{op}/resolve",
        json={"decision": "confirmed", "note": "oncall got it"},
        headers={"X-API-Key": "k-acme"},
        timeout=30,
    )
    assert resolved.status_code == 202, resolved.text

    def finished() -> bool:
        events = conversation_events(system.settings, conv)
        statuses = [e.execution_status for e in events if isinstance(e, StateUpdateEvent)]
        return bool(statuses) and statuses[-1] == "finished"

    try:
        wait_until(finished, 90, "the runner to continue after the decision")
    finally:
        serving.stop()
    events = conversation_events(system.settings, conv)
    (observation,) = [e for e in events if isinstance(e, ObservationEvent)]
    assert observation.backfilled and not observation.is_error
    assert provider_stats(system.provider_url)["by_key"][op] == 1  # type: ignore[index]
    wait_until(
        lambda: system.api_get(f"/operations/{op}").json()["status"] == "confirmed",
        60,
        "the decision applied",
    )
    again = httpx.post(
        f"{system.api_url}/operations/{op}/resolve",
        json={"decision": "retry"},
        headers={"X-API-Key": "k-acme"},
    )
    assert again.status_code == 409
