"""The runner enforces ownership from the log: a conversation's first record fixes its tenant.

A foreign producer (or an API that lost a race) puts another tenant's message and resolution into
a conversation's inbox: the runner dead-letters both with the reason, says so on its status
lines, appends nothing of them, and keeps serving the owner.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE
from convdb.infra.procs import free_port
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import MessageEvent
from convdb.schemas.topics import DLQ
from tests.conftest import wait_until
from tests.fleet._support import RunnerProc, fleet_settings
from tests.producers._support import events, final_status, send

pytestmark = [pytest.mark.kafka]


def dead_letters(settings: Settings, conversation: str) -> list[dict[str, str]]:
    found = read_topic(settings, DLQ.name(settings.namespace))
    return [
        {k: (v or b"").decode() for k, v in m.headers() or []}
        for m in found
        if m.key() == conversation.encode()
    ]


def test_another_tenants_inbox_records_are_refused_and_the_owner_is_served(
    settings: Settings, tmp_path: Path
) -> None:
    live = fleet_settings(settings, tmp_path / "data")
    cid = f"owned-{uuid.uuid4().hex[:8]}"
    send(live, cid, "first, from the owner", tenant="acme")
    ops = free_port()
    runner = RunnerProc(live, tmp_path / "ws", None, tmp_path / "runner.log", CONVDB_OPS__PORT=str(ops))
    try:
        wait_until(
            lambda: final_status(live, cid) == "finished", 90, "the owner's first run", logs=runner.logs
        )
        send(live, cid, "let me in", tenant="intruder")
        send(live, cid, "retry", command="resolve", tenant="intruder", operation_id=f"{cid}/x")
        wait_until(lambda: len(runner.events("refused")) == 2, 120, "two refusals", logs=runner.logs)
        send(live, cid, "second, from the owner", tenant="acme")
        wait_until(
            lambda: (
                [e.content for e in events(live, cid) if isinstance(e, MessageEvent) and e.role == "user"]
                == ["first, from the owner", "second, from the owner"]
            ),
            90,
            "the owner's second message appended, the intruder's not",
            logs=runner.logs,
        )
        assert {e.tenant_id for e in events(live, cid)} == {"acme"}
        dead = dead_letters(live, cid)
        assert [d[ERROR_CLASS] for d in dead] == ["TenantMismatchError", "TenantMismatchError"]
        assert all("'intruder'" in d[ERROR_MESSAGE] and "another tenant" in d[ERROR_MESSAGE] for d in dead)
        assert all(line["reason"] for line in runner.events("refused"))
        assert runner.proc.poll() is None  # still serving
        metrics = httpx.get(f"http://127.0.0.1:{ops}/metrics", timeout=10).text
        assert 'convdb_runner_refused_records_total{reason="tenant"} 2.0' in metrics
    finally:
        runner.stop()
