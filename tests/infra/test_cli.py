"""The `convdb` CLI as a user runs it: a real subprocess against the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from convdb.infra.procs import free_port, pid_alive
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import MessageEvent, ObservationEvent, SingleObjectCodec
from convdb.schemas._types import AvroModel
from convdb.schemas.topics import ALL_TOPICS
from tests.helpers import new_id, now

pytestmark = pytest.mark.kafka


def convdb(
    env: dict[str, str], *args: str, timeout: float = 60.0, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m convdb ARGS` with exactly these CONVDB_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
    return subprocess.run(
        [sys.executable, "-m", "convdb", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def events_for(conv: str, count: int, start: int = 1) -> list[AvroModel]:
    """A conversation of alternating messages and 1 KB observations, one second apart."""
    base = now() - timedelta(hours=1)
    out: list[AvroModel] = []
    for seq in range(start, start + count):
        common = dict(
            id=new_id(),
            conversation_id=conv,
            tenant_id="t1",
            seq=seq,
            timestamp=base + timedelta(seconds=seq),
        )
        if seq % 2:
            out.append(MessageEvent(**common, source="user", role="user", content=f"hello {seq}"))
        else:
            out.append(
                ObservationEvent(
                    **common,
                    source="environment",
                    action_id=new_id(),
                    tool_name="sh",
                    tool_call_id="c1",
                    content="x" * 1024,
                )
            )
    return out


@pytest.fixture
def published(settings: Settings) -> dict[str, list[AvroModel]]:
    """Two conversations, 12 and 7 events, durable on the events topic."""
    convs = {"conv-a": events_for("conv-a", 12), "conv-b": events_for("conv-b", 7)}
    publisher = EventPublisher(settings, SingleObjectCodec())
    for events in convs.values():
        publisher.publish_durable(events)
    return convs


def as_json(events: list[AvroModel]) -> list[dict[str, object]]:
    return [e.model_dump(mode="json") for e in events]


def tail_json(settings: Settings, *args: str) -> list[dict[str, object]]:
    result = convdb(settings.to_env(), "tail", "--format", "json", *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def by_conversation(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(rows, key=lambda r: (str(r["conversation_id"]), int(r["seq"])))  # type: ignore[call-overload]


def test_tail_json_shows_exactly_the_published_events(
    settings: Settings, published: dict[str, list[AvroModel]]
) -> None:
    rows = tail_json(settings)
    assert by_conversation(rows) == as_json(published["conv-a"] + published["conv-b"])
    for conv in published:  # per-conversation order is the publish order
        assert [r["seq"] for r in rows if r["conversation_id"] == conv] == list(
            range(1, len(published[conv]) + 1)
        )


def test_tail_conversation_filter_and_limit(
    settings: Settings, published: dict[str, list[AvroModel]]
) -> None:
    assert tail_json(settings, "--conversation", "conv-b") == as_json(published["conv-b"])
    assert tail_json(settings, "--conversation", "conv-a", "--limit", "3") == as_json(published["conv-a"][:3])
    assert tail_json(settings, "--conversation", "nobody") == []


@pytest.mark.brokers
def test_tail_from_timestamp_includes_exactly_events_at_or_after_it(
    settings: Settings, published: dict[str, list[AvroModel]]
) -> None:
    cut = published["conv-a"][7].timestamp  # type: ignore[attr-defined]
    rows = tail_json(settings, "--from-timestamp", cut.isoformat())
    expected = [e for events in published.values() for e in events if e.timestamp >= cut]  # type: ignore[attr-defined]
    assert by_conversation(rows) == by_conversation(as_json(expected))
    assert rows and min(r["timestamp"] for r in rows) == cut.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tail", "--limit", "0"], "must be from 1 to"),
        (["tail", "--from-offset", "-1"], "must be from 0 to"),
        (["tail", "--from-timestamp", "notatime"], "not an ISO-8601 time"),
        (["tail", "--bogus"], "unrecognized arguments: --bogus"),
        (["tail", "--from-offset", "1", "--from-timestamp", "2025-01-01"], "not allowed with argument"),
        (["tail", "--topic", "nope"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_flags_exit_2_with_a_message(settings: Settings, args: list[str], message: str) -> None:
    result = convdb(settings.to_env(), *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_topics_apply_is_idempotent_and_list_shows_every_topic(
    make_settings: Callable[..., Settings],
) -> None:
    env = make_settings().to_env()
    first = convdb(env, "topics", "apply")
    second = convdb(env, "topics", "apply")
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    ns = env["CONVDB_NAMESPACE"]
    names = [f"{ns}.{s}" for s in ("dlq", "effects", "events", "graph", "inbox", "receipts", "state")]
    assert sorted(line.split("\t") for line in first.stdout.splitlines()) == [[n, "created"] for n in names]
    assert sorted(line.split("\t") for line in second.stdout.splitlines()) == [[n, "exists"] for n in names]
    listed = convdb(env, "topics", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [f"{n}\t4 partitions" for n in names]


def test_no_broker_configured_is_a_clear_message(tmp_path: Path) -> None:
    result = convdb({"CONVDB_DATA_DIR": str(tmp_path)}, "topics", "list")
    assert result.returncode == 1
    assert "no broker: set CONVDB_BOOTSTRAP_SERVERS" in result.stderr
    assert "Traceback" not in result.stderr


def test_unreachable_broker_is_a_clear_message(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    env = {"CONVDB_DATA_DIR": str(tmp_path), "CONVDB_BOOTSTRAP_SERVERS": address}
    result = convdb(env, "topics", "list")
    assert result.returncode == 1
    assert f"no Kafka broker answered at {address} (from CONVDB_BOOTSTRAP_SERVERS)" in result.stderr
    assert "Traceback" not in result.stderr


def test_dev_up_status_down(tmp_path: Path) -> None:
    env = {"CONVDB_DATA_DIR": str(tmp_path / "data"), "CONVDB_NAMESPACE": "devtest"}
    info: dict[str, object] = {}
    try:
        up = convdb(env, "dev", "up", "--broker", "embedded", timeout=120)
        assert up.returncode == 0, up.stderr
        assert json.loads(up.stdout)["bootstrap_servers"].startswith("127.0.0.1:")
        status = convdb(env, "dev", "status")
        assert status.returncode == 0, status.stderr
        assert status.stdout == up.stdout  # one shape for both
        info.update(json.loads(status.stdout))
        assert info["state"] == "up" and pid_alive(info["broker_pid"]) and pid_alive(info["s3_pid"])
        assert info["s3_endpoint"].startswith("http://127.0.0.1:")
        # Later commands find the stack through the data dir alone.
        listed = convdb(env, "topics", "list")
        assert listed.returncode == 0, listed.stderr
        assert len(listed.stdout.splitlines()) == len(ALL_TOPICS)
        assert convdb(env, "dev", "up").stdout == up.stdout  # already up: a no-op
    finally:
        down = convdb(env, "dev", "down", timeout=120)
    assert down.returncode == 0 and json.loads(down.stdout) == {"state": "down", "stopped": True}, down.stderr
    assert not pid_alive(int(info["broker_pid"])) and not pid_alive(int(info["s3_pid"]))  # type: ignore[call-overload]
    after = convdb(env, "dev", "status")
    assert (after.returncode, json.loads(after.stdout)) == (1, {"state": "down"})
