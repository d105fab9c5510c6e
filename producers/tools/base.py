"""The tool contract: effect class, argument validation, execution, and optional lookup."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from convdb.producers.errors import EffectError, ToolArgumentError
from convdb.projections.settlement import LookupResult
from convdb.schemas._types import EffectClass


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces (what ActionEvent.arguments holds)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def intent_hash(tool_name: str, arguments: str) -> str:
    """sha256 of tool_name + canonical arguments (DESIGN §1)."""
    return hashlib.sha256((tool_name + arguments).encode()).hexdigest()


@dataclass(frozen=True)
class Operation:
    """One external side effect, as handed to a tool."""

    operation_id: str
    conversation_id: str
    tenant_id: str
    action_id: str
    tool_name: str
    arguments: dict[str, Any]
    attempt: int = 1


@dataclass(frozen=True)
class ToolResult:
    """What a tool reports back: text for the LLM and the provider's receipt, if any."""

    content: str
    provider_receipt: str | None = None
    is_error: bool = False


class ToolArgs(BaseModel):
    """Base of a tool's argument model: unknown arguments are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Tool(BaseModel):
    """A tool the agent may call. Subclasses set `name`, `effect_class`, `Args` and `execute`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: ClassVar[str]
    description: ClassVar[str]
    effect_class: ClassVar[EffectClass]
    Args: ClassVar[type[ToolArgs]]
    supports_lookup: ClassVar[bool] = False

    def parse(self, arguments: str) -> dict[str, Any]:
        """Validate the LLM's JSON arguments; raises `ToolArgumentError` with the reason."""
        try:
            raw = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(f"{self.name}: arguments are not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ToolArgumentError(f"{self.name}: arguments must be a JSON object")
        try:
            return self.Args.model_validate(raw).model_dump()
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ToolArgumentError(f"{self.name}: bad arguments: {problems}") from exc

    def spec(self) -> dict[str, Any]:
        """The OpenAI/litellm function spec offered to the LLM (built once per tool class)."""
        return _spec(type(self))

    def target(self, arguments: dict[str, Any]) -> str | None:  # noqa: ARG002 - per-tool override
        """What the effect touches, e.g. 'tracker:issues'."""
        return None

    def execute(self, operation: Operation) -> ToolResult:
        """Do the work. Raises `EffectError` (definite failure) or `OutcomeUnknownError`."""
        raise NotImplementedError

    def lookup(self, operation: Operation) -> ToolResult | None:
        """Ask the provider what happened: the result, None when provably not done.

        Raises `EffectError` (or `OutcomeUnknownError`) when the provider cannot tell.
        """
        raise NotImplementedError(f"{self.name} has no lookup")


def ask_provider(tool: Tool, operation: Operation) -> LookupResult:
    """`tool.lookup` as the answer the runtime's settle and the reconciler's resolvers share."""
    try:
        found = tool.lookup(operation)
    except EffectError as exc:
        return LookupResult(outcome="unknown", detail=str(exc))
    if found is None:
        return LookupResult(outcome="not_found", detail="(provider: no such key)")
    return LookupResult(outcome="found", provider_receipt=found.provider_receipt, result=found.content)


def find_tool(tools: tuple[Tool, ...], name: str) -> Tool:
    """The tool called `name`; raises `ToolArgumentError` for an unknown tool."""
    for tool in tools:
        if tool.name == name:
            return tool
    known = ", ".join(t.name for t in tools) or "none"
    raise ToolArgumentError(f"unknown tool {name!r} (tools: {known})")


@functools.cache
def _spec(tool: type[Tool]) -> dict[str, Any]:
    # The spec depends only on class attributes; building the JSON schema on every step cost
    # ~18% of the step overhead.
    schema = tool.Args.model_json_schema()
    schema.pop("title", None)
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": schema},
    }
