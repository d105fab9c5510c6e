"""The demo's read side: consumer services as real processes, then everything read back.

The projections are read through the query API (the app the `serve` command runs, driven
in-process), and the archive is proven by exporting one conversation from it and from Kafka.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from convdb.infra.errors import InfraError
from convdb.infra.procs import spawn, stop_group, tail
from convdb.infra.settings import Settings
from convdb.schemas.errors import ConvdbError

CONSUMERS = ("all",)
"""The read side the demo runs in one `convdb consume` process (views, index, titles, stats, effects)."""

DEMO_KEY = "demo-key"


def demo_settings(settings: Settings, run_dir: Path, tenant: str) -> Settings:
    """Settings for one demo run: its own store (unless configured), an API key, quick archive objects."""
    api = settings.api.model_copy(update={"keys": {**settings.api.keys, DEMO_KEY: tenant}})
    archive = settings.archive.model_copy(update={"max_age_s": 0.5})
    store_url = settings.store_url or f"sqlite:///{run_dir / 'store.db'}"
    return settings.model_copy(update={"api": api, "archive": archive, "store_url": store_url})


def runner_env(settings: Settings, run_dir: Path) -> dict[str, str]:
    """Environment of a demo's runner process: its snapshot store in the run's directory. The
    embedded broker does not outlive the command, so a store kept under the data dir would describe
    a broker gone (and a runner restoring from it would wait for records that never come)."""
    return settings.model_copy(update={"data_dir": run_dir}).to_env()


@contextmanager
def services(settings: Settings, log_dir: Path) -> Iterator[None]:
    """`convdb consume <projectors>` and `convdb consume archive` as child processes."""
    commands = [("read-side", ["consume", *CONSUMERS])]
    if settings.archive_url:
        commands.append(("archive", ["consume", "archive"]))
    with ExitStack() as stack:
        for name, argv in commands:
            log = log_dir / f"{name}.log"
            proc = spawn([sys.executable, "-m", "convdb", *argv], log, settings.to_env())
            stack.callback(_stop, proc, log)
        yield


def _stop(proc: Any, log: Path) -> None:
    stop_group(proc.pid, timeout=15.0)
    proc.wait()
    if proc.returncode not in (0, -15):
        raise InfraError(f"consumer service exited {proc.returncode}: {tail(log)}")


def read_through_api(settings: Settings, last_seqs: dict[str, int], timeout: float = 90.0) -> dict[str, Any]:
    """Titles, stats, view lengths and effects per conversation, once the API shows every event."""
    from fastapi.testclient import TestClient

    from convdb.consumers.api.app import create_app

    headers = {"X-API-Key": DEMO_KEY}
    with TestClient(create_app(settings)) as api:
        deadline = time.monotonic() + timeout
        while True:
            found = {c: api.get(f"/conversations/{c}", headers=headers) for c in last_seqs}
            ready = all(
                r.status_code == 200 and r.json()["last_seq"] == last_seqs[c] and r.json()["title"]
                for c, r in found.items()
            )
            if ready or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not ready:
            raise InfraError(f"the read side did not catch up within {timeout}s")
        rows = {c: r.json() for c, r in found.items()}
        # This run's operations, conversation by conversation; the tenant's counts (every demo run
        # the read side has seen, e.g. on a `convdb dev up` broker) are reported apart, and named so.
        mine = [
            op
            for c in rows
            for op in api.get(
                "/operations", headers=headers, params={"conversation_id": c, "limit": 500}
            ).json()["operations"]
        ]
        tenant = api.get("/operations", headers=headers, params={"limit": 1}).json()["counts"]
        statuses = {c: api.get(f"/conversations/{c}/status", headers=headers).json() for c in rows}
    run_counts = Counter(op["status"] for op in mine)
    return {
        "titles": {c: r["title"] for c, r in rows.items()},
        "view_length": {c: r["view_length"] for c, r in rows.items()},
        "stats": {c: _brief_stats(r["stats"]) for c, r in rows.items()},
        "effects_by_status": dict(sorted(run_counts.items())),
        "unknowns": run_counts.get("unknown", 0),
        "tenant_effects_by_status": tenant,
        "conversation_states": statuses,
    }


def _brief_stats(stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("event_count", "llm_calls", "prompt_tokens", "completion_tokens", "cost", "tool_calls", "errors")
    return {k: stats[k] for k in keys if k in stats}


def archive_proof(settings: Settings, conversation_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """Objects in the archive, and whether one conversation exports identically from it and Kafka."""
    from convdb.consumers.archive.export import from_archive, from_kafka, to_jsonl
    from convdb.consumers.archive.reader import ArchiveReader
    from convdb.consumers.archive.target import open_target
    from convdb.schemas import make_codec

    codec = make_codec(settings.schema_registry_url)
    expected = to_jsonl(from_kafka(settings, conversation_id, codec))
    target, prefix = open_target(settings)
    reader = ArchiveReader(target, prefix)
    try:
        deadline = time.monotonic() + timeout
        archived = b""
        while archived != expected and time.monotonic() < deadline:
            try:
                archived = to_jsonl(from_archive(settings, reader, conversation_id, codec))
            except ConvdbError:  # no object holds it yet: the sink closes objects by age
                archived = b""
            if archived != expected:
                time.sleep(0.3)
        objects = sum(1 for key in target.list(prefix) if key.endswith(".avro"))
    finally:
        reader.close()
    return {"archive_objects": objects, "archive_export_equals_kafka": archived == expected}
