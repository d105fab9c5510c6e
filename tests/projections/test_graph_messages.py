"""The pure mapping of a LangGraph `messages` channel to convdb events (`projections.graph_messages`)."""

from __future__ import annotations

import pytest

from convdb.projections.graph_messages import derived_id, project_messages, text_of
from convdb.schemas import ActionEvent, LLMUsageEvent, MessageEvent, ObservationEvent

messages = pytest.importorskip("langchain_core.messages")


def conversation() -> list[object]:
    return [
        messages.SystemMessage("you book trains", id="s1"),
        messages.HumanMessage("book me a train", id="u1"),
        messages.AIMessage(
            "looking",
            id="a1",
            tool_calls=[{"name": "search", "args": {"to": "Bern", "at": 9}, "id": "call-1"}],
            usage_metadata={"input_tokens": 30, "output_tokens": 7, "total_tokens": 37},
            response_metadata={"model_name": "gpt-test"},
        ),
        messages.ToolMessage("IC 9:02", tool_call_id="call-1", name="search", id="t1"),
        messages.ToolMessage("boom", tool_call_id="call-2", name="search", id="t2", status="error"),
        messages.AIMessage(
            [{"type": "text", "text": "Booked "}, {"type": "text", "text": "IC 9:02"}], id="a2"
        ),
    ]


def test_each_kind_of_message_becomes_its_event() -> None:
    actions: dict[str, str] = {}
    out = project_messages("c1", conversation(), set(), actions)
    assert [(p.cls, p.id) for p in out] == [
        (MessageEvent, "u1"),
        (ActionEvent, derived_id("a1", "call:call-1")),
        (LLMUsageEvent, derived_id("a1", "usage")),
        (ObservationEvent, "t1"),
        (MessageEvent, "a2"),
    ]  # the system message says nothing; a tool answer for a call nobody made is dropped
    user, action, usage, observation, answer = out
    assert user.fields == {"id": "u1", "role": "user", "content": "book me a train"}
    assert action.fields["arguments"] == '{"at":9,"to":"Bern"}'
    assert action.fields["operation_id"] == f"c1/{action.id}"
    assert (action.fields["tool_call_id"], action.fields["llm_response_id"]) == ("call-1", "a1")
    assert (usage.fields["model"], usage.fields["prompt_tokens"], usage.fields["completion_tokens"]) == (
        "gpt-test",
        30,
        7,
    )
    assert observation.fields["action_id"] == action.id and observation.fields["is_error"] is False
    assert answer.fields["content"] == "Booked IC 9:02" and answer.fields["role"] == "assistant"
    assert actions == {"call-1": action.id}


def test_what_the_log_holds_is_not_projected_again_and_a_later_answer_finds_its_call() -> None:
    first = project_messages("c1", conversation()[:3], set(), actions := {})
    known = {p.id for p in first}
    later = project_messages("c1", conversation(), known, actions)
    assert [p.id for p in later] == ["t1", "a2"]


def test_an_error_tool_message_is_an_error_observation() -> None:
    call = messages.AIMessage("", id="a9", tool_calls=[{"name": "pay", "args": {}, "id": "c9"}])
    failed = messages.ToolMessage("declined", tool_call_id="c9", id="t9", status="error")
    out = project_messages("c1", [call, failed], set(), {})
    assert out[-1].cls is ObservationEvent and out[-1].fields["is_error"] is True


def test_text_of_content_blocks_and_other_values() -> None:
    assert text_of("plain") == "plain"
    assert text_of([{"type": "text", "text": "a"}, "b", {"type": "image"}]) == "ab"
    assert text_of({"k": 1}) == '{"k": 1}'
