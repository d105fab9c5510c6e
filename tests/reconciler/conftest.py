"""Fixtures for the reconciler tests: a real provider process and real `convdb reconcile` workers."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen

import httpx
import pytest

from convdb.consumers.reconciler import CHANGELOG
from convdb.infra.kafka import apply_topics
from convdb.infra.procs import free_port, spawn, stop_group, tail, wait_for_port
from convdb.infra.settings import Settings
from convdb.schemas.topics import ALL_TOPICS
from tests.conftest import BrokerInfo, settings_for, wait_until
from tests.producers._support import runner_cmd, send

RECEIPT_SECRET = "tracker-test-secret"


@dataclass
class Proc:
    """A child process with its log; killed or stopped by the test, always cleaned up."""

    argv: list[str]
    log: Path
    env: dict[str, str]
    proc: Popen[bytes] | None = None
    starts: int = 0
    history: list[int] = field(default_factory=list)

    def start(self) -> Proc:
        """Start (again); the log is appended to."""
        self.proc = spawn(self.argv, self.log, self.env)
        self.starts += 1
        self.history.append(self.proc.pid)
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group (a crash, no cleanup)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc is not None:
            stop_group(self.proc.pid, timeout=15)
            self.proc.wait(5)

    def dump_stacks(self) -> None:
        """Have a `convdb` service print its threads' stacks into its log (SIGUSR1)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)

    @property
    def alive(self) -> bool:
        """True while it runs."""
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        """The end of its log (for failure messages)."""
        return tail(self.log, 30)


def start_provider(log: Path, receipts_url: str | None = None) -> tuple[Proc, str]:
    """The demo tracker as a real process; returns it and its base URL."""
    port = free_port()
    argv = [sys.executable, "-m", "convdb", "dev", "tracker", "--port", str(port)]
    if receipts_url:
        argv += ["--receipts-url", receipts_url, "--receipt-secret", RECEIPT_SECRET]
    proc = Proc(argv, log, {}).start()
    assert proc.proc is not None
    wait_for_port(proc.proc, port, 30, "provider", log)
    return proc, f"http://127.0.0.1:{port}"


def provider_stats(url: str) -> dict[str, object]:
    """The provider's mutation counters."""
    return httpx.get(f"{url}/stats", timeout=5).json()  # type: ignore[no-any-return]


def reconciler_proc(settings: Settings, log: Path) -> Proc:
    """A `convdb reconcile` worker (not started)."""
    env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return Proc([sys.executable, "-m", "convdb", "reconcile", "--log-level", "info"], log, env)


def wait_worker_ready(worker: Proc, timeout: float = 120.0) -> None:
    """Wait until the latest start of a faust worker has joined, recovered its table and runs.

    faust's own assignor encodes assignments in a form the admin API cannot describe, so the
    worker's log line is the readiness signal.
    """

    def ready() -> bool:
        if not worker.alive:
            pytest.fail(f"reconciler exited:\n{worker.tail()}")
        return worker.log.read_text(errors="replace").count("[^Worker]: Ready") >= worker.starts

    wait_until(ready, timeout, "the reconciler worker to be ready", logs=[worker.log])


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temp dir shared by a test module (logs, data dir)."""
    return tmp_path_factory.mktemp("reconciler")


@pytest.fixture(scope="module")
def procs() -> Iterator[list[Proc]]:
    """Every process a module starts; all stopped at the end."""
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.stop()


ProcFactory = Callable[..., Proc]


@dataclass
class System:
    """Every process of the effect pipeline: provider, API, reconciler, effects consumer."""

    settings: Settings
    dir: Path
    provider_url: str
    api_url: str
    provider: Proc
    api: Proc
    reconciler: Proc
    consumer: Proc
    runs: int = 0

    def runner(self, command: str, conversation: str, task: str = "", **crash: str) -> Proc:
        """A fleet runner process (started); `crash_at`/`crash_tool` arm a crash point.

        `run`: `task` goes to the conversation's inbox first. `resume`: the runner takes the
        partition over, resumes what was interrupted and exits once idle. `serve`: until stopped.
        """
        self.runs += 1
        settings = self.settings.model_copy(update=crash)
        if command == "run":
            send(settings, conversation, task, tenant="acme")
        idle = {"run": 60.0, "resume": 2.0, "serve": 0.0}[command]
        argv = runner_cmd(self.dir / "workspace", self.provider_url, idle_exit=idle)
        env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        return Proc(argv, self.dir / f"runner-{self.runs}.log", env).start()

    def api_get(self, path: str, **params: object) -> httpx.Response:
        """GET on the API as tenant acme."""
        return httpx.get(f"{self.api_url}{path}", params=params, headers={"X-API-Key": "k-acme"}, timeout=10)


def system_settings(broker: BrokerInfo, root: Path, provider_url: str, **overrides: object) -> Settings:
    """Settings for a whole pipeline: short deadlines and ticks, a SQLite store, tenant keys."""
    base: dict[str, object] = {
        "store_url": f"sqlite:///{root / 'store.db'}",
        "api": {
            "keys": {"k-acme": "acme"},
            "receipt_secrets": {"tracker": RECEIPT_SECRET},
            "receipt_tools": {"tracker": ["create_issue", "notify"]},
        },
        "reconciler": {
            "tick_interval_s": 0.3,
            "receipt_grace_s": 0.5,
            "resolver_urls": {"tracker": provider_url},
        },
        "runtime": {"reconcile_after_s": 3.0, "tool_timeout_s": 5.0},
        "llm": {"scripted_backend": "direct"},
    }
    base.update(overrides)
    settings = settings_for(broker, root / "data", **base)
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    return settings


def start_system(broker: BrokerInfo, root: Path, procs: list[Proc], *, receipts: bool) -> System:
    """Start the provider (posting receipts to the API or not), the API, the reconciler and the consumer."""
    api_port = free_port()
    api_url = f"http://127.0.0.1:{api_port}"
    provider, provider_url = start_provider(
        root / "provider.log", f"{api_url}/receipts" if receipts else None
    )
    procs.append(provider)
    settings = system_settings(broker, root, provider_url)
    env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    api = Proc([sys.executable, "-m", "convdb", "serve", "--port", str(api_port)], root / "api.log", env)
    procs.append(api.start())
    consumer = Proc([sys.executable, "-m", "convdb", "consume", "effects"], root / "consumer.log", env)
    procs.append(consumer.start())
    worker = reconciler_proc(settings, root / "reconciler.log").start()
    procs.append(worker)
    assert api.proc is not None
    wait_for_port(api.proc, api_port, 60, "API", api.log)
    wait_worker_ready(worker)
    return System(settings, root, provider_url, api_url, provider, api, worker, consumer)
