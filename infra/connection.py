"""Where convdb's broker and archive are: the environment, else the running dev stack.

`convdb dev up` records how to reach the stack it started in `<data_dir>/dev.json` (the
`DevStack` record); `load_settings()` reads it when `CONVDB_BOOTSTRAP_SERVERS` is unset, so a
command, a service or a user's own program finds the dev stack without configuration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from convdb.infra.procs import pid_alive
from convdb.infra.settings import S3Settings, Settings

EMBEDDED_S3_KEY = "convdb"
"""Access key (and secret) of the dev stack's local S3."""
DEFAULT_BUCKET = "convdb-archive"
"""The dev stack's archive bucket."""


@dataclass(frozen=True)
class DevStack:
    """How to reach a running dev stack."""

    bootstrap_servers: str
    broker_pid: int
    s3_endpoint: str | None = None
    s3_pid: int | None = None
    bucket: str = DEFAULT_BUCKET
    persistent: bool = False
    broker_kind: str = "embedded"

    @property
    def alive(self) -> bool:
        """True when the broker (and S3, if any) still run."""
        return pid_alive(self.broker_pid) and (self.s3_pid is None or pid_alive(self.s3_pid))

    def apply(self, settings: Settings) -> Settings:
        """Settings pointed at this stack (broker, and S3 archive unless one is configured)."""
        settings = settings.with_broker(self.bootstrap_servers, embedded=self.broker_kind == "embedded")
        if self.s3_endpoint and not settings.archive_url:
            s3 = S3Settings(
                endpoint_url=self.s3_endpoint,
                access_key_id=EMBEDDED_S3_KEY,
                secret_access_key=EMBEDDED_S3_KEY,
            )
            settings = settings.model_copy(update={"s3": s3, "archive_url": f"s3://{self.bucket}/archive"})
        return settings


def stack_file(settings: Settings) -> Path:
    """Where `convdb dev up` records the stack."""
    return settings.data_dir / "dev.json"


def read_stack(settings: Settings) -> DevStack | None:
    """The recorded dev stack, or None when none was started."""
    path = stack_file(settings)
    if not path.exists():
        return None
    return DevStack(**json.loads(path.read_text()))


def resolve(settings: Settings) -> Settings:
    """Point settings at the running dev stack when no broker is configured."""
    if settings.bootstrap_servers:
        return settings
    stack = read_stack(settings)
    if stack is None or not stack.alive:
        return settings
    # The dev stack is development by definition, whichever broker it runs.
    dev = settings.dev if settings.dev is not None else True
    return stack.apply(settings).model_copy(update={"dev": dev})


def load_settings() -> Settings:
    """Settings from the environment (`CONVDB_*`), pointed at the dev stack when no broker is set."""
    return resolve(Settings())


def broker_source(settings: Settings) -> str:
    """Where the broker address of `settings` came from, in words a user can act on: the
    environment variable, the dev stack file, or neither (a broker this command started)."""
    address = settings.bootstrap_servers
    if address and Settings().bootstrap_servers == address:
        return "CONVDB_BOOTSTRAP_SERVERS"
    stack = read_stack(settings)
    if stack is not None and stack.bootstrap_servers == address:
        return f"the dev stack file {stack_file(settings)}"
    return "the broker this command started"
