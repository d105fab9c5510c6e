"""The local dev stack: a broker + local S3, in the background or for one command.

`convdb dev up` starts both detached and records how to reach them in `<data_dir>/dev.json`;
later commands find them there when `CONVDB_BOOTSTRAP_SERVERS` is unset. The broker is the
embedded Tansu (pip-only, the default) or, with `--broker apache`, one Apache Kafka KRaft node
on the machine's Java (data under `<data_dir>/kafka`, started fresh by every `dev up`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from convdb.infra.connection import EMBEDDED_S3_KEY, DevStack, read_stack, stack_file
from convdb.infra.dev.apache import ApacheKafka
from convdb.infra.dev.broker import EmbeddedBroker
from convdb.infra.dev.s3server import EmbeddedS3
from convdb.infra.errors import InfraError
from convdb.infra.kafka import apply_topics
from convdb.infra.procs import stop_group
from convdb.infra.settings import Settings

logger = logging.getLogger(__name__)


def up(
    settings: Settings, *, persistent: bool = False, with_s3: bool = True, broker: str = "embedded"
) -> DevStack:
    """Start a broker ('embedded' or 'apache') and local S3 in the background (no-op if already up)."""
    current = read_stack(settings)
    if current is not None and current.alive:
        return current
    root = settings.data_dir.resolve()
    root.mkdir(parents=True, exist_ok=True)
    s3 = None
    if with_s3 or persistent:
        s3 = EmbeddedS3(root / "s3").start(detached=True)
    try:
        bootstrap, pid = (
            _start_apache(root) if broker == "apache" else _start_embedded(root, s3 if persistent else None)
        )
    except InfraError:
        if s3 is not None:
            s3.stop()
        raise
    stack = DevStack(
        bootstrap_servers=bootstrap,
        broker_pid=pid,
        s3_endpoint=s3.endpoint_url if s3 else None,
        s3_pid=s3.proc.pid if s3 and s3.proc else None,
        persistent=persistent,
        broker_kind=broker,
    )
    stack_file(settings).write_text(json.dumps(asdict(stack), indent=2))
    apply_topics(stack.apply(settings))
    return stack


def _start_embedded(root: Path, s3: EmbeddedS3 | None) -> tuple[str, int]:
    env = {}
    storage = "memory://tansu/"
    if s3 is not None:  # --persistent: Tansu keeps its data on the local S3
        s3_client_bucket(s3, "tansu")
        env = {
            "AWS_ACCESS_KEY_ID": EMBEDDED_S3_KEY,
            "AWS_SECRET_ACCESS_KEY": EMBEDDED_S3_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": s3.endpoint_url,
            "AWS_ALLOW_HTTP": "true",
        }
        storage = "s3://tansu/"
    broker = EmbeddedBroker(root / "broker.log", storage=storage, env=env).start(detached=True)
    assert broker.proc is not None
    return broker.bootstrap_servers, broker.proc.pid


def _start_apache(root: Path) -> tuple[str, int]:
    shutil.rmtree(root / "kafka", ignore_errors=True)
    kafka = ApacheKafka(root / "kafka", size=1).start(detached=True)
    pid = kafka.nodes[0].pid
    assert pid is not None
    return kafka.bootstrap_servers, pid


def s3_client_bucket(s3: EmbeddedS3, bucket: str) -> None:
    """Create a bucket on the embedded S3 if it is missing."""
    from convdb.infra.s3 import make_s3_client

    client = make_s3_client(s3.endpoint_url, "us-east-1", EMBEDDED_S3_KEY, EMBEDDED_S3_KEY)
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        client.create_bucket(Bucket=bucket)


def down(settings: Settings) -> bool:
    """Stop the recorded dev stack; False when none was recorded."""
    stack = read_stack(settings)
    if stack is None:
        return False
    stop_group(stack.broker_pid)
    if stack.s3_pid:
        stop_group(stack.s3_pid, timeout=20.0)
    stack_file(settings).unlink(missing_ok=True)
    return True


class EphemeralStack:
    """A broker (the embedded one, or `broker="apache"`: one Apache Kafka node) and S3 for the
    lifetime of one command; dies with its parent."""

    def __init__(self, settings: Settings, *, with_s3: bool = True, broker: str = "embedded") -> None:
        self.settings = settings
        self.with_s3 = with_s3
        self.broker = broker
        self._stack = ExitStack()

    def __enter__(self) -> Settings:
        root = self.settings.data_dir.resolve()
        root.mkdir(parents=True, exist_ok=True)
        try:
            if self.broker == "apache":
                kafka = ApacheKafka(root / f"kafka-{os.getpid()}", size=1)
                self._stack.callback(shutil.rmtree, kafka.root, True)
                address = self._stack.enter_context(kafka).bootstrap_servers
            else:
                address = self._stack.enter_context(EmbeddedBroker(root / "broker.log")).bootstrap_servers
            stack = DevStack(address, broker_pid=0, broker_kind=self.broker)
            if self.with_s3:
                s3 = self._stack.enter_context(EmbeddedS3(root / "s3"))
                stack = DevStack(address, 0, s3.endpoint_url, None, broker_kind=self.broker)
        except InfraError:
            self._stack.close()
            raise
        settings = stack.apply(self.settings)
        # A broker for one command is development by definition, whichever kind it is.
        dev = self.settings.dev if self.settings.dev is not None else True
        settings = settings.model_copy(update={"dev": dev})
        apply_topics(settings)
        return settings

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
