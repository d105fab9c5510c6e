"""The runner side under attack: `convdb serve` and `convdb runner` over a real broker, and what a
test needs to write past the API (straight into the inbox, events and state topics) and to see
what the runner did (its status lines, dead letters, events, `/healthz`, `/metrics`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition

from convdb.infra.dlq import CONSUMER, ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC
from convdb.infra.kafka import apply_topics, common_config, producer_config
from convdb.infra.partitioner import partition_for
from convdb.infra.procs import free_port, wait_for_port
from convdb.infra.reader import partition_extents, read_topic
from convdb.infra.settings import Settings
from convdb.schemas import ExternalBatch, InboxMessage, SingleObjectCodec, StateUpdateEvent
from convdb.schemas.topics import ALL_TOPICS
from tests.conftest import BrokerInfo, settings_for, wait_until
from tests.hostile.stack import Service

KEYS = {"key-acme": "acme", "key-umbrella": "umbrella"}
ACME = {"X-API-Key": "key-acme"}
UMBRELLA = {"X-API-Key": "key-umbrella"}
CODEC = SingleObjectCodec()


def runner_settings(broker: BrokerInfo, root: Path, **updates: Any) -> Settings:
    """Settings of one stack: its own namespace, two tenants, the offline scripted model."""
    settings = settings_for(
        broker,
        root / "data",
        partitions=4,
        api={"keys": KEYS, "publish_timeout_s": 15.0},
        llm={"scripted_backend": "direct"},
        dev=True,
        **updates,
    )
    apply_topics(settings, ALL_TOPICS)
    return settings


def on_partition(partition: int, settings: Settings, make: Callable[[], str]) -> str:
    """An id from `make` whose records land in `partition`."""
    while True:
        candidate = make()
        if partition_for(candidate, settings.partitions) == partition:
            return candidate


def openhands_id(partition: int, settings: Settings) -> str:
    """An OpenHands conversation id (a UUID, as convdb spells it) of that partition."""
    return on_partition(partition, settings, lambda: str(uuid.uuid4()))


@dataclass
class RunnerStack:
    """The API and one runner, their settings, and the ways in and out a test needs."""

    settings: Settings
    root: Path
    api_url: str = ""
    services: dict[str, Service] = field(default_factory=dict)
    runner_env: dict[str, str] = field(default_factory=dict)

    # -- services -----------------------------------------------------------------------------
    def start(self, *, api: bool = True) -> RunnerStack:
        """Start the API (unless not wanted) and the runner; wait until both serve."""
        env = {**self.settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
        if api:
            port = free_port()
            self.api_url = f"http://127.0.0.1:{port}"
            service = Service("api", ["serve", "--port", str(port)], self.root / "api.log", env).start()
            self.services["api"] = service
            wait_for_port(service.proc, port, 90, "the API", service.log)
        ops = free_port()
        workspace = self.root / "workspace"
        workspace.mkdir(parents=True, exist_ok=True)
        runner_env = {**env, "CONVDB_OPS__PORT": str(ops), **self.runner_env}
        argv = ["runner", "--workspace", str(workspace)]
        self.services["runner"] = Service("runner", argv, self.root / "runner.log", runner_env, ops)
        self.start_runner()
        return self

    def start_runner(self) -> None:
        """(Re)start the runner, with a fresh log; wait until the group gave it its partitions."""
        runner = self.services["runner"]
        runner.log = self.root / f"runner-{time.monotonic_ns()}.log"
        runner.start()
        wait_for_port(runner.proc, runner.ops_port or 0, 90, "the runner", runner.log)
        wait_until(
            lambda: self.lines("assigned") and self.lines("assigned")[-1]["partitions"],
            90,
            "assigned",
            logs=self.logs(),
        )

    def kill_runner(self) -> None:
        """SIGKILL the runner (a crash) and reap it."""
        proc = self.services["runner"].proc
        assert proc is not None
        proc.kill()
        proc.wait(30)

    def stop(self) -> None:
        """Stop every service."""
        for service in self.services.values():
            service.stop()

    def runner_alive(self) -> bool:
        """The runner still runs."""
        return self.services["runner"].alive()

    def lines(self, kind: str) -> list[dict[str, Any]]:
        """The current runner's JSON status lines of one kind."""
        text = self.services["runner"].log.read_text(errors="replace")
        found = []
        for line in text.splitlines():
            if line.startswith("{"):
                record = json.loads(line)
                if record.get("event") == kind:
                    found.append(record)
        return found

    def health(self) -> tuple[int, dict[str, Any]]:
        """The runner's /healthz: status code and body."""
        answer = self.services["runner"].health()
        return answer.status_code, answer.json()

    def metrics(self) -> str:
        """The runner's /metrics text."""
        port = self.services["runner"].ops_port
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

    def logs(self) -> list[Path]:
        """Every service's current log (for a failed wait's report)."""
        return [service.log for service in self.services.values()]

    # -- ways in --------------------------------------------------------------------------------
    def call(self, method: str, path: str, headers: dict[str, str], **kw: Any) -> httpx.Response:
        """One request to the API."""
        return httpx.request(method, f"{self.api_url}{path}", headers=headers, timeout=120, **kw)

    def produce(
        self, suffix: str, key: bytes | None, value: bytes, partition: int | None = None, **config: Any
    ) -> tuple[int, int]:
        """One raw record on a topic (a foreign producer: any partition, any bytes); where it landed."""
        producer = Producer({**producer_config(self.settings), **config})
        landed: list[tuple[int, int]] = []
        kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
        producer.produce(
            self.settings.topic(suffix),
            value,
            key,
            on_delivery=lambda err, msg: (
                landed.append((msg.partition(), msg.offset())) if err is None else None
            ),
            **kwargs,
        )
        assert producer.flush(30) == 0 and landed, "not delivered"
        return landed[0]

    def inbox_batch(
        self, cid: str, payload: Any, tenant: str = "acme", kind: str = "events", **produce: Any
    ) -> tuple[int, int]:
        """An OpenHands payload straight into the inbox, as no API would let it pass."""
        record = ExternalBatch(
            id=str(uuid.uuid4()),
            conversation_id=cid,
            tenant_id=tenant,
            timestamp=datetime.now(UTC),
            origin="openhands",
            payload_kind=kind,
            payload=payload if isinstance(payload, str) else json.dumps(payload),
        )
        return self.produce("inbox", cid.encode(), CODEC.encode(record), **produce)

    def message(self, cid: str, content: str, tenant: str = "umbrella", **produce: Any) -> tuple[int, int]:
        """A user message straight into the inbox."""
        record = InboxMessage(
            id=str(uuid.uuid4()),
            conversation_id=cid,
            tenant_id=tenant,
            timestamp=datetime.now(UTC),
            command="message",
            content=content,
        )
        return self.produce("inbox", cid.encode(), CODEC.encode(record), **produce)

    # -- ways out -------------------------------------------------------------------------------
    def events(self, cid: str) -> list[Any]:
        """The conversation's events in the events topic (decodable ones), log order."""
        found = []
        for msg in read_topic(self.settings, self.settings.topic("events")):
            if msg.key() == cid.encode():
                try:
                    found.append(CODEC.decode(msg.value()))
                except Exception:  # noqa: BLE001, S112 - foreign bytes a test planted
                    continue
        return found

    def events_by_partition(self, cid: str) -> set[int]:
        """The partitions of the events topic holding records keyed by `cid`."""
        return {
            m.partition()
            for m in read_topic(self.settings, self.settings.topic("events"))
            if m.key() == cid.encode()
        }

    def finished(self, cid: str) -> bool:
        """The conversation's last recorded status is finished."""
        updates = [e for e in self.events(cid) if isinstance(e, StateUpdateEvent)]
        return bool(updates) and updates[-1].execution_status == "finished"

    def dead_letters(self) -> list[dict[str, Any]]:
        """Every dead letter: its headers, key and value size."""
        found = []
        for msg in read_topic(self.settings, self.settings.topic("dlq")):
            headers = {k: (v or b"").decode(errors="replace") for k, v in msg.headers() or []}
            found.append({**headers, "key": msg.key(), "value_bytes": len(msg.value() or b"")})
        return found

    def dead_letter_of(self, at: tuple[int, int], topic: str = "inbox") -> dict[str, Any] | None:
        """The runner's dead letter of the record at (partition, offset) of a topic, if any."""
        name = self.settings.topic(topic)
        for letter in self.dead_letters():
            if (
                letter.get(ORIGINAL_TOPIC) == name
                and letter.get(ORIGINAL_PARTITION) == str(at[0])
                and letter.get(ORIGINAL_OFFSET) == str(at[1])
                and letter.get(CONSUMER) == "runner"
            ):
                return letter
        return None

    def caught_up(self, timeout: float = 120) -> None:
        """Wait until the runner committed every inbox record written so far."""
        topic = self.settings.topic("inbox")
        ends = {p: high for p, (_, high) in partition_extents(self.settings, topic).items()}
        consumer = Consumer({**common_config(self.settings), "group.id": self.settings.group("runner")})
        try:

            def done() -> bool:
                committed = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
                return all(tp.offset >= ends[tp.partition] for tp in committed if ends[tp.partition] > 0)

            wait_until(done, timeout, "the runner to commit every inbox record", logs=self.logs())
        finally:
            consumer.close()

    def cli(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`convdb ARGS` with this stack's settings; the finished process."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
        full = {**base, **self.settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "convdb", *args],
            env=full,
            capture_output=True,
            text=True,
            timeout=300,
        )
