"""Archive test fixtures: settings pointed at a real S3 endpoint (or a folder), a sink, event builders."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from convdb.consumers.archive import layout
from convdb.consumers.archive.container import RawRecord, read_container
from convdb.consumers.archive.service import ArchiveConsumer
from convdb.consumers.archive.target import open_target
from convdb.infra.procs import spawn, stop_group
from convdb.infra.s3 import make_s3_client
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import MessageEvent, SingleObjectCodec
from tests.conftest import S3Endpoint, wait_until
from tests.helpers import new_id, now


@pytest.fixture
def s3_settings(settings: Settings, s3_endpoint: S3Endpoint) -> Settings:
    """Settings whose archive is a fresh bucket on the test S3 endpoint."""
    bucket = f"arch-{settings.namespace}"
    client = make_s3_client(
        s3_endpoint.endpoint_url, "us-east-1", s3_endpoint.access_key_id, s3_endpoint.secret_access_key
    )
    client.create_bucket(Bucket=bucket)
    return settings.model_copy(update={"s3": s3_endpoint.section(), "archive_url": f"s3://{bucket}/archive"})


@pytest.fixture
def file_settings(settings: Settings, tmp_path: Path) -> Settings:
    """Settings whose archive is a local folder."""
    return settings.model_copy(update={"archive_url": f"file://{tmp_path / 'archive'}"})


def rotated(settings: Settings, **archive: object) -> Settings:
    """A copy with other archive rotation settings."""
    return settings.model_copy(update={"archive": settings.archive.model_copy(update=archive)})


def chain(
    conv: str, n: int, start: int = 1, parent: str | None = None, text: str = "msg"
) -> list[MessageEvent]:
    """n messages of one conversation, seq from `start`, each the child of the previous one."""
    events = []
    for seq in range(start, start + n):
        event = MessageEvent(
            id=new_id(), conversation_id=conv, tenant_id="t1", seq=seq, timestamp=now(),
            source="user" if seq % 2 else "agent", role="user" if seq % 2 else "assistant",
            content=f"{text} {conv}#{seq}", parent_id=parent,
        )  # fmt: skip
        parent = event.id
        events.append(event)
    return events


def interleave(*chains: list[MessageEvent]) -> list[MessageEvent]:
    """Round-robin merge that keeps each conversation's order."""
    out: list[MessageEvent] = []
    for i in range(max(len(c) for c in chains)):
        out += [c[i] for c in chains if i < len(c)]
    return out


def publish(settings: Settings, events: list[MessageEvent]) -> None:
    """Publish events durably."""
    publisher = EventPublisher(settings, SingleObjectCodec())
    for e in events:
        publisher.publish(e)
    publisher.flush()


class SinkThread:
    """The archive consumer running in a thread of the test process."""

    def __init__(self, settings: Settings) -> None:
        self.consumer = ArchiveConsumer(settings)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.consumer.run(self.stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def __enter__(self) -> SinkThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.error is not None:
            raise self.error

    def wait_records(self, n: int, timeout: float = 60.0) -> None:
        """Wait until n records are archived (or the sink failed)."""
        wait_until(
            lambda: self.error or self.consumer.records_archived >= n, timeout, f"{n} records archived"
        )
        if self.error is not None:
            raise self.error


@pytest.fixture
def sink_process(tmp_path: Path) -> Iterator[object]:
    """Start `python -m convdb consume archive` children; all are stopped after the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(settings: Settings, name: str = "sink") -> subprocess.Popen[bytes]:
        env = {**settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        proc = spawn([sys.executable, "-m", "convdb", "consume", "archive"], tmp_path / f"{name}.log", env)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            stop_group(proc.pid, timeout=10.0)
        proc.wait(10)


def archive_objects(settings: Settings, suffix: str = "events") -> dict[str, bytes]:
    """Every archive object (not sidecars) of a topic: key -> bytes."""
    target, prefix = open_target(settings)
    folder = layout.join(prefix, settings.topic(suffix)) + "/"
    return {k: target.get(k) or b"" for k in target.list(folder) if k.endswith(layout.OBJECT_SUFFIX)}


def archived_records(settings: Settings, suffix: str = "events") -> list[RawRecord]:
    """Every record in every archive object of a topic, object by object."""
    return [
        r
        for key, data in sorted(archive_objects(settings, suffix).items())
        for r in read_container(data, key)
    ]
