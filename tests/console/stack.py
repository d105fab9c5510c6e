"""A running convdb stack for the browser tests: provider, read side, API + console, fleet runners.

Every part is a real child process (`convdb consume all`, `convdb serve`, `convdb runner`,
the issue-tracker provider) on the test's broker; conversations enter through the inbox as
the demo's do.
"""

from __future__ import annotations

import sys
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from subprocess import Popen
from typing import Any

import httpx

from convdb.infra.dev.tracker.process import ProviderProcess
from convdb.infra.procs import free_port, spawn, stop_group, tail, wait_for_port
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import InboxMessage, make_codec
from convdb.schemas.topics import INBOX
from tests.conftest import wait_until

KEYS = {"demo-key": "demo", "other-key": "other"}


class Stack:
    """The processes of one stack; `close` stops every one of them."""

    def __init__(self, settings: Settings, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.settings = settings.model_copy(
            update={
                "store_url": f"sqlite:///{root / 'store.db'}",
                "data_dir": root / "data",
                "api": settings.api.model_copy(update={"keys": KEYS, "port": self.port}),
            }
        )
        self._stack = ExitStack()
        self.runners: list[Popen[bytes]] = []
        self.provider: ProviderProcess | None = None
        self.publisher = EventPublisher(self.settings, make_codec(None))

    @property
    def url(self) -> str:
        """Base URL of the API and console."""
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name: str, argv: list[str], **env: str) -> Popen[bytes]:
        log = self.root / f"{name}.log"
        proc = spawn([sys.executable, "-m", "convdb", *argv], log, {**self.settings.to_env(), **env})
        self._stack.callback(_stop, proc)
        return proc

    def start(self) -> Stack:
        """Provider, read side and API; runners are started by the test."""
        self.provider = self._stack.enter_context(ProviderProcess(self.root / "provider.log"))
        self._spawn("read-side", ["consume", "all"])
        serve = self._spawn("serve", ["serve", "--port", str(self.port)])
        wait_for_port(serve, self.port, 60, "convdb serve", self.root / "serve.log")
        return self

    def start_runner(self, name: str, **env: str) -> Popen[bytes]:
        """A `convdb runner` (fleet member) calling the provider; `env` may arm a crash point."""
        assert self.provider is not None, "start() first"
        workspace = self.root / "workspace"
        workspace.mkdir(exist_ok=True)
        argv = ["runner", "--workspace", str(workspace), "--tracker-url", self.provider.url]
        proc = self._spawn(name, argv, **env)
        self.runners.append(proc)
        return proc

    def send(self, conversation_id: str, tenant: str, content: str, agent: str | None = None) -> None:
        """A user message into the inbox (as the demo and the API do), for `agent` (None: the default)."""
        message = InboxMessage(
            id=str(uuid.uuid4()),
            conversation_id=conversation_id,
            tenant_id=tenant,
            timestamp=datetime.now(UTC),
            command="message",
            content=content,
            agent=agent,
        )
        self.publisher.publish(message, INBOX)
        self.publisher.flush()

    def api(self, path: str, key: str = "demo-key", **params: Any) -> Any:
        """GET a JSON API path with a tenant's key."""
        answer = httpx.get(self.url + path, headers={"X-API-Key": key}, params=params, timeout=10)
        answer.raise_for_status()
        return answer.json()

    def wait_status(
        self, conversation_id: str, status: str, key: str = "demo-key", timeout: float = 90
    ) -> dict[str, Any]:
        """Wait until the API shows the conversation in `status`; fail with the logs otherwise."""

        def reached() -> dict[str, Any] | None:
            try:
                found = self.api(f"/conversations/{conversation_id}", key)
            except httpx.HTTPStatusError:
                return None
            return found if found["execution_status"] == status else None

        return wait_until(reached, timeout, f"{conversation_id} to be {status}", logs=self.logs())  # type: ignore[return-value]

    def logs(self) -> list[Path]:
        """Every process log (for a failed wait's report)."""
        return sorted(self.root.glob("*.log"))

    def tails(self) -> str:
        """The end of every process log (for failure messages)."""
        return "\n".join(f"--- {p.name}\n{tail(p, 15)}" for p in self.logs())

    def close(self) -> None:
        """Stop every process."""
        self._stack.close()


def _stop(proc: Popen[bytes]) -> None:
    if proc.poll() is None:
        stop_group(proc.pid, timeout=10)
    proc.wait(10)
