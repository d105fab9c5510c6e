"""Hostile OpenHands payloads at the pure level: the checks refuse them with the documented data
error, or the mapping takes them whole, into events the codec writes and export gives back.

What the API accepts (`check_events` / `check_record` pass) is what a runner maps: anything but a
`ProjectionError` out of the mapping or the codec for such a payload would be a payload that
stops a partition. Bounded here; `-m slow` runs the long variant.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from convdb.projections.errors import ForeignRecordError, ProjectionError
from convdb.projections.openhands import Received, check_events, check_record, export, ingest, initial
from convdb.projections.openhands._arguments import compact, expand, reference_for, spell
from convdb.projections.openhands._check import clean
from convdb.projections.openhands._fields import canonical_json
from convdb.projections.openhands._patch import apply, diff
from convdb.schemas import SingleObjectCodec
from convdb.schemas.validation import MAX_JSON_DEPTH, json_problem, record_problem
from tests.projections.openhands_events import json_value
from tests.projections.openhands_mutations import (
    CONVERSATION,
    hostile_batches,
    hostile_infos,
    nested_list,
    nested_object,
)
from tests.projections.test_openhands import SAMPLE

AT = datetime(2026, 5, 2, tzinfo=UTC)
CODEC = SingleObjectCodec()


def written(events: list[Any]) -> None:
    """Every mapped event is a record the codec writes and reads back (what the runner commits)."""
    for mapped in events:
        assert record_problem(mapped) is None, mapped
        assert CODEC.decode(CODEC.encode(mapped)) == mapped


def batch_outcome(batch: list[Any]) -> str:
    """'refused' (data error at the check), 'unmapped' (data error in the mapping) or 'mapped'."""
    try:
        checked = check_events(batch)
    except ForeignRecordError:
        return "refused"
    try:
        _, events = ingest(initial(CONVERSATION, "tenant-a"), Received("events", batch, AT))
    except ProjectionError:
        return "unmapped"
    written(events)
    kept = [clean(e) for e in checked if e.get("key") != "full_state"]
    assert export(CONVERSATION, events).events == kept  # lossless, hostile or not
    return "mapped"


def info_outcome(info: Any) -> str:
    try:
        check_record("conversation_info", info)
    except ForeignRecordError:
        return "refused"
    try:
        _, events = ingest(initial(CONVERSATION, "tenant-a"), Received("conversation_info", info, AT))
    except ProjectionError:
        return "unmapped"
    written(events)
    return "mapped"


@settings(max_examples=1000)
@given(batch=hostile_batches())
def test_a_hostile_batch_is_refused_with_the_data_error_or_mapped_whole(batch: list[Any]) -> None:
    outcome = batch_outcome(batch)
    event(outcome)
    assert outcome in ("refused", "unmapped", "mapped")


@settings(max_examples=500)
@given(info=hostile_infos())
def test_a_hostile_conversation_info_is_refused_with_the_data_error_or_mapped(info: Any) -> None:
    outcome = info_outcome(info)
    event(outcome)
    assert outcome in ("refused", "unmapped", "mapped")


@pytest.mark.slow
@settings(max_examples=20_000)
@given(batch=hostile_batches(), info=hostile_infos())
def test_the_long_pure_fuzz(batch: list[Any], info: Any) -> None:
    batch_outcome(batch)
    info_outcome(info)


def event_with(**changes: Any) -> list[dict[str, Any]]:
    events = json.loads(json.dumps(SAMPLE))
    events[2].update(changes)
    return events


def stats_event(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d",
        "timestamp": "2026-11-30T22:26:06",
        "source": "environment",
        "key": "stats",
        "value": {"usage_to_metrics": {"agent": metrics}},
        "kind": "ConversationStateUpdateEvent",
    }


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (event_with(action={"pattern": nested_list(450), "kind": "GlobAction"}), "nested more than 64"),
        (event_with(action={"pattern": nested_object(80)}), "nested more than 64"),
        ([stats_event({"accumulated_token_usage": {"prompt_tokens": 2**63}})], "signed 64-bit"),
        ([stats_event({"accumulated_cost": float("nan")})], "no NaN or Infinity"),
        (event_with(source={"a": 1}), "`source` must be one of"),
        (event_with(source=["agent"]), "`source` must be one of"),
    ],
)
def test_what_the_runner_could_not_map_is_refused_at_the_check(batch: list[Any], message: str) -> None:
    with pytest.raises(ForeignRecordError, match=message):
        check_events(batch)


def test_the_probes_runner_crashes_now_map() -> None:
    """Each of these passed the API and then crashed every runner (issue 21, finding 1)."""
    usage = {
        "accumulated_token_usage": {"prompt_tokens": 10, "completion_tokens": 1},
        "token_usages": [{"prompt_tokens": 10, "completion_tokens": 1, "response_id": "r1"}],
    }
    crashers = [
        [*SAMPLE, stats_event({**usage, "response_latencies": [{"response_id": {"an": "object"}}]})],
        [*SAMPLE, stats_event({**usage, "response_latencies": 7})],
        [*SAMPLE, stats_event({**usage, "token_usages": 7, "costs": "x"})],
        [*SAMPLE[:2], {**stats_event({}), "key": "execution_status", "value": {"an": "object"}}],
        event_with(tool_call={**SAMPLE[2]["tool_call"], "arguments": json.dumps(nested_list(600))}),
        event_with(tool_call={**SAMPLE[2]["tool_call"], "arguments": json.dumps({"n": 2**70})}),
    ]
    assert [batch_outcome(json.loads(json.dumps(b))) for b in crashers] == ["mapped"] * len(crashers)


def test_json_problem_is_linear_and_iterative() -> None:
    assert json_problem(nested_list(MAX_JSON_DEPTH)) is None
    assert "nested more than" in (json_problem(nested_list(MAX_JSON_DEPTH + 1)) or "")
    assert json_problem(nested_list(100_000)) is not None  # no recursion to exhaust
    assert json_problem([2**63 - 1, -(2**63)]) is None
    assert "64-bit" in (json_problem({"a": [1, {"b": -(2**63) - 1}]}) or "")


def test_a_message_text_is_stored_once() -> None:
    """An item flag that differs costs the flag in the patch, not a second copy of the text."""
    events = json.loads(json.dumps(SAMPLE))
    text = "x" * 200_000
    events[1]["llm_message"]["content"] = [{"type": "text", "text": text}]
    events[2]["tool_call"]["arguments"] = json.dumps({"pattern": text})
    _, out = ingest(initial(CONVERSATION, "t"), Received("events", check_events(events), AT))
    message, action = out[1], out[2]
    assert message.content == text and text not in (message.extension or "")
    assert action.arguments == canonical_json({"pattern": text})
    assert text not in (action.extension or "")  # the raw text is a reference to `arguments`
    assert len(CODEC.encode(message)) < len(text) + 2_000
    assert export(CONVERSATION, out).events == [clean(e) for e in events]


@given(
    value=st.dictionaries(st.text(max_size=6), json_value, min_size=1, max_size=6),
    separators=st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")]),
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, None, 2]),
)
def test_raw_arguments_are_spelled_back_exactly_or_kept(
    value: dict[str, Any], separators: tuple[str, str], ascii_only: bool, indent: int | None
) -> None:
    value = {**value, "padding": "p" * 1024}  # long enough to be worth a reference
    raw = json.dumps(value, separators=separators, ensure_ascii=ascii_only, indent=indent)
    canonical = canonical_json(json.loads(raw))
    reference = reference_for(canonical, raw)
    if reference is not None:
        assert spell(canonical, reference) == raw
    patch = {">": {"tool_call": {"=": {"arguments": raw}}}}
    squeezed = compact(patch, canonical)
    oh = apply({"tool_call": {"arguments": canonical}}, squeezed)
    assert expand(oh, canonical)["tool_call"]["arguments"] == raw
    assert (squeezed == patch) == (reference is None)


@given(
    base=st.lists(json_value, max_size=4),
    target=st.lists(json_value, max_size=4),
)
def test_a_patch_of_arrays_turns_base_into_target(base: list[Any], target: list[Any]) -> None:
    patched = apply({"k": base}, diff({"k": base}, {"k": target}))
    assert json.dumps(patched, sort_keys=True) == json.dumps({"k": target}, sort_keys=True)
