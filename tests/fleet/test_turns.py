"""Partitions take turns: a runner with a backlog on two partitions serves them run by run,
not one partition's whole backlog before the other's first record (what a takeover after a
session timeout finds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from convdb.infra.settings import Settings
from convdb.producers.fleet.runner import FleetRunner, serve_until
from convdb.producers.fleet.service import build_context
from convdb.schemas import LLMUsageEvent
from tests.fleet._support import fleet_settings
from tests.fleet.test_lazy_restore import ids_in
from tests.producers._support import events, send

# The logic is the runner's, not the broker's: the default run uses one broker.
pytestmark = [pytest.mark.kafka, pytest.mark.brokers, pytest.mark.slow_on("apache")]

BACKLOG = 3


def test_a_backlog_on_two_partitions_is_served_in_turns(settings: Settings, tmp_path: Path) -> None:
    fleet = fleet_settings(settings, tmp_path / "runner")
    first, second = ids_in(0, settings.partitions, 1)[0], ids_in(1, settings.partitions, 1)[0]
    for i in range(BACKLOG):
        for cid in (first, second):
            send(fleet, cid, f"message {i}")
    ctx = build_context(fleet, tmp_path / "ws", None, None)

    def answered(runner: FleetRunner) -> bool:
        convs = runner.conversations()
        return runner.idle and all(
            cid in convs
            and convs[cid].status == "finished"
            and len(steps(convs[cid].state.view.log)) == BACKLOG
            for cid in (first, second)
        )

    serve_until(ctx, answered, 90)
    ctx.store.close()
    at = {
        cid: [e.timestamp for e in events(fleet, cid) if isinstance(e, LLMUsageEvent)]
        for cid in (first, second)
    }
    assert [len(v) for v in at.values()] == [BACKLOG, BACKLOG]  # each message answered once
    # Whichever partition came first, the other's first answer precedes its last one.
    one, other = sorted(at.values(), key=lambda ts: ts[0])
    assert other[0] < one[-1], at


def steps(log: object) -> list[object]:
    """The LLM calls of a conversation's log (one per scripted step)."""
    return [e for e in log if isinstance(e, LLMUsageEvent)]  # type: ignore[attr-defined]
