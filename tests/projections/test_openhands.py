"""The OpenHands ⇄ convdb mapping (pure): lossless, idempotent, split-invariant, tree-preserving."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands import Received, check_events, export, ingest, initial, resume
from convdb.projections.openhands._check import clean
from convdb.projections.openhands._patch import apply, diff
from convdb.projections.view import path_to_root
from convdb.schemas.events import Event
from tests.projections.openhands_events import batches, conversations, json_value
from tests.projections.task_tree_events import task_tree

CID = "6bd7943a-4698-477a-9eb8-b346b0c6bce9"
AT = datetime(2026, 5, 2, tzinfo=UTC)


def run(batched: list[list[dict[str, Any]]], retry: bool = False) -> tuple[Any, list[Event]]:
    state, out = initial(CID, "tenant-a"), []
    for batch in batched:
        for _ in range(2 if retry else 1):
            state, events = ingest(state, Received("events", batch, AT))
            out += events
    return state, out


def exported(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What OpenHands keeps on disk of a webhook stream: everything but full_state updates."""
    return [clean(e) for e in events if e.get("key") != "full_state"]


@given(
    base=st.dictionaries(st.text(max_size=4), json_value, max_size=5),
    target=st.dictionaries(st.text(max_size=4), json_value, max_size=5),
)
def test_a_patch_turns_base_into_target(base: dict[str, Any], target: dict[str, Any]) -> None:
    patched = apply(base, diff(base, target))
    assert json.dumps(patched, sort_keys=True) == json.dumps(target, sort_keys=True)
    assert diff(target, target) == {}


def test_a_patch_tells_json_types_apart() -> None:
    assert diff({"a": 1}, {"a": True}) == {"=": {"a": True}}
    assert diff({"a": 1}, {"a": 1.0}) == {"=": {"a": 1.0}}
    assert apply({"a": {"b": None, "c": 1}}, diff({"a": {"b": None, "c": 1}}, {"a": {"c": None}})) == {
        "a": {"c": None}
    }


@given(events=conversations(), cuts=st.lists(st.integers(0, 80), max_size=6))
def test_export_gives_back_every_event_exactly_in_order(
    events: list[dict[str, Any]], cuts: list[int]
) -> None:
    _, out = run(batches(events, cuts))
    assert export(CID, out).events == exported(events)


@given(events=conversations(), cuts=st.lists(st.integers(0, 80), max_size=6))
def test_any_batch_split_and_retries_give_the_same_log(events: list[dict[str, Any]], cuts: list[int]) -> None:
    whole_state, whole = run([events])
    split_state, split = run(batches(events, cuts), retry=True)
    assert [e.model_dump() for e in split] == [e.model_dump() for e in whole]
    assert split_state.duplicates == len(events)
    assert whole_state.duplicates == 0


@given(events=conversations())
def test_the_active_path_is_openhands_path_to_the_last_node(events: list[dict[str, Any]]) -> None:
    state, _ = run([events])
    parents: dict[str, str | None] = {}
    last = None
    for e in events:
        if e["kind"] == "ConversationStateUpdateEvent":
            continue
        parent = e.get("parent_id", last)
        parents[e["id"]] = None if parent == "__root__" else parent
        last = e["id"]
    expected, node = [], last
    while node is not None:
        expected.append(node)
        node = parents[node]
    assert [e.id for e in path_to_root(state.view, state.view.active_leaf)] == expected[::-1]


@given(events=conversations())
def test_usage_status_and_seq(events: list[dict[str, Any]]) -> None:
    state, out = run([events])
    stats = [e for e in events if e.get("key") == "stats"]
    usage = [e for e in out if e.kind == "llm_usage"]
    reported = stats[-1]["value"]["usage_to_metrics"]["agent"] if stats else None
    prompt = reported["accumulated_token_usage"]["prompt_tokens"] if reported else 0
    assert sum(e.prompt_tokens for e in usage) == prompt
    assert math.isclose(
        sum(e.cost or 0.0 for e in usage), reported["accumulated_cost"] if reported else 0.0, abs_tol=1e-12
    )
    last_status = [e["value"] for e in events if e.get("key") == "execution_status"][-1]
    assert state.status == (last_status if last_status != "deleting" else "running")
    chain = [e.seq for e in out if e.seq]
    assert chain == list(range(1, len(chain) + 1))
    assert all(e.tenant_id == "tenant-a" and e.conversation_id == CID for e in out)


