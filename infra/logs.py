"""Service logs: text or one JSON object per line, each carrying conversation, tenant and trace ids.

Code logs as usual (`logger.info("...", extra={"conversation_id": ...})`); a `log_context` block
adds ids to every line logged inside it (the runner wraps each conversation's work in one), and
the current OpenTelemetry span gives the trace and span ids.
"""

from __future__ import annotations

import json
import logging
import logging.config
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace

from convdb.infra.secrets import redact_patterns
from convdb.infra.settings import OpsSettings

CONTEXT_FIELDS = ("conversation_id", "tenant_id")
_context: ContextVar[dict[str, str]] = ContextVar("convdb_log_context", default={})  # noqa: B039 - never mutated

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}

QUIET_LIBRARIES = ("LiteLLM", "litellm", "httpx", "httpcore", "botocore", "urllib3")
"""Loggers kept at WARNING unless `-v`: at INFO they log every request. (faust's own level is the
reconciler's `--log-level`; its worker reports readiness at INFO.)"""


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Every line logged inside carries these fields (e.g. conversation_id, tenant_id)."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v}})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Adds the log context and the current trace/span ids to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate; never drops a record."""
        for name, value in _context.get().items():
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = format(span.trace_id, "032x")
            record.span_id = format(span.span_id, "016x")
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, ids, and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        line = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(
            {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        )
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return redact_patterns(json.dumps(line, default=str, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    """The classic line, with `[conversation_id=... tenant_id=... trace_id=...]` when known."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as text."""
        text = super().format(record)
        ids = [f"{k}={getattr(record, k)}" for k in (*CONTEXT_FIELDS, "trace_id") if getattr(record, k, None)]
        return redact_patterns(f"{text} [{' '.join(ids)}]" if ids else text)


def level_of(ops: OpsSettings, *, service: bool, verbose: bool = False) -> str:
    """DEBUG with `-v`; else `ops.log_level`; else INFO for long-running services (their start,
    assignment and progress lines) and WARNING for one-shot commands."""
    return "DEBUG" if verbose else ops.log_level or ("INFO" if service else "WARNING")


def logging_config(ops: OpsSettings, level: str) -> dict[str, Any]:
    """The `logging.config.dictConfig` of convdb's logs (also handed to faust's worker, which
    would otherwise install its own format)."""
    formatter = JsonFormatter if ops.log_format == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"convdb": {"()": f"{__name__}.{formatter.__name__}"}},
        "filters": {"context": {"()": f"{__name__}.ContextFilter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "convdb",
                "filters": ["context"],
            }
        },
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {name: {"level": "DEBUG" if level == "DEBUG" else "WARNING"} for name in QUIET_LIBRARIES},
    }


def configure_logging(ops: OpsSettings, *, service: bool, verbose: bool = False) -> None:
    """Route every log line to stderr in the configured format and level."""
    logging.config.dictConfig(logging_config(ops, level_of(ops, service=service, verbose=verbose)))
