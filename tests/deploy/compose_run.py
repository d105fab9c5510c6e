"""compose.yaml run without Docker: each convdb service a local process with the compose environment.

The project comes from `deploycheck compose --print` (docker compose's own loader, the test's
`.env` interpolated). The image's part comes from the Dockerfile (ENV, ENTRYPOINT). Addresses
of the infrastructure (kafka:9092, postgres:5432, minio:9000, ...) are rewritten to the local
servers; nothing else about a service is changed, so a compose file the code disagrees with
fails here.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

import httpx

from convdb.infra.procs import free_port, spawn, stop_group, tail, wait_for_port
from tests.conftest import wait_until

CONVDB_IMAGE = "convdb:"


def dockerfile_image(path: Path) -> tuple[dict[str, str], list[str]]:
    """The runtime stage's ENV and ENTRYPOINT (the last stage of the Dockerfile)."""
    lines = path.read_text().replace("\\\n", " ").splitlines()
    stages = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    for line in lines[stages[-1] :]:
        if line.startswith("ENV "):
            env.update(part.split("=", 1) for part in shlex.split(line[4:]))  # type: ignore[misc]
        elif line.startswith("ENTRYPOINT "):
            entrypoint = json.loads(line[len("ENTRYPOINT ") :])
    return env, entrypoint


@dataclass
class Process:
    """One replica of a compose service as a local process."""

    service: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ops_port: int | None
    listen: int | None = None
    proc: Popen[bytes] | None = None

    def start(self) -> Process:
        """Start it."""
        self.proc = spawn(self.argv, self.log, self.env)
        return self

    def healthz(self) -> int:
        """HTTP status of its ops /healthz (0 when it does not answer)."""
        try:
            return httpx.get(f"http://127.0.0.1:{self.ops_port}/healthz", timeout=2.0).status_code
        except httpx.HTTPError:
            return 0

    def metrics(self) -> str:
        """Its /metrics text."""
        return httpx.get(f"http://127.0.0.1:{self.ops_port}/metrics", timeout=5.0).text


@dataclass
class Deployment:
    """The convdb services of a compose project, started as processes in dependency order."""

    project: dict[str, Any]
    rewrites: dict[str, str]
    """Text replaced in every argument and environment value: `kafka:9092` -> the local broker, ..."""
    root: Path
    dockerfile: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)

    def services(self) -> dict[str, dict[str, Any]]:
        """The services that run the convdb image."""
        return {
            n: s
            for n, s in self.project["services"].items()
            if str(s.get("image", "")).startswith(CONVDB_IMAGE)
        }

    def plan(self) -> list[Process]:
        """Every replica of every convdb service, with its argv, environment and ports."""
        image_env, entrypoint = dockerfile_image(self.dockerfile)
        planned = []
        for name, service in self.services().items():
            replicas = int((service.get("deploy") or {}).get("replicas") or 1)
            for i in range(replicas):
                argv = self._argv(name, service.get("entrypoint") or entrypoint, service.get("command") or [])
                env = {
                    k: self._rewrite(v)
                    for k, v in {**image_env, **(service.get("environment") or {})}.items()
                }
                ops = free_port()
                env.update(
                    {
                        "CONVDB_DATA_DIR": str(self.root / f"{name}-{i}"),
                        "CONVDB_OPS__PORT": str(ops),
                        "CONVDB_OPS__HOST": "127.0.0.1",
                        **self.extra_env,
                    }
                )
                log = self.root / f"{name}-{i}.log"
                planned.append(Process(name, argv, env, log, ops, self._own_port(name)))
        return planned

    def up(self, timeout: float = 180.0) -> None:
        """Run `init` to completion, then start the rest and wait until every one is healthy."""
        self.processes = self.plan()
        for init in [p for p in self.processes if p.service == "init"]:
            done = subprocess.run(init.argv, env=init.env, capture_output=True, text=True, timeout=timeout)
            init.log.write_text(done.stdout + done.stderr)
            assert done.returncode == 0, f"init failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        for p in self.processes:
            if p.service != "init":
                p.start()
        for p in self.processes:
            if p.proc is None:
                continue
            if p.listen is not None:
                wait_for_port(p.proc, p.listen, timeout, p.service, p.log)
            if p.service != "tracker":
                wait_until(lambda p=p: self._healthy(p), timeout, f"{p.service} /healthz = 200")

    def down(self) -> None:
        """SIGTERM every process (then SIGKILL if it lingers)."""
        for p in reversed(self.processes):
            if p.proc is not None:
                stop_group(p.proc.pid, timeout=20.0)

    def of(self, service: str) -> list[Process]:
        """The replicas of one service."""
        return [p for p in self.processes if p.service == service]

    def _healthy(self, p: Process) -> bool:
        assert p.proc is not None
        if p.proc.poll() is not None:
            raise AssertionError(f"{p.service} exited {p.proc.returncode}:\n{tail(p.log, 40)}")
        return p.healthz() == 200

    def _argv(self, name: str, entrypoint: list[str], command: list[str]) -> list[str]:
        if entrypoint == ["convdb"]:
            head = [sys.executable, "-m", "convdb"]
        elif entrypoint[:1] == ["python"]:
            head = [sys.executable, *entrypoint[1:]]
        else:
            raise AssertionError(f"{name}: cannot run entrypoint {entrypoint} locally")
        args = [self._rewrite(a) for a in command]
        port = self._own_port(name)
        for i, arg in enumerate(args[:-1]):
            if arg == "--host":
                args[i + 1] = "127.0.0.1"  # a container binds 0.0.0.0; a test process stays on loopback
            if arg == "--port" and port is not None:
                args[i + 1] = str(port)
        return head + args

    def _own_port(self, name: str) -> int | None:
        for source, target in self.rewrites.items():
            if source.startswith(f"{name}:") and target.startswith("127.0.0.1:"):
                return int(target.split(":")[1].split("/")[0])
        return None

    def _rewrite(self, text: str) -> str:
        for source, target in self.rewrites.items():
            text = text.replace(source, target)
        return text
