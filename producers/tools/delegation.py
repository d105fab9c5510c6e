"""The delegation tools: `task` (one child conversation, the parent waits for it) and `delegate`
(several children at once; the parent waits for all, the first K, or a deadline); and `report`,
with which a child states its result explicitly (its parent's observation takes it instead of the
child's last assistant message).

A child is a conversation of its own. These tools never run in the tool's `execute`: starting
children, collecting their reports and writing the parent's one observation is the effect
protocol's (`convdb.producers.delegation`), because it writes through the parent's transactions.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from convdb.producers.agent import Agent
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from convdb.schemas._types import EffectClass

CALL_TARGET = "convdb:children"
"""What a delegation call's effect touches: child conversations (their ids are fixed once it is proposed)."""


class ChildTask(ToolArgs):
    """One child: what it is asked, by which agent, with how much of the parent's budget."""

    message: str = Field(min_length=1, description="The child's first user message (its task).")
    agent: str | None = Field(
        None, description="An installed agent's name for the child; default: the parent's agent."
    )
    budget_usd: float | None = Field(
        None, ge=0, description="The child's budget (USD); default: a share of what is left of the parent's."
    )


class TaskArgs(ChildTask):
    """`task`: one child; the parent waits until it ends (or until `deadline_s`)."""

    deadline_s: float | None = Field(None, gt=0, description="Stop waiting after this many seconds.")


class DelegateArgs(ToolArgs):
    """`delegate`: several children at once."""

    tasks: list[ChildTask] = Field(min_length=1, description="The children to start, in order.")
    wait_for: int | None = Field(
        None, ge=1, description="Observe once this many children ended (default: all of them)."
    )
    deadline_s: float | None = Field(
        None, gt=0, description="Observe after this many seconds, whatever has ended by then."
    )

    @model_validator(mode="after")
    def _wait_within_tasks(self) -> DelegateArgs:
        if self.wait_for is not None and self.wait_for > len(self.tasks):
            raise ValueError(f"wait_for ({self.wait_for}) is more than the {len(self.tasks)} task(s)")
        return self


class DelegationTool(Tool):
    """A tool whose effect is starting child conversations (the child's first inbox record is keyed by
    the parent's operation id, so the effect is `keyed`)."""

    effect_class: ClassVar = "keyed"

    def children(self, args: dict[str, Any]) -> list[ChildTask]:
        """The children the call asks for, in order."""
        raise NotImplementedError

    def wait_for(self, args: dict[str, Any]) -> int:
        """How many children must have ended before the parent observes (without a deadline)."""
        return int(args.get("wait_for") or len(self.children(args)))

    def deadline_s(self, args: dict[str, Any]) -> float | None:
        """Seconds after the call at which the parent observes whatever has ended."""
        value = args.get("deadline_s")
        return float(value) if value is not None else None

    def target(self, arguments: dict[str, Any]) -> str | None:  # noqa: ARG002 - the interface's
        """Child conversations (their ids are fixed by the operation id, known only once proposed)."""
        return CALL_TARGET

    def execute(self, operation: Operation) -> ToolResult:
        """Never called: the effect protocol starts children itself (`convdb.producers.delegation`)."""
        raise NotImplementedError(f"{self.name}: children are started by the effect protocol")


class TaskTool(DelegationTool):
    """Hand one task to a child conversation and wait for its result."""

    name: ClassVar[str] = "task"
    description: ClassVar[str] = (
        "Hand a task to a sub-agent (a child conversation) and wait for its result. "
        "Returns the child's outcome and its last answer."
    )
    Args: ClassVar[type[ToolArgs]] = TaskArgs

    def children(self, args: dict[str, Any]) -> list[ChildTask]:
        """The one child."""
        return [
            ChildTask(message=args["message"], agent=args.get("agent"), budget_usd=args.get("budget_usd"))
        ]


class DelegateTool(DelegationTool):
    """Hand several tasks to child conversations at once and fold their results back."""

    name: ClassVar[str] = "delegate"
    description: ClassVar[str] = (
        "Hand several tasks to sub-agents (child conversations) that work at the same time. Waits for "
        "all of them, the first `wait_for`, or `deadline_s` seconds; returns each child's outcome and "
        "last answer."
    )
    Args: ClassVar[type[ToolArgs]] = DelegateArgs

    def children(self, args: dict[str, Any]) -> list[ChildTask]:
        """The children, in order."""
        return [ChildTask.model_validate(task) for task in args["tasks"]]


class ReportArgs(ToolArgs):
    """`report`: the result this conversation hands back to the one that delegated to it."""

    result: str = Field(min_length=1, description="The result, as the parent should read it.")


class ReportTool(Tool):
    """State the result of a delegated task explicitly: when this conversation ends, its parent's
    observation carries the last result reported (`convdb.producers.delegation.summary_of`), not
    the last assistant message. Only records: it touches nothing outside the log."""

    name: ClassVar[str] = "report"
    description: ClassVar[str] = (
        "Report the result of the task you were given (when you are a sub-agent): the conversation "
        "that delegated it reads this result instead of your last message."
    )
    effect_class: ClassVar[EffectClass] = "read_only"
    Args: ClassVar[type[ToolArgs]] = ReportArgs

    def execute(self, operation: Operation) -> ToolResult:
        """Nothing to do but acknowledge: the action in the log is the report."""
        return ToolResult(f"reported ({len(operation.arguments['result'])} characters)")


REPORT = ReportTool.name
"""The tool name whose last call is a child's explicit result."""


def delegation_tools() -> tuple[Tool, ...]:
    """`task`, `delegate` and `report`, to add to an agent's tools."""
    return (TaskTool(), DelegateTool(), ReportTool())


def with_delegation(agent: Agent) -> Agent:
    """`agent` with `task`, `delegate` and `report` added to its tools (the built-in `delegator` agent is
    `with_delegation` of the built-in one)."""
    return agent.model_copy(update={"tools": (*agent.tools, *delegation_tools())})
