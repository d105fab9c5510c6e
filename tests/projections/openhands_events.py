"""Hypothesis strategies for OpenHands event streams shaped like openhands-sdk 1.58 writes them.

The shapes follow real SDK output (webhook form: nulls included), with random extra fields
where OpenHands has open-ended data (typed actions and observations, state values), legacy
events without parent_id, roots made by `navigate_to(None)`, branches and parallel tool calls.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

TOOLS = [
    {
        "description": "glob",
        "action_type": "GlobAction",
        "observation_type": "GlobObservation",
        "annotations": {"title": "glob", "readOnlyHint": True, "idempotentHint": True},
        "kind": "GlobTool",
        "title": "glob",
    },
    {
        "description": "tasks",
        "action_type": "TaskTrackerAction",
        "observation_type": "TaskTrackerObservation",
        "annotations": {"title": "task_tracker", "readOnlyHint": False, "idempotentHint": True},
        "kind": "TaskTrackerTool",
        "title": "task_tracker",
    },
    {
        "description": "shell",
        "action_type": "TerminalAction",
        "observation_type": "TerminalObservation",
        "annotations": None,
        "kind": "TerminalTool",
        "title": "terminal",
    },
]

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_leaf = json_leaf | st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)


def _text(text: str) -> dict[str, Any]:
    return {"cache_prompt": False, "type": "text", "text": text}


class Stream:
    """Builds one conversation's events in order, tracking the OpenHands leaf like the SDK does."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.events: list[dict[str, Any]] = []
        self.leaf: str | None = None
        self.nodes: list[str] = []
        self.clock = datetime(2026, 5, 1, 12, 0, 0)
        self.usage = [0, 0, 0.0]
        self.response = 0
        self.count = 0
        self.salt = draw(st.integers(0, 2**64)) << 32

    def _base(self, kind: str, source: str, **fields: Any) -> dict[str, Any]:
        self.clock += timedelta(microseconds=self.draw(st.integers(1, 10**7)))
        self.count += 1
        event_id = str(uuid.UUID(int=self.salt + self.count))
        return {
            "id": event_id,
            "timestamp": self.clock.isoformat(),
            "source": source,
            "parent_id": self.leaf,
            **fields,
            "kind": kind,
        }

    def node(self, kind: str, source: str, **fields: Any) -> dict[str, Any]:
        event = self._base(kind, source, **fields)
        follows_leaf = bool(self.events) and self.events[-1]["id"] == self.leaf
        if follows_leaf and self.draw(st.integers(0, 19)) == 0:
            del event["parent_id"]  # legacy: the SDK reads the previous event as the parent
        self.events.append(event)
        self.leaf = event["id"]
        self.nodes.append(event["id"])
        return event

    def annotation(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = self._base(kind, "environment", **fields)
        self.events.append(event)
        return event

    def system_prompt(self) -> None:
        self.node(
            "SystemPromptEvent",
            "agent",
            system_prompt=_text(self.draw(texts) or "You are helpful."),
            tools=TOOLS,
            dynamic_context=None,
        )

    def message(self, source: str = "user") -> None:
        content = [_text(t) for t in self.draw(st.lists(texts, max_size=2))]
        self.node(
            "MessageEvent",
            source,
            llm_message={
                "role": "user" if source == "user" else "assistant",
                "content": content,
                "tool_calls": None,
                "thinking_blocks": [],
            },
            llm_response_id=None,
            activated_skills=[],
            extended_content=[],
            sender=None,
            critic_result=None,
        )

    def actions(self) -> None:
        self.response += 1
        calls = self.draw(st.integers(1, 3))
        actions = []
        for i in range(calls):
            tool = self.draw(st.sampled_from(["glob", "task_tracker", "terminal", "missing_tool"]))
            args = self.draw(st.dictionaries(st.sampled_from(["pattern", "command", "x"]), texts, max_size=2))
            raw = self.draw(st.sampled_from(["json", "spaced", "broken"]))
            arguments = {
                "json": json.dumps(args, separators=(",", ":")),
                "spaced": json.dumps(args),
                "broken": "{not json",
            }[raw]
            call_id = f"call_{self.response}_{i}"
            action = (
                None
                if tool == "missing_tool"
                else {**args, "extra": self.draw(json_value), "kind": "XAction"}
            )
            actions.append(
                self.node(
                    "ActionEvent",
                    "agent",
                    thought=[_text(self.draw(texts))] if i == 0 else [],
                    reasoning_content=None,
                    thinking_blocks=[],
                    action=action,
                    tool_name=tool,
                    tool_call_id=call_id,
                    tool_call={"id": call_id, "name": tool, "arguments": arguments, "origin": "completion"},
                    llm_response_id=f"resp-{self.response}",
                    security_risk=self.draw(st.sampled_from(["UNKNOWN", "LOW"])),
                    summary=self.draw(st.none() | texts),
                )
            )
        for action in actions:
            self.result(action)
        self.stats()

    def result(self, action: dict[str, Any]) -> None:
        outcome = self.draw(st.sampled_from(["ok", "ok", "error", "reject"]))
        common = {"tool_name": action["tool_name"], "tool_call_id": action["tool_call_id"]}
        if action["action"] is None or outcome == "error":
            self.node(
                "AgentErrorEvent",
                "agent",
                **common,
                error=self.draw(texts) or "boom",
                classification={"kind": "agent_action", "retryable": True},
            )
        elif outcome == "reject":
            self.node(
                "UserRejectObservation",
                "user",
                **common,
                rejection_reason=self.draw(texts),
                rejection_source="user",
                action_id=action["id"],
            )
        else:
            observation = {
                "content": [_text(self.draw(texts))],
                "is_error": self.draw(st.booleans()),
                "files": self.draw(json_value),
                "kind": "XObservation",
            }
            self.node(
                "ObservationEvent",
                "environment",
                **common,
                observation=observation,
                action_id=action["id"],
                extended_content=[],
            )

    def stats(self) -> None:
        self.usage = [
            self.usage[0] + self.draw(st.integers(0, 500)),
            self.usage[1] + self.draw(st.integers(0, 50)),
            self.usage[2] + self.draw(st.sampled_from([0.0, 0.25, 0.001])),
        ]
        self.annotation(
            "ConversationStateUpdateEvent",
            key="stats",
            value={
                "usage_to_metrics": {
                    "agent": {
                        "model_name": "gpt-4o-mini",
                        "accumulated_cost": self.usage[2],
                        "max_budget_per_task": None,
                        "accumulated_token_usage": {
                            "model": "gpt-4o-mini",
                            "prompt_tokens": self.usage[0],
                            "completion_tokens": self.usage[1],
                            "cache_read_tokens": 0,
                            "response_id": "",
                        },
                    }
                }
            },
        )

    def status(self, value: str) -> None:
        self.annotation("ConversationStateUpdateEvent", key="execution_status", value=value)

    def other(self) -> None:
        choice = self.draw(st.integers(0, 5))
        if choice == 0 and len(self.nodes) > 2:
            forgotten = self.draw(st.lists(st.sampled_from(self.nodes[1:]), max_size=3, unique=True))
            self.node(
                "Condensation",
                "environment",
                forgotten_event_ids=forgotten,
                summary=self.draw(st.none() | texts),
                summary_offset=self.draw(st.none() | st.integers(0, 3)),
                llm_response_id="cond-1",
            )
        elif choice == 1:
            self.node(self.draw(st.sampled_from(["PauseEvent", "InterruptEvent"])), "user")
        elif choice == 2:
            self.node(
                "HookExecutionEvent", "hook", hook_event_type="PreToolUse", payload=self.draw(json_value)
            )
        elif choice == 3 and len(self.nodes) > 1:
            self.leaf = self.draw(st.sampled_from(self.nodes))  # navigate_to(event): the next node branches
        elif choice == 4 and self.nodes:
            self.leaf = None
            self.node(
                "MessageEvent",
                "user",
                llm_message={"role": "user", "content": [_text("again")]},
                activated_skills=[],
                extended_content=[],
            )
            self.events[-1]["parent_id"] = "__root__"
        else:
            self.annotation(
                "ConversationStateUpdateEvent",
                key=self.draw(st.sampled_from(["agent_state", "tags"])),
                value=self.draw(json_value),
            )


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    """One OpenHands conversation's events as the webhook sends them, in order."""
    s = Stream(draw)
    s.status("idle")
    s.system_prompt()
    s.message()
    s.status("running")
    for _ in range(draw(st.integers(1, 5))):
        step = draw(st.sampled_from(["actions", "actions", "message", "other"]))
        if step == "actions":
            s.actions()
        elif step == "message":
            s.message(draw(st.sampled_from(["user", "agent"])))
        else:
            s.other()
    s.status(draw(st.sampled_from(["finished", "paused", "error", "stuck", "deleting"])))
    return s.events


def batches(events: list[dict[str, Any]], cuts: list[int]) -> list[list[dict[str, Any]]]:
    """`events` split at the given positions (each batch non-empty)."""
    bounds = sorted({c for c in cuts if 0 < c < len(events)})
    out, start = [], 0
    for cut in [*bounds, len(events)]:
        out.append(events[start:cut])
        start = cut
    return out
