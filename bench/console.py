"""Console: how long the conversation page takes to render for a 1k- and a 10k-event conversation.

The store is filled by the read side's own projectors (views, index, stats, titles, effects;
no Kafka in between), then the page is fetched from the real app in-process (FastAPI + Jinja2,
signed in with a session cookie) as a browser would: SQL, fold-free timeline window, stats,
chart, effect ledger, HTML. Context figures: the API's whole active branch as JSON, and the
"as of" audit view, which folds the log up to the offset.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

from fastapi.testclient import TestClient

from bench.common import BASE_TIME, CONTENT_1K, BenchContext, BenchError, Figures, median
from convdb.consumers.api import create_app
from convdb.consumers.base import ConsumedRecord
from convdb.consumers.effects import EffectsConsumer
from convdb.consumers.index import IndexConsumer
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.store import ensure_projections, open_engine
from convdb.consumers.titles import TitlesConsumer
from convdb.consumers.views import ViewsConsumer
from convdb.schemas import (
    ActionEvent,
    AvroModel,
    EffectConfirmed,
    EffectProposed,
    EffectStarted,
    LLMUsageEvent,
    MessageEvent,
    ObservationEvent,
)

FIGURES = {
    "console_page_ms_1k": ("console conversation page, 1k-event conversation (last 200 shown)", "ms", ""),
    "console_page_ms_10k": ("console conversation page, 10k-event conversation (last 200 shown)", "ms", ""),
    "console_usage_svg_ms_10k": (
        "console usage chart (SVG, every LLM call), 10k-event conversation",
        "ms",
        "",
    ),
    "console_earlier_page_ms_10k": ("console conversation page, 10k events, an earlier window", "ms", ""),
    "console_as_of_ms_10k": ("console page 'as of' mid-conversation, 10k events (folds the log)", "ms", ""),
    "api_view_ms_10k": ("API GET /view, whole active branch as JSON, 10k events (context)", "ms", ""),
}
KEY = "bench-console-key"
EFFECT_EVERY = 10
"""Every 10th action is a keyed side effect with a confirmed ledger (proposed, started, confirmed)."""


def run(ctx: BenchContext) -> Figures:
    """Fill a store with a 1k and a 10k conversation, then time the pages."""
    settings = ctx.settings.model_copy(
        update={
            "store_url": f"sqlite:///{ctx.workdir / 'console.db'}",
            "api": ctx.settings.api.model_copy(update={"keys": {KEY: "bench"}}),
        }
    )
    fill(
        settings.resolved_store_url,
        [*agent_conversation("console-1k", 1_000), *agent_conversation("console-10k", 10_000)],
    )
    figures: Figures = {}
    with TestClient(create_app(settings)) as client:
        sign_in(client)
        timed = lambda path, **params: page_ms(client, path, ctx.repeats * 3, params)  # noqa: E731
        figures["console_page_ms_1k"] = timed("/console/conversations/console-1k")
        figures["console_page_ms_10k"] = timed("/console/conversations/console-10k")
        figures["console_usage_svg_ms_10k"] = timed("/console/conversations/console-10k/usage.svg")
        figures["console_earlier_page_ms_10k"] = timed("/console/conversations/console-10k", before=5_000)
        figures["console_as_of_ms_10k"] = timed("/console/conversations/console-10k", offset=5_000)
        figures["api_view_ms_10k"] = page_ms(
            client, "/conversations/console-10k/view", ctx.repeats * 3, {}, {"X-API-Key": KEY}
        )
    return figures


def sign_in(client: TestClient) -> None:
    """Sign in through the console's form."""
    token = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/login").text)
    if token is None:
        raise BenchError("no login form")
    answer = client.post(
        "/console/login", data={"csrf": token.group(1), "api_key": KEY}, follow_redirects=False
    )
    if answer.status_code != 303:
        raise BenchError(f"sign-in failed: {answer.status_code}")


