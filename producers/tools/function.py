"""Tools written as plain functions: `@convdb.tool(effect=..., lookup=..., receipt=...)`.

The decorator builds a `Tool` subclass (the one tool contract, `tools.base`) around the function:
its argument model is the function's pydantic model parameter, or is inferred from its type
hints; the effect protocol runs it like any built-in tool (ledger brackets, settle, lookup).
"""

from __future__ import annotations

import inspect
import json
import re
import threading
from collections.abc import Callable
from typing import Any, ClassVar, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from convdb.producers.errors import EffectError, OutcomeUnknownError
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from convdb.schemas._types import EffectClass

EFFECT_CLASSES: tuple[EffectClass, ...] = ("read_only", "idempotent", "keyed", "irreversible")
"""The effect classes a tool declares (DESIGN §6): what the runtime may do after a crash.

- read_only: no side effect; re-run freely.
- idempotent: doing it twice leaves the state doing it once leaves (set-to-state); retried.
- keyed: the provider deduplicates by the operation id the tool sends as idempotency key;
  retried with the same key.
- irreversible: neither; after a crash between call and answer the lookup decides, or a human.
"""

DEFAULT_TIMEOUT_S = 60.0
"""How long a function tool may run before its outcome counts as unknown."""


class FunctionTool(Tool):
    """A tool made by `convdb.tool` from a function (see `tool`)."""

    func: ClassVar[Callable[..., Any]]
    lookup_func: ClassVar[Callable[..., Any] | None] = None
    receipt_func: ClassVar[Callable[[Any], str | None] | None] = None
    target_func: ClassVar[Callable[[dict[str, Any]], str | None] | None] = None
    model_param: ClassVar[str | None] = None
    """The function's parameter that takes the whole argument model (None: one per field)."""
    takes_operation: ClassVar[bool] = False
    timeout_s: ClassVar[float] = DEFAULT_TIMEOUT_S

    def target(self, arguments: dict[str, Any]) -> str | None:
        """What the effect touches (the decorator's `target`)."""
        describe = type(self).target_func
        return describe(arguments) if describe is not None else None

    def execute(self, operation: Operation) -> ToolResult:
        """Call the function with the validated arguments; its return value becomes the result.

        A function that runs past `timeout_s` leaves its outcome unknown (`OutcomeUnknownError`;
        for a read-only tool, an error result): the runtime settles it like a dropped connection.
        """
        cls = type(self)
        args = self.Args.model_validate(operation.arguments)
        if cls.model_param is not None:
            kwargs: dict[str, Any] = {cls.model_param: args}
        else:
            kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if cls.takes_operation:
            kwargs["operation"] = operation
        value = _call_with_timeout(cls.func, kwargs, cls.timeout_s, f"{self.name} {operation.operation_id}")
        return self._result(value)

    def lookup(self, operation: Operation) -> ToolResult | None:
        """The decorator's `lookup`: the value the function returned, None when provably not done."""
        finder = type(self).lookup_func
        if finder is None:
            return super().lookup(operation)
        found = _call_with_timeout(
            _lookup_caller(finder), {"operation": operation}, type(self).timeout_s, f"lookup {self.name}"
        )
        return None if found is None else self._result(found)

    def _result(self, value: Any) -> ToolResult:
        if isinstance(value, ToolResult):
            return value
        extract = type(self).receipt_func
        receipt = extract(value) if extract is not None else None
        content = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        return ToolResult(content, provider_receipt=None if receipt is None else str(receipt))


def _lookup_caller(finder: Callable[..., Any]) -> Callable[..., Any]:
    """`finder` called with the operation id (its first parameter is named `operation_id` or typed
    `str`) or with the `Operation`."""
    params = list(inspect.signature(finder).parameters.values())
    if params and (params[0].name == "operation_id" or params[0].annotation in (str, "str")):
        return lambda operation: finder(operation.operation_id)
    return lambda operation: finder(operation)


