"""`convdb consume archive` as an operator runs it: it says what it does, and shows metrics and health."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from convdb.infra.procs import free_port, spawn, stop_group
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import SingleObjectCodec
from tests.conftest import wait_until
from tests.infra.test_cli import events_for

pytestmark = [pytest.mark.kafka, pytest.mark.s3]


def test_consume_archive_says_what_it_does(s3_settings: Settings, tmp_path: Path) -> None:
    EventPublisher(s3_settings, SingleObjectCodec()).publish_durable(events_for("conv-arch", 5))
    settings = s3_settings.model_copy(
        update={"archive": s3_settings.archive.model_copy(update={"max_age_s": 0.5})}
    )
    port = free_port()
    log = tmp_path / "archive.log"
    argv = [sys.executable, "-m", "convdb", "consume", "archive", "--metrics-port", str(port)]
    proc = spawn(argv, log, settings.to_env())
    try:
        wait_until(
            lambda: "archive: stored " in log.read_text(), 60, "a per-object line in the archive's log"
        )
        text = log.read_text()
        assert "archive: copying " in text and f"s3://{settings.archive_url.split('/')[2]}" in text  # type: ignore[union-attr]
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'convdb_archive_objects_total{topic="' in metrics and "convdb_archive_bytes_total" in metrics
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert health.status_code == 200 and health.json()["status"] == "ok"
    finally:
        stop_group(proc.pid)
