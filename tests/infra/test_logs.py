"""Service logs: JSON lines carry conversation, tenant and trace ids; text lines show them too."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from convdb.infra.logs import configure_logging, log_context
from convdb.infra.settings import OpsSettings


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Put pytest's handlers back after a test that reconfigures the root logger."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_ids(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(OpsSettings(log_format="json"), service=True)
    log = logging.getLogger("convdb.test")
    span = TracerProvider().get_tracer("t").start_span("step")
    with log_context(conversation_id="conv-1", tenant_id="acme"), trace.use_span(span, end_on_exit=True):
        log.info("step %d done", 3, extra={"seq": 7})
    log.debug("hidden at INFO")
    (line,) = capsys.readouterr().err.strip().splitlines()
    record = json.loads(line)
    assert record["message"] == "step 3 done" and record["level"] == "INFO" and record["seq"] == 7
    assert (record["conversation_id"], record["tenant_id"]) == ("conv-1", "acme")
    assert record["trace_id"] == format(span.get_span_context().trace_id, "032x")


def test_text_is_the_default_and_commands_log_warnings_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(OpsSettings(), service=False)
    log = logging.getLogger("convdb.test")
    log.info("not shown for a one-shot command")
    with log_context(conversation_id="conv-2"):
        log.warning("shown")
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("WARNING convdb.test: shown [conversation_id=conv-2]")
