"""The real OpenHands, driven offline for convdb's tests: run in the OpenHands venv, never in convdb's.

    python oh_driver.py write DIR            SDK conversations (messages, parallel tool calls, an
                                             error, a rejection, a condensation, a paused one, a
                                             fork and a branch) persisted under DIR
    python oh_driver.py load DIR...          load conversation directories with the real SDK and
                                             print what it sees (JSON)
    python oh_driver.py serve SPEC.json      an agent-server ConversationService streaming webhooks
                                             (SPEC: url, headers, dir, title) and print its result

LLM calls go to scripted `litellm` ModelResponses (no network); the SDK's own telemetry then
records tokens and cost as with a real provider.
"""

from __future__ import annotations

import oh311shim

oh311shim.install(stub_packages=("openhands.tools", "openhands.tools.terminal"))

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402
from collections import deque  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import litellm  # noqa: E402
from litellm.types.utils import (  # noqa: E402
    ChatCompletionMessageToolCall,
    Choices,
    Function,
    ModelResponse,
    Usage,
)
from litellm.types.utils import Message as LiteLLMMessage  # noqa: E402

SCRIPT: deque[ModelResponse] = deque()


def reply(content: str | None = None, calls: list[tuple[str, dict[str, Any]]] | None = None) -> ModelResponse:
    """One scripted LLM answer: text and/or tool calls, with usage."""
    n = len(SCRIPT) + 1 + sum(1 for _ in range(0))
    rid = f"resp-{uuid.uuid4().hex[:8]}"
    tool_calls = [
        ChatCompletionMessageToolCall(
            id=f"call-{uuid.uuid4().hex[:8]}",
            type="function",
            function=Function(name=name, arguments=json.dumps(args)),
        )
        for name, args in calls or []
    ]
    message = LiteLLMMessage(role="assistant", content=content, tool_calls=tool_calls or None)
    return ModelResponse(
        id=rid,
        model="gpt-4o-mini",
        choices=[Choices(index=0, finish_reason="tool_calls" if tool_calls else "stop", message=message)],
        usage=Usage(prompt_tokens=100 + 7 * n, completion_tokens=10 + n, total_tokens=110 + 8 * n),
    )


def _next(*_args: Any, **_kwargs: Any) -> ModelResponse:
    if not SCRIPT:
        raise RuntimeError("the scripted LLM has no answer left")
    return SCRIPT.popleft()


async def _anext(*args: Any, **kwargs: Any) -> ModelResponse:
    return _next(*args, **kwargs)


litellm.completion = _next
litellm.acompletion = _anext

from openhands.sdk import LLM, Agent, Conversation, Tool  # noqa: E402
from openhands.sdk.context.condenser import LLMSummarizingCondenser  # noqa: E402
from openhands.sdk.conversation.state import ConversationState  # noqa: E402
from openhands.sdk.security.confirmation_policy import AlwaysConfirm  # noqa: E402
from openhands.sdk.workspace import LocalWorkspace  # noqa: E402
from openhands.tools.glob import GlobTool  # noqa: E402, F401  (registers the tool)
from openhands.tools.task_tracker import TaskTrackerTool  # noqa: E402, F401  (registers the tool)


def _llm(usage_id: str = "agent") -> LLM:
    return LLM(model="gpt-4o-mini", api_key="sk-offline", usage_id=usage_id)


def _agent(condenser: bool = False) -> Agent:
    extra: dict[str, Any] = {}
    if condenser:
        extra["condenser"] = LLMSummarizingCondenser(llm=_llm("condenser"), max_size=100, keep_first=2)
    return Agent(llm=_llm(), tools=[Tool(name="glob"), Tool(name="task_tracker")], **extra)


def _conversation(root: Path, workspace: Path, **kwargs: Any) -> Any:
    return Conversation(
        agent=_agent(**kwargs), workspace=str(workspace), persistence_dir=str(root), visualizer=None
    )


