"""Tool calls of LangGraph's `ToolNode` (and `create_agent`) under convdb's effect protocol.

`ToolEffects` is a `wrap_tool_call` / `awrap_tool_call` for `ToolNode(tools, ...)`: each tool call
it covers is the operation `{thread_id}/{task_id}:{tool_call_id}` (LangGraph's task ids are
deterministic, and the tool call id is the model's, saved in the checkpoint before the ToolNode
ran), run by the same protocol as `@effect` (`convdb.producers.graph_effects._run`): a re-executed
ToolNode after a crash gets the recorded `ToolMessage` (or `Command`) instead of running the tool
again; a call started without a recorded outcome is settled by the tool's lookup, retried when its
effect class allows it, or put to a human with LangGraph's `interrupt()`. While a covered tool
runs, `idempotency_key()` is its operation id, to pass to the provider.

The recorded result is the tool's answer as JSON: a `ToolMessage` as `message_to_dict` gives it, a
`Command` by the saver's serializer (base64); a lookup's or a human's result (any JSON) becomes the
content of a `ToolMessage` for the call. A `ToolMessage` with status "error" (a tool error that
`ToolNode` turned into a message) is recorded as failed and replayed as that error message.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from langchain_core.messages import ToolMessage, message_to_dict, messages_from_dict
from langgraph.types import Command

from convdb.producers.errors import EffectError
from convdb.producers.graph_effects import LedgerCall, Lookup, _run, context_of
from convdb.producers.graph_saver import ConvdbSaver
from convdb.producers.tools.base import canonical_json, intent_hash
from convdb.schemas._types import EffectClass

if TYPE_CHECKING:
    from langgraph.prebuilt.tool_node import ToolCallRequest

ToolResult = ToolMessage | Command  # type: ignore[type-arg]
Execute = Callable[["ToolCallRequest"], ToolResult]
AsyncExecute = Callable[["ToolCallRequest"], Awaitable[ToolResult]]
Lookups = Mapping[str, Lookup] | Callable[[str], Lookup | None]
"""A tool's lookup by its name: a mapping, or a function (None: the tool has none)."""

_KEY: ContextVar[str | None] = ContextVar("convdb_tool_idempotency_key", default=None)
COMMAND = "convdb.command"
"""The recorded result of a tool that returned a `Command`: `{COMMAND: [serde type, base64 bytes]}`."""


def idempotency_key() -> str:
    """The operation id of the covered tool call running now: pass it to the provider."""
    key = _KEY.get()
    if key is None:
        raise RuntimeError("idempotency_key() is asked for outside a tool call covered by ToolEffects")
    return key


class _ToolFailed(EffectError):
    """The tool answered with an error ToolMessage: the operation failed with that content."""


class ToolEffects:
    """`wrap_tool_call` and `awrap_tool_call` for `ToolNode` (see the module doc).

    `effects` is one effect class for every tool, or a mapping from tool name to its class (tools
    not named, and `read_only` ones, run as before, outside the protocol). `lookup` gives a tool's
    provider lookup by name.
    """

    def __init__(
        self, effects: EffectClass | Mapping[str, EffectClass], lookup: Lookups | None = None
    ) -> None:
        self.effects = effects
        self.lookup = lookup

    def effect_class(self, tool_name: str) -> EffectClass | None:
        """The tool's effect class, None when its calls are not covered."""
        found = self.effects if isinstance(self.effects, str) else self.effects.get(tool_name)
        return None if found in (None, "read_only") else found

    def lookup_of(self, tool_name: str) -> Lookup | None:
        if self.lookup is None:
            return None
        if isinstance(self.lookup, Mapping):
            return self.lookup.get(tool_name)
        return self.lookup(tool_name)

    def wrap_tool_call(self, request: ToolCallRequest, execute: Execute) -> ToolResult:
        """Run the call under the protocol: once, or its recorded answer."""
        call = request.tool_call
        effect_class = self.effect_class(call["name"])
        if effect_class is None:
            return execute(request)
        saver, thread_id, task_id = _context(request)
        operation_id = f"{thread_id}/{task_id}:{call['id']}"
        run = LedgerCall(saver, thread_id, operation_id, call["name"])
        intent = intent_hash(call["name"], canonical_json(call["args"]))

        def provider() -> Any:
            with _keyed(operation_id):
                return _encode(saver, execute(request))

        try:
            recorded = _run(run, effect_class, intent, provider, self.lookup_of(call["name"]))
        except EffectError as exc:
            state = run.state()
            error = state.error if state is not None and state.error else str(exc)
            return ToolMessage(content=error, name=call["name"], tool_call_id=call["id"], status="error")
        return _decode(saver, recorded, call)

    async def awrap_tool_call(self, request: ToolCallRequest, execute: AsyncExecute) -> ToolResult:
        """The async variant: the protocol (its ledger commits block) runs on a worker thread, the
        tool itself on this event loop."""
        loop = asyncio.get_running_loop()

        def run_on_loop(req: ToolCallRequest) -> ToolResult:
            return asyncio.run_coroutine_threadsafe(execute(req), loop).result()  # type: ignore[arg-type]

        return await asyncio.to_thread(self.wrap_tool_call, request, run_on_loop)


def _context(request: ToolCallRequest) -> tuple[ConvdbSaver, str, str]:
    """The saver, thread id and task id of the ToolNode task this call runs in."""
    return context_of(request.runtime.config or {}, "convdb.langgraph.ToolEffects")


@contextmanager
def _keyed(operation_id: str) -> Iterator[None]:
    token = _KEY.set(operation_id)
    try:
        yield
    finally:
        _KEY.reset(token)


def _encode(saver: ConvdbSaver, result: ToolResult) -> Any:
    """The tool's answer as the JSON value recorded on the ledger (an error message: failed)."""
    if isinstance(result, ToolMessage):
        if result.status == "error":
            raise _ToolFailed(str(result.content))
        return message_to_dict(result)
    if isinstance(result, Command):
        kind, data = saver.serde.dumps_typed(result)
        return {COMMAND: [kind, base64.b64encode(data).decode()]}
    raise TypeError(f"a tool call's answer is a ToolMessage or a Command, not {type(result).__name__}")


def _decode(saver: ConvdbSaver, recorded: Any, call: Mapping[str, Any]) -> ToolResult:
    """The tool's answer from its recorded JSON; a lookup's or a human's result becomes a
    ToolMessage's content."""
    if (
        isinstance(recorded, dict)
        and recorded.get("type") == "tool"
        and isinstance(recorded.get("data"), dict)
    ):
        (message,) = messages_from_dict([recorded])
        return message  # type: ignore[return-value]
    if isinstance(recorded, dict) and isinstance(recorded.get(COMMAND), list):
        kind, data = recorded[COMMAND]
        return saver.serde.loads_typed((kind, base64.b64decode(data)))  # type: ignore[no-any-return]
    if recorded is None:
        content = "done (confirmed without a recorded result)"
    else:
        content = recorded if isinstance(recorded, str) else json.dumps(recorded)
    return ToolMessage(content=content, name=call["name"], tool_call_id=call["id"])
