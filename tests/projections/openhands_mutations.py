"""Hostile OpenHands payloads: valid webhook batches and ConversationInfo posts, mutated.

A mutation replaces one value anywhere in a payload (an event field, a nested object, an item
of a list, a value inside the JSON text of `tool_call.arguments`) by a hostile one: another JSON
type, an object where a string is hashed, arrays and objects nested hundreds deep, integers
beyond 64 bits, NaN and infinities, lone surrogates, NUL, long text. Every payload is passed
through JSON text first (`as_received`), so it is exactly what the API parses from a body.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

from tests.projections.openhands_events import conversations
from tests.projections.test_openhands import SAMPLE

CONVERSATION = "6bd7943a-4698-477a-9eb8-b346b0c6bce9"

USAGE = {
    "model_name": "gpt-4o-mini",
    "accumulated_cost": 0.3,
    "accumulated_token_usage": {"prompt_tokens": 30, "completion_tokens": 3, "cache_read_tokens": 0},
    "costs": [{"cost": 0.1}, {"cost": 0.2}],
    "token_usages": [
        {"prompt_tokens": 10, "completion_tokens": 1, "response_id": "r1"},
        {"prompt_tokens": 20, "completion_tokens": 2, "response_id": "r2"},
    ],
    "response_latencies": [{"latency": 0.5, "response_id": "r1"}, {"latency": 0.25, "response_id": "r2"}],
}
"""One LLM's usage as OpenHands reports it, per call lists included."""

STATS_EVENT = {
    "id": "9b1c3a4e-0d55-4a51-9c2e-3f6b1a2c4d5e",
    "timestamp": "2026-11-30T22:26:06.000001",
    "source": "environment",
    "key": "stats",
    "value": {"usage_to_metrics": {"agent": USAGE}},
    "kind": "ConversationStateUpdateEvent",
}
FULL_STATE_EVENT = {
    "id": "5d2f1e0a-7c3b-4b6a-8e9d-1a2b3c4d5e6f",
    "timestamp": "2026-11-30T22:26:06.000002",
    "source": "environment",
    "key": "full_state",
    "value": {"execution_status": "finished", "leaf_event_id": SAMPLE[1]["id"], "stats": {}},
    "kind": "ConversationStateUpdateEvent",
}
STATUS_EVENT = {
    "id": "0e9d8c7b-6a5f-4e3d-9c2b-1a0f9e8d7c6b",
    "timestamp": "2026-11-30T22:26:06.000003",
    "source": "environment",
    "key": "execution_status",
    "value": "running",
    "kind": "ConversationStateUpdateEvent",
}
BATCHES: list[list[dict[str, Any]]] = [
    SAMPLE,
    [*SAMPLE, STATS_EVENT],
    [*SAMPLE[:2], STATUS_EVENT, FULL_STATE_EVENT],
]
"""Valid webhook batches to mutate (a generated conversation is the other source)."""

INFO: dict[str, Any] = {
    "id": CONVERSATION.replace("-", ""),
    "title": "Fix the bug",
    "execution_status": "running",
    "stats": {"usage_to_metrics": {"agent": USAGE}},
    "agent": {"kind": "Agent", "llm": {"model": "gpt-4o-mini"}},
    "created_at": "2026-11-30T22:26:05.236475",
}
"""A ConversationInfo as the agent-server posts it."""


def nested_list(depth: int) -> Any:
    """`[[...[1]...]]`, `depth` arrays deep (built without recursion)."""
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_object(depth: int) -> Any:
    """`{"a": {"a": ... 1}}`, `depth` objects deep."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


hostile_values = st.one_of(
    st.integers(2**63, 2**80),
    st.integers(-(2**80), -(2**63) - 1),
    st.integers(-3, 2**63 - 1),
    st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e308, -0.0]),
    st.integers(30, 700).map(nested_list),
    st.integers(30, 700).map(nested_object),
    st.sampled_from(["\ud800", "a\x00b", "\u200b", "", " ", "__root__", "a/b", "x" * 5000]),
    st.text(max_size=30),
    st.none(),
    st.booleans(),
    # Built afresh each time: a later mutation may write into them.
    st.builds(list),
    st.builds(dict),
    st.builds(lambda: {"response_id": {"a": 1}}),
    st.builds(lambda: [{"response_id": ["x"], "latency": 1e308}]),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    st.lists(st.integers() | st.text(max_size=3), max_size=3),
)
"""Values a hostile client puts where OpenHands puts something else."""


def _slots(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a JSON value: the places a mutation can write to."""
    found, pending = [], [value]
    while pending:
        item = pending.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        for key, child in pairs:
            found.append((item, key))
            pending.append(child)
    return found


@st.composite
def mutated(draw: Any, base: Any) -> Any:
    """`base` (a JSON value, copied) with one to three values replaced by hostile ones."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        slots = _slots(value)
        if not slots:
            break
        container, key = draw(st.sampled_from(slots))
        if key == "arguments" and isinstance(container[key], str) and draw(st.booleans()):
            container[key] = _mutated_arguments(draw, container[key])
        else:
            container[key] = draw(hostile_values)
    return value


def _mutated_arguments(draw: Any, raw: str) -> str:
    """A tool call's arguments text with a hostile value inside (or hostile text)."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed:
        return json.dumps(draw(hostile_values))
    parsed[draw(st.sampled_from(sorted(parsed)))] = draw(hostile_values)
    return json.dumps(parsed, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))


def as_received(value: Any) -> Any:
    """What the API parses out of the body a client sends for `value` (NaN and all)."""
    return json.loads(json.dumps(value))


@st.composite
def hostile_batches(draw: Any) -> list[Any]:
    """A webhook event batch, valid before one to three hostile mutations."""
    base = draw(st.sampled_from(BATCHES) | conversations())
    return as_received(draw(mutated(base)))  # type: ignore[no-any-return]


@st.composite
def hostile_infos(draw: Any) -> dict[str, Any]:
    """A ConversationInfo post, valid before one to three hostile mutations."""
    return as_received(draw(mutated(INFO)))  # type: ignore[no-any-return]
