"""Side effects of LangGraph nodes, tasks and tools under convdb's effect protocol.

No checkpointer can stop a node from charging a card twice: it hears nothing until the node
returns, and a process killed between the provider call and `put_writes` re-runs the node on
resume. `@effect(...)` closes that window for the calls it wraps. Each call is an operation
`{thread_id}/{task_id}:{key}` (the task id is deterministic, so a re-run node meets the same
operation) whose ledger records go through the thread's fenced writer on the effects topic,
before and after the provider call, and are folded with convdb's operation machine:

- confirmed: the recorded result is returned, the provider is not called again;
- started with no outcome (the process died after the call, or the call was ambiguous): the
  provider's lookup, or a retry under the same idempotency key when the effect class allows it
  (`convdb.projections.settlement`), else EffectUnknown and LangGraph's own `interrupt()`; the
  graph resumes with `Command(resume={"decision": "confirmed" | "failed" | "retry", ...})`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from langgraph.config import get_config
from langgraph.types import interrupt

from convdb.producers.errors import EffectError, OutcomeUnknownError
from convdb.producers.graph_saver import ConvdbSaver, record_id
from convdb.producers.tools.base import canonical_json, intent_hash
from convdb.projections.operation import OperationState, OperationStatus
from convdb.projections.settlement import LookupResult, Step, next_step, settle
from convdb.schemas import (
    EffectConfirmed,
    EffectFailed,
    EffectProposed,
    EffectResolved,
    EffectStarted,
    EffectUnknown,
    LedgerRecord,
)
from convdb.schemas._types import EffectClass, LedgerOrigin, Resolution

P = ParamSpec("P")
R = TypeVar("R")

Lookup = Callable[[str], LookupResult]
"""Asks the provider about an idempotency key: found (with the result), not_found or unknown."""


class LedgerCall:
    """One operation of a thread (a wrapped call, or a hosted graph's interrupt): its saver, and
    the ledger records it writes."""

    def __init__(self, saver: ConvdbSaver, thread_id: str, operation_id: str, name: str) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.operation_id = operation_id
        self.name = name

    def _fields(self) -> dict[str, Any]:
        return {
            "id": record_id(),
            "operation_id": self.operation_id,
            "conversation_id": self.thread_id,
            "tenant_id": self.saver.tenant_of(self.thread_id),
            "timestamp": datetime.now(UTC),
        }

    def state(self) -> OperationState | None:
        return self.saver.operation(self.thread_id, self.operation_id)

    def commit(self, *records: LedgerRecord) -> OperationState:
        state = self.saver.commit_ledger(self.thread_id, list(records))
        assert state is not None  # the records were of this operation
        return state

    def proposed(self, effect_class: EffectClass, intent: str) -> EffectProposed:
        after = self.saver.settings.runtime.reconcile_after_s
        return EffectProposed(
            **self._fields(),
            action_id=self.operation_id.rpartition("/")[2],
            tool_name=self.name,
            intent_hash=intent,
            effect_class=effect_class,
            reconcile_after=datetime.now(UTC) + timedelta(seconds=after),
        )

    def started(self, attempt: int) -> EffectStarted:
        return EffectStarted(**self._fields(), attempt=attempt)

    def confirmed(self, result: str, origin: LedgerOrigin = "runner") -> EffectConfirmed:
        return EffectConfirmed(**self._fields(), result=result, origin=origin)

    def failed(self, error: str) -> EffectFailed:
        return EffectFailed(**self._fields(), error=error)

    def unknown(self, reason: str, evidence: str) -> EffectUnknown:
        return EffectUnknown(**self._fields(), reason=reason, evidence=evidence)

    def resolved(self, decision: Resolution, resolved_by: str, note: str) -> EffectResolved:
        return EffectResolved(**self._fields(), decision=decision, resolved_by=resolved_by, note=note)


def context_of(config: Mapping[str, Any], wrapper: str) -> tuple[ConvdbSaver, str, str]:
    """The saver, thread id and task id of the task a run's `config` belongs to; TypeError when
    the graph's checkpointer is not convdb's (`wrapper` names what needs it)."""
    configurable = config.get("configurable", {})
    saver = configurable.get("__pregel_checkpointer")
    if not isinstance(saver, ConvdbSaver):
        raise TypeError(f"{wrapper} runs in a graph compiled with checkpointer=ConvdbSaver(...)")
    return saver, configurable["thread_id"], configurable["__pregel_task_id"]


def _context() -> tuple[ConvdbSaver, str, str]:
    """The saver, thread id and task id of the node this call runs in."""
    return context_of(get_config(), "@convdb.langgraph.effect")


def effect(
    effect_class: EffectClass, *, name: str | None = None, lookup: Lookup | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run a provider call at most once per operation (see the module doc).

    The wrapped function gets `idempotency_key=` (the operation id) to pass to its provider, and
    returns a JSON value (the recorded result). The operation's key within its task is the call's
    `key=` keyword (a tool call id), else the function's name and arguments.
    """

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        tool_name = name or fn.__name__

        @functools.wraps(fn)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            key = kwargs.pop("key", None)
            arguments = canonical_json({"args": list(args), "kwargs": kwargs})
            intent = intent_hash(tool_name, arguments)
            saver, thread_id, task_id = _context()
            operation_id = f"{thread_id}/{task_id}:{key or f'{tool_name}-{intent[:16]}'}"
            run = LedgerCall(saver, thread_id, operation_id, tool_name)

            def provider() -> R:
                return fn(*args, **{**kwargs, "idempotency_key": operation_id})  # type: ignore[arg-type]

            return _run(run, effect_class, intent, provider, lookup)

        return call

    return wrap


def _run(
    run: LedgerCall, effect_class: EffectClass, intent: str, provider: Callable[[], R], lookup: Lookup | None
) -> R:
    state = run.state()
    step = next_step(state)
    if step is Step.EXECUTE:
        records: list[LedgerRecord] = [] if state is not None else [run.proposed(effect_class, intent)]
        return _attempt(run, (state.attempt if state else 0) + 1, provider, lookup, records)
    assert state is not None  # only a known operation is not executed afresh
    if step is Step.BACKFILL:
        return _recorded(state)  # type: ignore[no-any-return]
    if step is Step.SETTLE:
        return _settle(run, state, provider, lookup, "the call was started and its outcome never recorded")
    return _ask_human(run, state, provider, lookup)


def _attempt(
    run: LedgerCall,
    attempt: int,
    provider: Callable[[], R],
    lookup: Lookup | None,
    before: list[LedgerRecord],
) -> R:
    run.commit(*before, run.started(attempt))  # durable before the provider is called
    try:
        result = provider()
    except OutcomeUnknownError as exc:
        state = run.state()
        return _settle(run, state, provider, lookup, str(exc))  # type: ignore[arg-type]
    except EffectError as exc:
        run.commit(run.failed(str(exc)))
        raise
    run.commit(run.confirmed(json.dumps(result)))
    return result


def _recorded(state: OperationState) -> Any:
    if state.status is OperationStatus.FAILED:
        raise EffectError(f"operation {state.operation_id} failed: {state.error}")
    return json.loads(state.result) if state.result else None


def _settle(
    run: LedgerCall, state: OperationState, provider: Callable[[], R], lookup: Lookup | None, reason: str
) -> R:
    answer = lookup(run.operation_id) if lookup is not None else None
    verdict = settle(state, answer)
    if verdict.action == "confirm":
        return _recorded(run.commit(run.confirmed(verdict.result, origin="lookup")))  # type: ignore[no-any-return]
    if verdict.action == "retry":
        return _attempt(run, state.attempt + 1, provider, lookup, [])
    run.commit(run.unknown(reason, verdict.detail))
    return _ask_human(run, run.state(), provider, lookup)  # type: ignore[arg-type]


def _ask_human(run: LedgerCall, state: OperationState, provider: Callable[[], R], lookup: Lookup | None) -> R:
    """LangGraph's `interrupt()`: the first time it stops the graph; on resume it returns the decision."""
    answer = interrupt(
        {
            "kind": "effect_unknown",
            "operation_id": run.operation_id,
            "tool_name": run.name,
            "reason": state.reason,
            "evidence": state.evidence,
            "decide": "Command(resume={'decision': 'confirmed', 'failed' or 'retry', 'result': ...})",
        }
    )
    if not isinstance(answer, dict) or answer.get("decision") not in ("confirmed", "failed", "retry"):
        raise ValueError(
            f"resume {run.operation_id} with {{'decision': 'confirmed'|'failed'|'retry'}}, got {answer!r}"
        )
    decision: Resolution = answer["decision"]
    by, note = str(answer.get("by", "human")), str(answer.get("note", ""))
    resolved = run.resolved(decision, by, note)
    if decision == "confirmed":  # the outcome first: it carries the result, the resolution says who
        return _recorded(run.commit(run.confirmed(json.dumps(answer.get("result")), "human"), resolved))  # type: ignore[no-any-return]
    if decision == "failed":
        return _recorded(run.commit(run.failed(note or "a human decided it failed"), resolved))  # type: ignore[no-any-return]
    return _attempt(run, state.attempt + 1, provider, lookup, [resolved])