def page_ms(
    client: TestClient, path: str, runs: int, params: dict[str, object], headers: dict[str, str] | None = None
) -> float:
    """Median ms of fetching a page (the first fetch warms caches and is not counted)."""
    times = []
    for i in range(runs + 1):
        start = time.perf_counter()
        answer = client.get(path, params=params, headers=headers)
        elapsed = (time.perf_counter() - start) * 1000
        if answer.status_code != 200 or len(answer.content) < 500:
            raise BenchError(f"GET {path} answered {answer.status_code}")
        if i:
            times.append(elapsed)
    return median(times)


def agent_conversation(conv: str, count: int) -> Iterator[tuple[str, AvroModel]]:
    """(topic, record): a user message, then turns of LLM call, action, 1 KB observation, message."""
    parent: str | None = None
    for seq in range(1, count + 1):
        common = {
            "id": str(uuid.uuid4()),
            "conversation_id": conv,
            "tenant_id": "bench",
            "seq": seq,
            "timestamp": BASE_TIME + timedelta(seconds=seq),
            "parent_id": parent,
        }
        step = seq % 4
        if seq == 1:
            event: AvroModel = MessageEvent(
                **common, source="user", role="user", content="Please audit the repository."
            )
        elif step == 2:
            event = LLMUsageEvent(
                **common,
                source="agent",
                model="gpt-4o-mini",
                llm_response_id=f"r{seq}",
                prompt_tokens=900 + seq,
                completion_tokens=60,
                cost=0.0002,
                latency_ms=800.0,
            )
        elif step == 3:
            effect = seq % (4 * EFFECT_EVERY) == 3
            event = ActionEvent(
                **common,
                source="agent",
                tool_name="create_issue" if effect else "execute_bash",
                tool_call_id=f"c{seq}",
                arguments='{"command":"ls -la"}',
                thought="Let me look at the files.",
                llm_response_id=f"r{seq - 1}",
                operation_id=f"{conv}/{common['id']}",
                intent_hash="0" * 64,
                effect_class="keyed" if effect else "read_only",
                target="tracker:issues" if effect else None,
            )
            if effect:
                yield from ledger(event)  # type: ignore[arg-type]
        elif step == 0:
            event = ObservationEvent(
                **common,
                source="environment",
                action_id=str(parent),
                tool_name="execute_bash",
                tool_call_id=f"c{seq - 1}",
                content=CONTENT_1K,
            )
        else:
            event = MessageEvent(**common, source="agent", role="assistant", content=f"Step {seq}: looked.")
        parent = event.id  # type: ignore[attr-defined]
        yield "events", event


def ledger(action: ActionEvent) -> Iterator[tuple[str, AvroModel]]:
    """A confirmed operation's ledger records for an action."""
    base = {
        "operation_id": action.operation_id,
        "conversation_id": action.conversation_id,
        "tenant_id": "bench",
        "timestamp": action.timestamp,
    }
    yield (
        "effects",
        EffectProposed(
            id=str(uuid.uuid4()),
            action_id=action.id,
            tool_name=action.tool_name,
            intent_hash=action.intent_hash,
            target=action.target,
            effect_class="keyed",
            reconcile_after=action.timestamp + timedelta(minutes=5),
            **base,
        ),
    )
    yield "effects", EffectStarted(id=str(uuid.uuid4()), attempt=1, **base)
    yield "effects", EffectConfirmed(id=str(uuid.uuid4()), provider_receipt=f"trk-{action.seq}", **base)


def fill(store_url: str, records: list[tuple[str, AvroModel]]) -> None:
    """Write the records' rows with every read-side projector, as `convdb consume all` would."""
    engine = open_engine(store_url)
    consumed = [
        ConsumedRecord(topic, 0, offset, 0, value.conversation_id, value)  # type: ignore[attr-defined]
        for offset, (topic, value) in enumerate(records)
    ]
    projectors = [ViewsConsumer(), IndexConsumer(), StatsConsumer(), TitlesConsumer(), EffectsConsumer()]
    ensure_projections(engine, projectors)  # their tables and the shared payload table
    with engine.begin() as conn:
        for projector in projectors:
            for start in range(0, len(consumed), 2000):
                projector.apply(conn, consumed[start : start + 2000])
    engine.dispose()
