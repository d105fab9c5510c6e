"""The demo's conversations run by fleet runner processes (`convdb demo --runners N`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from subprocess import Popen

from convdb.infra.capabilities import capabilities
from convdb.infra.cli.demo import parts as demo
from convdb.infra.cli.demo.read import runner_env
from convdb.infra.procs import spawn, stop_group
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.producers.status import STOP_STATUSES
from convdb.schemas import Codec, StateUpdateEvent, make_codec
from convdb.schemas.topics import EVENTS


def run_fleet_demo(
    settings: Settings, count: int, tracker_url: str, runners: int, run_dir: Path
) -> demo.DemoParts:
    """The demo's conversations sent through the inbox and run by `runners` fleet runner processes."""
    started = time.monotonic()
    workspace, ids = demo.send_tasks(settings, count, run_dir)
    codec = make_codec(settings.schema_registry_url)
    argv = [
        sys.executable,
        "-m",
        "convdb",
        "runner",
        "--workspace",
        str(workspace),
        "--tracker-url",
        tracker_url,
    ]
    logs = settings.data_dir.resolve() / "demo-runners"
    env = runner_env(settings, run_dir)
    procs = [(spawn(argv, logs / f"runner-{i}.log", env), logs / f"runner-{i}.log") for i in range(runners)]
    try:
        statuses = _wait_until_stopped(settings, codec, set(ids), started + 180)
    finally:
        _stop_runners(settings, procs)
    parts = demo.DemoParts(settings, ids, statuses)
    parts.events, parts.ledger = demo.read_back(settings, codec, set(ids))  # noqa: SLF001
    parts.seconds = time.monotonic() - started
    return parts


def _stop_runners(settings: Settings, procs: list[tuple[Popen[bytes], Path]]) -> None:
    """Stop the runner processes. On a broker whose group sticks when its last members leave while
    a leave is still rebalancing it (the embedded one, `convdb.infra.capabilities`), one at a time: each
    after the others took over its partitions, so that the runners that come later get assigned."""
    settled = not capabilities(settings).group_survives_members_leaving_together
    for i, (proc, _) in enumerate(procs):
        left = time.time()
        stop_group(proc.pid, timeout=10.0)
        others = [log for _, log in procs[i + 1 :]]
        deadline = time.monotonic() + 15
        while settled and others and time.monotonic() < deadline:
            if all(_assigned_since(log, left) for log in others):
                break
            time.sleep(0.2)


def _assigned_since(log: Path, moment: float) -> bool:
    """True when the runner writing `log` reported an assignment at or after `moment` (epoch s)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith('{"event": "assigned"'):
            return float(json.loads(line)["at"]) >= moment
    return False


def _wait_until_stopped(settings: Settings, codec: Codec, ids: set[str], deadline: float) -> dict[str, str]:
    """Each conversation's latest execution status once all reached a stop status (or the deadline)."""
    statuses: dict[str, str] = {}
    while True:
        for msg in read_topic(settings, EVENTS.name(settings.namespace)):
            if (msg.key() or b"").decode() in ids:
                event = codec.decode(msg.value() or b"", expect=EVENTS.value_types)
                if isinstance(event, StateUpdateEvent):
                    statuses[event.conversation_id] = event.execution_status
        if len(statuses) == len(ids) and all(s in STOP_STATUSES for s in statuses.values()):
            return statuses
        if time.monotonic() > deadline:
            return {cid: statuses.get(cid, "idle") for cid in ids}
        time.sleep(0.5)
