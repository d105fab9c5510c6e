"""`convdb serve` as a real subprocess, for the tests that need the deployed app (uvicorn included)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from convdb.infra.settings import Settings


@contextmanager
def served(settings: Settings, root: Path, name: str = "serve", **api: Any) -> Iterator[str]:
    """Run `convdb serve` with these settings (and `api` overrides); yield its base URL."""
    settings = settings.model_copy(update={"api": settings.api.model_copy(update=api)})
    port = free_port()
    log = root / f"{name}.log"
    argv = [sys.executable, "-m", "convdb", "serve", "--port", str(port)]
    proc = spawn(argv, log, settings.to_env())
    try:
        wait_for_port(proc, port, 60, f"convdb serve ({name})", log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(proc.pid)
        proc.wait(10)
