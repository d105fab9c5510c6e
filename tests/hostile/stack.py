"""The running system the hostile-input suite attacks: real processes over a real broker, store and S3.

`convdb serve`, `convdb consume all` (views, index, titles, stats, effects), `convdb consume
archive` (S3 on SeaweedFS) and `convdb runner`, each a subprocess with its own log and ops port,
two tenants with an API key each, a registered secret, a receipts provider bound to `write_file`.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from convdb.infra.kafka import apply_topics
from convdb.infra.procs import free_port, spawn, stop_group, tail, wait_for_port
from convdb.infra.reader import read_topic
from convdb.infra.s3 import make_s3_client
from convdb.infra.settings import Settings
from convdb.schemas import SingleObjectCodec
from convdb.schemas.topics import ALL_TOPICS
from tests.conftest import BrokerInfo, S3Endpoint, settings_for

KEYS = {"key-acme": "acme", "key-umbrella": "umbrella"}
ACME = {"X-API-Key": "key-acme"}
UMBRELLA = {"X-API-Key": "key-umbrella"}
RECEIPT_SECRET = "hostile-receipt-secret-0123456789"
REGISTERED = ("CUSTOMER_DB_PASSWORD", "registered-value-Zq81-never-written")
CODEC = SingleObjectCodec()


@dataclass
class Service:
    """One `convdb` subprocess."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str]
    ops_port: int | None = None
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Service:
        """Start it (again)."""
        self.proc = spawn([sys.executable, "-m", "convdb", *self.argv], self.log, self.env)
        return self

    def alive(self) -> bool:
        """Still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            stop_group(self.proc.pid, timeout=15.0)
            self.proc.wait(10)

    def health(self) -> httpx.Response:
        """Its ops endpoint's /healthz."""
        return httpx.get(f"http://127.0.0.1:{self.ops_port}/healthz", timeout=10)


@dataclass
class Stack:
    """The services, their settings, and helpers to talk to them."""

    settings: Settings
    store: str
    api_url: str
    workspace: Path
    services: dict[str, Service] = field(default_factory=dict)

    def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any
    ) -> httpx.Response:
        """One request to the API."""
        return httpx.request(method, f"{self.api_url}{path}", headers=headers, timeout=60, **kw)

    def records(self, suffix: str) -> list[Any]:
        """Every raw message of a topic (to the end the fetch reports)."""
        return list(read_topic(self.settings, self.settings.topic(suffix)))

    def tails(self) -> str:
        """The end of every service's log (for failure messages)."""
        return "\n".join(f"--- {s.name}\n{tail(s.log, 25)}" for s in self.services.values())

    def logs(self) -> list[Path]:
        """Every service's log (for a failed wait's report)."""
        return [service.log for service in self.services.values()]

    def stop(self) -> None:
        """Stop every service."""
        for service in self.services.values():
            service.stop()


def stack_settings(broker: BrokerInfo, s3: S3Endpoint, store_url: str, root: Path) -> Settings:
    """Settings of one stack: its own namespace and bucket, two tenants, a registered secret."""
    bucket = f"hostile-{uuid.uuid4().hex[:10]}"
    make_s3_client(s3.endpoint_url, "us-east-1", s3.access_key_id, s3.secret_access_key).create_bucket(
        Bucket=bucket
    )
    settings = settings_for(
        broker,
        root / "data",
        store_url=store_url,
        archive_url=f"s3://{bucket}/archive",
        s3=s3.section(),
        api={
            "keys": KEYS,
            "receipt_secrets": {"files": RECEIPT_SECRET},
            "receipt_tools": {"files": ["write_file"]},
            "receipt_wait_s": 1.0,
            "publish_timeout_s": 15.0,
        },
        archive={"max_age_s": 1.0},
        llm={"scripted_backend": "direct"},
        secrets={REGISTERED[0]: REGISTERED[1]},
        dev=True,
    )
    apply_topics(settings, ALL_TOPICS)
    return settings


def start_stack(settings: Settings, store: str, root: Path) -> Stack:
    """Start the API, the read side, the archive and a runner; wait until each is up."""
    env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
    api_port = free_port()
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    stack = Stack(settings, store, f"http://127.0.0.1:{api_port}", workspace)
    plan = {
        "api": (["serve", "--port", str(api_port)], None),
        "read-side": (["consume", "all"], free_port()),
        "archive": (["consume", "archive"], free_port()),
        "runner": (["runner", "--workspace", str(workspace)], None),
    }
    for name, (argv, ops_port) in plan.items():
        extra = {"CONVDB_OPS__PORT": str(ops_port)} if ops_port else {}
        stack.services[name] = Service(name, argv, root / f"{name}.log", {**env, **extra}, ops_port).start()
    try:
        wait_for_port(stack.services["api"].proc, api_port, 90, "the API", stack.services["api"].log)
        for name in ("read-side", "archive"):
            service = stack.services[name]
            wait_for_port(service.proc, service.ops_port or 0, 90, name, service.log)
    except Exception:
        stack.stop()
        raise
    return stack