@given(events=conversations())
def test_resume_rebuilds_the_mapping_state_from_the_log(events: list[dict[str, Any]]) -> None:
    state, _ = run([events])
    again = resume(state.view, "tenant-a")
    assert again._replace(duplicates=0) == state._replace(duplicates=0)


def test_actions_get_operation_intent_and_the_tools_declared_effect_class() -> None:
    events = check_events(json.loads(json.dumps(SAMPLE)))
    _, out = run([events])
    action = next(e for e in out if e.kind == "action")
    assert action.operation_id == f"{CID}/{action.id}"
    assert action.arguments == '{"pattern":"*.txt"}'
    assert action.effect_class == "read_only"
    assert action.security_risk == "unknown" and action.thought == "Let me look."


def test_records_are_kept_and_give_title_status_leaf_and_per_call_usage() -> None:
    state, out = run([check_events(SAMPLE)])
    base = {
        "id": CID,
        "agent": {"kind": "Agent"},
        "workspace": {},
        "execution_status": "paused",
        "leaf_event_id": SAMPLE[1]["id"],
        "stats": {
            "usage_to_metrics": {
                "agent": {
                    "model_name": "m",
                    "accumulated_cost": 0.3,
                    "accumulated_token_usage": {"prompt_tokens": 30, "completion_tokens": 3},
                    "costs": [{"cost": 0.1}, {"cost": 0.2}],
                    "token_usages": [
                        {"prompt_tokens": 10, "completion_tokens": 1, "response_id": "r1"},
                        {"prompt_tokens": 20, "completion_tokens": 2, "response_id": "r2"},
                    ],
                    "response_latencies": [{"latency": 0.5, "response_id": "r1"}],
                }
            }
        },
    }
    state, derived = ingest(state, Received("base_state", base, AT))
    state, titled = ingest(state, Received("meta", {"title": "Fix the bug"}, AT))
    assert [e.kind for e in derived] == [
        "external",
        "state_update",
        "active_leaf_changed",
        "llm_usage",
        "llm_usage",
    ]
    assert [(e.llm_response_id, e.prompt_tokens, e.cost, e.latency_ms) for e in derived[3:]] == [
        ("r1", 10, 0.1, 500.0),
        ("r2", 20, 0.2, 0.0),
    ]
    assert state.view.active_leaf == SAMPLE[1]["id"] and state.status == "paused"
    assert [e.kind for e in titled] == ["external", "title"] and state.title == "Fix the bug"
    again, nothing = ingest(state, Received("base_state", base, AT))
    assert nothing == [] and again.duplicates == 1
    conversation = export(CID, out + derived + titled)
    assert conversation.base_state == base and conversation.meta == {"title": "Fix the bug"}
    assert conversation.events == [clean(e) for e in SAMPLE]


def test_nul_characters_are_kept_out_of_convdb_fields_and_given_back_on_export() -> None:
    observation = json.loads(json.dumps(SAMPLE[3]))
    observation["observation"]["content"][0]["text"] = "bin\x00ary"
    _, out = run([check_events([*SAMPLE[:3], observation])])
    assert out[-1].content == "bin\ufffdary"
    assert export(CID, out).events[-1] == clean(observation)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({"id": "x"}, "JSON array"),
        ([], "no events"),
        ([{"id": "a", "kind": "EvilEvent"}], "unknown event kind 'EvilEvent'"),
        ([{"kind": "PauseEvent", "timestamp": "2026-01-01T00:00:00", "source": "user"}], "must be text"),
        ([{"id": "a" * 201, "kind": "PauseEvent"}], "at most 200 are allowed"),
        ([{"id": "a\x00b", "kind": "PauseEvent"}], "control, format or separator character"),
        ([{"id": "a\u200bb", "kind": "PauseEvent"}], "control, format or separator character"),
        ([{"id": "p1", "kind": "PauseEvent", "timestamp": "yesterday", "source": "user"}], "not ISO 8601"),
        (
            [{"id": "p1", "kind": "PauseEvent", "timestamp": "2026-01-01T00:00:00", "source": "llm"}],
            "`source`",
        ),
        (
            [{"id": "m1", "kind": "MessageEvent", "timestamp": "2026-01-01T00:00:00", "source": "user"}],
            "`llm_message` is missing",
        ),
        (
            [{"id": "p1", "kind": "PauseEvent", "timestamp": "2026-01-01T00:00:00", "source": "user"}] * 2,
            "appears twice",
        ),
        (
            [
                {
                    "id": "m1",
                    "kind": "MessageEvent",
                    "timestamp": "2026-01-01T00:00:00",
                    "source": "user",
                    "llm_message": {"role": "user", "content": [{"type": "text", "text": "a\ud800"}]},
                }
            ],
            "lone surrogate",
        ),
    ],
)
def test_bad_batches_are_refused_whole_with_a_message(batch: Any, message: str) -> None:
    with pytest.raises(ForeignRecordError, match=message):
        check_events(batch)
    with pytest.raises(ForeignRecordError, match=message):
        ingest(initial(CID, "t"), Received("events", batch, AT))


