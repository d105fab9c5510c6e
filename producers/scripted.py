"""The scripted model: a deterministic, offline policy that answers like an OpenAI chat model.

The plan comes from the latest user message holding directives, one step per line:
``!tool {"json": "args"}`` starts a step, ``+tool {...}`` adds a parallel call to it. String
arguments may contain ``{{last}}``, replaced by the last tool result. Each step is one assistant
turn with tool calls; after the last step (or with no directives) it answers with text and stops.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

SCRIPTED_MODEL = "convdb/scripted"
"""The model name that selects the scripted model."""


def parse_plan(text: str) -> list[list[tuple[str, str]]]:
    """Steps of (tool name, raw JSON arguments) from a message's directive lines."""
    steps: list[list[tuple[str, str]]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] not in "!+":
            continue
        name, _, args = line[1:].partition(" ")
        call = (name.strip(), args.strip() or "{}")
        if line[0] == "+" and steps:
            steps[-1].append(call)
        else:
            steps.append([call])
    return steps


def _fill(raw: str, last: str) -> str:
    """Replace {{last}} inside string values (keeps the JSON valid; invalid JSON is left alone)."""
    if "{{last}}" not in raw:
        return raw
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    if isinstance(value, dict):
        value = {k: v.replace("{{last}}", last) if isinstance(v, str) else v for k, v in value.items()}
    return json.dumps(value, sort_keys=True)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def scripted_turn(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The next assistant turn as an OpenAI chat-completion dict (deterministic in `messages`)."""
    plan: list[list[tuple[str, str]]] = []
    start = -1
    for i, message in enumerate(messages):
        if message.get("role") == "user" and parse_plan(str(message.get("content") or "")):
            plan, start = parse_plan(str(message["content"])), i
    after = messages[start + 1 :] if start >= 0 else messages
    done = sum(1 for m in after if m.get("role") == "assistant" and m.get("tool_calls"))
    tool_results = [str(m.get("content") or "") for m in after if m.get("role") == "tool"]
    last = tool_results[-1] if tool_results else ""
    prompt = json.dumps(messages, sort_keys=True, default=str)
    if start >= 0 and done < len(plan):
        calls = [
            {
                "id": f"call_{done + 1}_{j + 1}",
                "type": "function",
                "function": {"name": name, "arguments": _fill(args, last)},
            }
            for j, (name, args) in enumerate(plan[done])
        ]
        message = {
            "role": "assistant",
            "content": f"Step {done + 1} of {len(plan)}.",
            "tool_calls": calls,
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": _final_text(messages, done)}
        finish = "stop"
    completion = json.dumps(message, sort_keys=True)
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:12]
    return {
        "id": f"scripted-{digest}",
        "object": "chat.completion",
        "created": 0,
        "model": SCRIPTED_MODEL,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {
            "prompt_tokens": _tokens(prompt),
            "completion_tokens": _tokens(completion),
            "total_tokens": _tokens(prompt) + _tokens(completion),
        },
    }


def _final_text(messages: list[dict[str, Any]], steps: int) -> str:
    users = [m for m in messages if m.get("role") == "user"]
    if steps:
        return f"Done: {steps} step(s) completed."
    text = str(users[-1].get("content") or "") if users else ""
    return f"Noted: {text[:200]}"