def _call_with_timeout(func: Callable[..., Any], kwargs: dict[str, Any], timeout: float, what: str) -> Any:
    """`func(**kwargs)` on a daemon thread; `OutcomeUnknownError` when it does not return in time."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = func(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"tool {what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        # The call may still act on the provider: its outcome is unknown, never "failed".
        raise OutcomeUnknownError(f"{what}: no answer within {timeout:g}s (the call may still be running)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _args_model(func: Callable[..., Any], tool_name: str) -> tuple[type[BaseModel], str | None]:
    """The argument model: the function's one pydantic-model parameter, or one built from its hints."""
    hints = get_type_hints(func)
    params = [p for p in inspect.signature(func).parameters.values() if p.name != "operation"]
    for p in params:
        hint = hints.get(p.name)
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            if len(params) != 1:
                raise TypeError(f"tool {tool_name}: a model parameter must be the only argument")
            return hint, p.name
    fields: dict[str, Any] = {}
    for p in params:
        if p.name not in hints:
            raise TypeError(f"tool {tool_name}: parameter {p.name!r} has no type hint")
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name}: *args/**kwargs cannot be offered to an LLM")
        fields[p.name] = (hints[p.name], ... if p.default is p.empty else p.default)
    name = "".join(part.title() for part in re.split(r"[^0-9A-Za-z]+", tool_name)) + "Args"
    model = create_model(name, __base__=ToolArgs, **fields)
    return model, None


def tool(
    func: Callable[..., Any] | None = None,
    *,
    effect: EffectClass = "read_only",
    name: str | None = None,
    description: str | None = None,
    lookup: Callable[..., Any] | None = None,
    receipt: Callable[[Any], str | None] | None = None,
    target: Callable[[dict[str, Any]], str | None] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """Make a `Tool` of a function (usable bare, `@tool`, or with options, `@tool(effect=...)`).

    The function's parameters are the tool's arguments: one parameter typed with a pydantic
    model (that model validates the LLM's arguments), or plain typed parameters (a model is
    built from their hints; defaults make them optional). A parameter named `operation` is
    not offered to the LLM: it receives the `Operation` (its `operation_id` is the key a
    `keyed` tool sends to the provider as idempotency key).

    Returns a `Tool` instance: put it in `Agent(tools=...)`.

    Args:
        effect: the effect class, one of `EFFECT_CLASSES`.
        name: the tool's name for the LLM (default: the function's name).
        description: shown to the LLM (default: the docstring's first paragraph).
        lookup: asks the provider whether an operation happened: called with the operation id
            (when its first parameter is named `operation_id` or typed `str`) or the `Operation`; returns
            what the function would have returned, None when provably not done, and raises
            `EffectError` when the provider cannot tell.
        receipt: the provider's receipt (e.g. a charge id) from the function's return value.
        target: what the effect touches, from the arguments (shown in the ledger and console).
        timeout_s: a call running longer leaves its outcome unknown (settled by lookup or a human).

    The function raises `EffectError` for a definite failure (the LLM sees it),
    `OutcomeUnknownError` when the provider may or may not have acted, and returns a str, a
    JSON-able value or a `ToolResult`.
    """
    if effect not in EFFECT_CLASSES:
        raise ValueError(f"effect must be one of {', '.join(EFFECT_CLASSES)}, not {effect!r}")
    if effect != "read_only" and timeout_s <= 0:
        raise ValueError("timeout_s must be > 0")

    def wrap(fn: Callable[..., Any]) -> Tool:
        tool_name = name or fn.__name__
        args, model_param = _args_model(fn, tool_name)
        doc = inspect.getdoc(fn) or tool_name
        takes_op = "operation" in inspect.signature(fn).parameters
        attrs: dict[str, Any] = {
            "__module__": fn.__module__,
            "__doc__": doc,
            "name": tool_name,
            "description": description or doc.split("\n\n")[0].replace("\n", " "),
            "effect_class": effect,
            "Args": args,
            "supports_lookup": lookup is not None,
            "func": staticmethod(fn),
            "lookup_func": None if lookup is None else staticmethod(lookup),
            "receipt_func": None if receipt is None else staticmethod(receipt),
            "target_func": None if target is None else staticmethod(target),
            "model_param": model_param,
            "takes_operation": takes_op,
            "timeout_s": timeout_s,
            "model_config": ConfigDict(frozen=True, extra="forbid"),
        }
        cls: type[FunctionTool] = type(f"{args.__name__.removesuffix('Args')}Tool", (FunctionTool,), attrs)
        return cls()

    return wrap(func) if func is not None else wrap


__all__ = ["EFFECT_CLASSES", "EffectError", "FunctionTool", "OutcomeUnknownError", "tool"]
