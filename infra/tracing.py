"""W3C trace context across Kafka: one user message is one trace, API to runner to consumers.

`setup_tracing` installs the OpenTelemetry SDK the way the standard `OTEL_*` variables say (the
SDK reads them itself: `OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_*`, `OTEL_SERVICE_NAME`, ...;
nothing is exported by default). Only when an exporter is configured does convdb trace at all:
otherwise every helper here is a no-op, so an untraced deployment pays nothing per record.

Producers put the current context in each record's headers (`inject`, called by
`convdb.infra.producer`); consumers continue it (`extract`, `record_spans`), so parent links hold
across Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

logger = logging.getLogger(__name__)

TRACER = "convdb"
TRACE_HEADERS = ("traceparent", "tracestate")
Headers = list[tuple[str, bytes]]
RecordHeaders = Iterable[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None]
"""A record's headers as confluent-kafka types them: (name, value) pairs, or a mapping."""

_state: dict[str, Any] = {"enabled": False, "service": None}


def setup_tracing(service: str, *, llm: bool = False) -> bool:
    """Install the SDK for this process as `OTEL_*` say; True when spans are exported somewhere.

    `service` names the process (`api`, `runner`, ...) in `convdb.service`, and in `service.name`
    as `convdb-<service>` unless `OTEL_SERVICE_NAME` names it. `llm`: the process calls LLMs
    through litellm, whose own spans then join the trace.
    """
    if _state["service"] is not None:
        return bool(_state["enabled"])
    # The SDK is imported only here: a process that never traces never loads it.
    from opentelemetry.sdk._configuration import _OTelSDKConfigurator
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

    class Configurator(_OTelSDKConfigurator):
        """convdb as its own OpenTelemetry distro: the SDK's environment-driven set-up, unchanged."""

    def export_processor(exporter: SpanExporter) -> BatchSpanProcessor:
        _state["enabled"] = True  # the SDK found an exporter in OTEL_TRACES_EXPORTER
        return BatchSpanProcessor(exporter)

    attributes: dict[str, str] = {"convdb.service": service}
    if str(Resource.create().attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        attributes[SERVICE_NAME] = f"convdb-{service}"
    Configurator().configure(
        resource_attributes=attributes, export_span_processor=export_processor, setup_logging_handler=False
    )
    _state["service"] = service
    if _state["enabled"] and llm:
        _join_litellm()
    return bool(_state["enabled"])


def enabled() -> bool:
    """True when this process exports spans."""
    return bool(_state["enabled"])


def tracer() -> trace.Tracer:
    """convdb's tracer."""
    return trace.get_tracer(TRACER)


def inject(headers: Headers | None) -> Headers | None:
    """`headers` plus the current trace context (`traceparent`, `tracestate`), when tracing."""
    if not _state["enabled"]:
        return headers
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    if not carrier:
        return headers
    kept = [(k, v) for k, v in (headers or ()) if k not in TRACE_HEADERS]
    return kept + [(k, v.encode()) for k, v in carrier.items()]


def extract(headers: RecordHeaders | None) -> Context | None:
    """The sampled trace context a record carries, or None (none, unsampled, or not tracing)."""
    if not _state["enabled"] or not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    carrier = {k: _text(v) for k, v in pairs if k in TRACE_HEADERS}
    if "traceparent" not in carrier:
        return None
    context = propagate.extract(carrier)
    found = trace.get_current_span(context).get_span_context()
    return context if found.is_valid and found.trace_flags.sampled else None


def _text(value: str | bytes | None) -> str:
    return value if isinstance(value, str) else (value or b"").decode(errors="replace")


@contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    parent: Context | None = None,
    attributes: dict[str, Any] | None = None,
) -> Iterator[Span | None]:
    """A current span (child of `parent`, else of the current one), or nothing when not tracing."""
    if not _state["enabled"]:
        yield None
        return
    with tracer().start_as_current_span(name, context=parent, kind=kind, attributes=attributes) as current:
        yield current


@contextmanager
def record_spans(
    name: str, messages: Sequence[Any], attributes: dict[str, Any] | None = None
) -> Iterator[list[Span]]:
    """One CONSUMER span per traced record of a batch, each the child of its producer's context.

    A batch is applied in one store transaction, so each span covers the whole batch: it ends
    when the batch is committed (or failed) and says so in its status.
    """
    if not _state["enabled"]:
        yield []
        return
    parents = []
    for msg in messages:
        parent = extract(msg.headers())
        if parent is not None:
            parents.append((parent, record_attributes(msg, len(messages))))
    with spans_for(name, parents, attributes) as spans:
        yield spans


def record_attributes(msg: Any, batch_size: int = 1) -> dict[str, Any]:
    """Span attributes naming a Kafka record (messaging semantic conventions plus convdb's)."""
    key = msg.key()
    return {
        "messaging.system": "kafka",
        "messaging.destination.name": msg.topic(),
        "messaging.destination.partition.id": str(msg.partition()),
        "messaging.kafka.offset": msg.offset(),
        "messaging.batch.message_count": batch_size,
        "convdb.conversation_id": key.decode(errors="replace") if key else "",
    }


@contextmanager
def spans_for(
    name: str, parents: Sequence[tuple[Context, dict[str, Any]]], attributes: dict[str, Any] | None = None
) -> Iterator[list[Span]]:
    """CONSUMER spans, one per (parent context, attributes), open for the block; errors mark them."""
    spans = [
        tracer().start_span(
            name, context=parent, kind=SpanKind.CONSUMER, attributes={**own, **(attributes or {})}
        )
        for parent, own in parents
    ]
    try:
        yield spans
    except BaseException as exc:
        for s in spans:
            s.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        for s in spans:
            s.end()


def traced(headers: RecordHeaders | None, name: str, **attributes: Any) -> Any:
    """A CONSUMER span continuing one record's context, or a no-op context manager."""
    parent = extract(headers)
    if parent is None:
        return nullcontext(None)
    return span(name, kind=SpanKind.CONSUMER, parent=parent, attributes=attributes)


def traced_or_root(headers: RecordHeaders | None, name: str, **attributes: Any) -> Any:
    """`traced`, but a record that carries no context (written by `convdb run`, an import, a client
    that does not trace) starts a trace of its own here, so that what it causes is traced all the
    same; a no-op context manager when not tracing."""
    if not _state["enabled"]:
        return nullcontext(None)
    # An empty context: a new trace, never a child of whatever span is current.
    parent = extract(headers) or Context()
    return span(name, kind=SpanKind.CONSUMER, parent=parent, attributes=attributes)


def litellm_parent() -> dict[str, Any]:
    """`metadata` for a litellm call: its OpenTelemetry callback then emits its own span
    (`litellm_request`) as a child of the current one. Without it litellm decorates whatever span
    is current from a background thread, after the call returned (so often after the span ended)."""
    if not _state["enabled"]:
        return {}
    return {"litellm_parent_otel_span": trace.get_current_span()}


def _join_litellm() -> None:
    """litellm's own request spans, as children of convdb's LLM span, on the same provider."""
    try:
        import litellm
        from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig
    except ImportError as exc:  # litellm moved its integration: convdb's own LLM span remains
        logger.warning("litellm's OpenTelemetry integration is missing; its spans are not joined: %s", exc)
        return
    # Prompts and completions stay out of spans: secrets are redacted in the log, not in prompts.
    config = OpenTelemetryConfig(capture_message_content="NO_CONTENT")
    joined = OpenTelemetry(config=config, tracer_provider=trace.get_tracer_provider())
    litellm.callbacks = [*litellm.callbacks, joined]
