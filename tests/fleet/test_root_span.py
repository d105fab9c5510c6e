"""Tracing on: an inbox record that arrives without a trace context (`convdb run`, an import, a
client that does not trace) starts a trace in the runner, so every event of its run is traced."""

from __future__ import annotations

from pathlib import Path

import pytest

from convdb.infra.cli.run import send_task
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import StateUpdateEvent, make_codec
from convdb.schemas.topics import EVENTS
from tests.conftest import wait_until
from tests.deploy.otlp import OtlpReceiver
from tests.fleet._support import RunnerProc, fleet_settings

pytestmark = pytest.mark.kafka


def test_an_untraced_inbox_record_starts_a_trace_in_the_runner(settings: Settings, tmp_path: Path) -> None:
    live = fleet_settings(settings, tmp_path / "data")
    codec = make_codec(live.schema_registry_url)
    cid = "untraced-1"
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    def events() -> list:  # type: ignore[type-arg]
        return [m for m in read_topic(live, EVENTS.name(live.namespace)) if m.key() == cid.encode()]

    def finished() -> bool:
        decoded = [codec.decode(m.value() or b"", expect=EVENTS.value_types) for m in events()]
        return any(isinstance(e, StateUpdateEvent) and e.execution_status == "finished" for e in decoded)

    with OtlpReceiver() as traces:
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": traces.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        runner = RunnerProc(live, workspace, None, tmp_path / "runner.log", **env)
        try:
            send_task(live, cid, "acme", "hello")  # this process does not trace: no context
            wait_until(finished, 120, "the conversation to finish", logs=runner.logs, interval=0.5)
            wait_until(
                lambda: any(s.name == "runner inbox" for s in traces.received()), 30, "the runner's spans"
            )
        finally:
            runner.stop()
        spans = traces.received()
    records = events()
    parents = [(dict(m.headers() or []).get("traceparent") or b"").decode() or None for m in records]
    assert records and all(parents), f"{parents.count(None)} of {len(records)} events carry no traceparent"
    (root,) = [
        s for s in spans if s.name == "runner inbox" and s.attributes.get("convdb.conversation_id") == cid
    ]
    assert not root.parent_id  # a new trace, started by the runner
    assert {p.split("-")[1] for p in parents if p} == {root.trace_id}