def _main(root: Path, workspace: Path) -> Any:
    """Messages, parallel tool calls, a tool error (unknown tool), a condensation, finish."""
    conv = _conversation(root, workspace, condenser=True)
    plan = {"command": "plan", "task_list": [{"title": "read", "status": "todo"}]}
    SCRIPT.extend(
        [
            reply("Let me look around.", [("glob", {"pattern": "*.txt"}), ("task_tracker", plan)]),
            reply(None, [("no_such_tool", {"x": 1})]),
            reply("The notes say hello."),
        ]
    )
    conv.send_message("What do the notes say?")
    conv.run()
    SCRIPT.extend([reply("Summary: the user asked about notes; they say hello.")])
    conv.condense()
    SCRIPT.extend([reply(None, [("finish", {"message": "Done: the notes say hello."})])])
    conv.send_message("Thanks, finish up.")
    conv.run()
    return conv


def _fork_and_branch(conv: Any) -> Any:
    """A fork of `conv` continued on its own; then a branch inside `conv` (navigate back, new message)."""
    fork = conv.fork()
    SCRIPT.extend([reply("Forked and still here.")])
    fork.send_message("Are you the fork?")
    fork.run()
    first_user = next(e for e in conv.state.events if type(e).__name__ == "MessageEvent")
    conv.navigate_to(first_user.id)
    SCRIPT.extend([reply("Taking another branch.")])
    conv.send_message("Try another way.")
    conv.run()
    return fork


def _paused(root: Path, workspace: Path) -> Any:
    """Confirmation mode: an action rejected by the user, then paused."""
    paused = _conversation(root, workspace)
    paused.set_confirmation_policy(AlwaysConfirm())
    SCRIPT.extend([reply("I will list files.", [("glob", {"pattern": "**/*"})])])
    paused.send_message("List everything.")
    paused.run()
    paused.reject_pending_actions("Not now.")
    paused.pause()
    return paused


def write(root: Path) -> dict[str, Any]:
    """SDK-written conversations covering every kind the bridge maps; their ids by scenario."""
    workspace = root.parent / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.txt").write_text("hello\n")
    main = _main(root, workspace)
    fork = _fork_and_branch(main)
    paused = _paused(root, workspace)
    return {"main": str(main.id), "fork": str(fork.id), "paused": str(paused.id)}


def _dumped(event: Any) -> dict[str, Any]:
    """An event as JSON; sets (Condensation.forgotten_event_ids) sorted, their order is the process's hash."""
    data = event.model_dump(mode="json")
    if isinstance(data.get("forgotten_event_ids"), list):
        data["forgotten_event_ids"] = sorted(data["forgotten_event_ids"])
    return data


def load(path: Path) -> dict[str, Any]:
    """What the real SDK reads from a conversation directory."""
    base = json.loads((path / "base_state.json").read_text())
    state = ConversationState.create(
        id=uuid.UUID(base["id"]),
        agent=None,
        workspace=LocalWorkspace(working_dir=str(path)),
        persistence_dir=str(path),
    )
    metrics = state.stats.usage_to_metrics
    return {
        "id": str(state.id),
        "execution_status": state.execution_status.value,
        "leaf": state.leaf_event_id,
        "tags": dict(state.tags),
        "events": [_dumped(e) for e in state.events],
        "view": [e.id for e in state.view.events],
        "usage": {
            k: {
                "prompt_tokens": m.accumulated_token_usage.prompt_tokens if m.accumulated_token_usage else 0,
                "completion_tokens": m.accumulated_token_usage.completion_tokens
                if m.accumulated_token_usage
                else 0,
                "cost": m.accumulated_cost,
            }
            for k, m in metrics.items()
        },
    }


def main(argv: list[str]) -> int:
    """Dispatch one command; prints one JSON document on stdout."""
    command, args = argv[0], argv[1:]
    if command == "write":
        out: Any = write(Path(args[0]))
    elif command == "load":
        out = [load(Path(a)) for a in args]
    elif command == "serve":
        from oh_server import serve

        out = asyncio.run(serve(json.loads(Path(args[0]).read_text()), SCRIPT, reply))
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