SAMPLE: list[dict[str, Any]] = [
    {
        "id": "c6e7f601-d80d-4aed-ba91-199455b56f2e",
        "timestamp": "2026-11-30T22:26:05.236475",
        "source": "agent",
        "parent_id": None,
        "system_prompt": {"cache_prompt": False, "type": "text", "text": "You are OpenHands."},
        "tools": [
            {
                "description": "glob",
                "action_type": "GlobAction",
                "observation_type": "GlobObservation",
                "annotations": {"title": "glob", "readOnlyHint": True},
                "kind": "GlobTool",
                "title": "glob",
            }
        ],
        "dynamic_context": None,
        "kind": "SystemPromptEvent",
    },
    {
        "id": "2185068e-fd90-4aae-bb74-e5a30e171770",
        "timestamp": "2026-11-30T22:26:05.241433",
        "source": "user",
        "parent_id": "c6e7f601-d80d-4aed-ba91-199455b56f2e",
        "llm_message": {
            "role": "user",
            "content": [{"cache_prompt": False, "type": "text", "text": "hello there"}],
            "tool_calls": None,
            "thinking_blocks": [],
        },
        "llm_response_id": None,
        "activated_skills": [],
        "extended_content": [],
        "kind": "MessageEvent",
    },
    {
        "id": "1e48e4d7-e80c-4e96-bd00-0faef9a05755",
        "timestamp": "2026-11-30T22:26:05.390644",
        "source": "agent",
        "parent_id": "2185068e-fd90-4aae-bb74-e5a30e171770",
        "thought": [{"cache_prompt": False, "type": "text", "text": "Let me look."}],
        "thinking_blocks": [],
        "action": {"pattern": "*.txt", "kind": "GlobAction"},
        "tool_name": "glob",
        "tool_call_id": "call_1",
        "tool_call": {
            "id": "call_1",
            "name": "glob",
            "arguments": '{"pattern": "*.txt"}',
            "origin": "completion",
        },
        "llm_response_id": "resp-1",
        "security_risk": "UNKNOWN",
        "kind": "ActionEvent",
    },
    {
        "id": "4ffeed7b-6671-4e51-b005-ae0c6fa5925b",
        "timestamp": "2026-11-30T22:26:05.392039",
        "source": "environment",
        "parent_id": "1e48e4d7-e80c-4e96-bd00-0faef9a05755",
        "tool_name": "glob",
        "tool_call_id": "call_1",
        "observation": {
            "content": [{"cache_prompt": False, "type": "text", "text": "a.txt"}],
            "is_error": False,
            "files": ["a.txt"],
            "kind": "GlobObservation",
        },
        "action_id": "1e48e4d7-e80c-4e96-bd00-0faef9a05755",
        "extended_content": [],
        "kind": "ObservationEvent",
    },
]
"""A real openhands-sdk 1.58 webhook batch (shortened texts)."""


def test_the_export_keeps_task_tree_links_as_conversation_tags() -> None:
    """OpenHands' ConversationState has no parent or children field: the links go in its tags
    (keys lowercase alphanumeric), the child's up to its parent, the parent's down to its children."""
    parent, child = str(uuid.uuid4()), str(uuid.uuid4())
    parent_events, child_events = task_tree(parent, child)
    assert export(parent, parent_events).base_state["tags"] == {"child0": child}
    assert export(child, child_events).base_state["tags"] == {
        "parentconversation": parent,
        "parentoperation": f"{parent}/call/child-0",
        "delegationdepth": "1",
    }
    unlinked = [e.model_copy(update={"parent_conversation_id": None}) for e in child_events[:1]]
    assert "tags" not in export(child, unlinked).base_state
