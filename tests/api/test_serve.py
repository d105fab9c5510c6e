"""`convdb serve` as a real uvicorn subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from convdb.infra.settings import Settings


def test_serve_answers_with_auth_and_docs(settings: Settings, tmp_path: Path) -> None:
    settings = settings.model_copy(
        update={
            "store_url": f"sqlite:///{tmp_path / 'store.db'}",
            "api": settings.api.model_copy(update={"keys": {"k1": "tenant-1"}}),
        }
    )
    port = free_port()
    log = tmp_path / "serve.log"
    proc = spawn([sys.executable, "-m", "convdb", "serve", "--port", str(port)], log, settings.to_env())
    try:
        wait_for_port(proc, port, 60, "convdb serve", log)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/docs", timeout=10).status_code == 200
        assert httpx.get(f"{base}/conversations", timeout=10).status_code == 401
        listed = httpx.get(f"{base}/conversations", headers={"X-API-Key": "k1"}, timeout=10)
        assert listed.status_code == 200 and listed.json()["conversations"] == []
    finally:
        stop_group(proc.pid)
