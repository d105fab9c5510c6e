"""The public tool and agent API (`convdb.tool`, `convdb.Tool`, `convdb.Agent`): unit tests, and a
read-only tool past its timeout in a conversation on the real broker."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, Field

import convdb
from convdb import Agent, EffectError, Operation, OutcomeUnknownError, Tool, ToolArgs, ToolResult, tool
from convdb.infra.settings import Settings
from convdb.schemas import ObservationEvent
from tests.producers._support import direct, events, standalone

CHARGES: dict[str, dict[str, Any]] = {}


class ChargeArgs(BaseModel):
    customer: str = Field(description="Who pays.")
    cents: int = Field(gt=0, description="How much.")


def find_charge(operation_id: str) -> dict[str, Any] | None:
    return CHARGES.get(operation_id)


@tool(effect="keyed", lookup=find_charge, receipt=lambda charge: charge["id"], target=lambda _: "pay")
def charge(args: ChargeArgs, operation: Operation) -> dict[str, Any]:
    """Charge a customer.

    The operation id is the idempotency key."""
    return CHARGES.setdefault(operation.operation_id, {"id": f"ch-{len(CHARGES) + 1}", "cents": args.cents})


@tool
def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    return a + b


def op(name: str, arguments: dict[str, Any], oid: str = "c/a1") -> Operation:
    return Operation(oid, "c", "t", oid.split("/")[-1], name, arguments)


def test_decorated_function_is_a_tool_with_model_effect_lookup_and_receipt() -> None:
    assert isinstance(charge, Tool)
    assert (charge.name, charge.effect_class, charge.supports_lookup) == ("charge", "keyed", True)
    spec = charge.spec()["function"]
    assert spec["description"] == "Charge a customer."
    assert spec["parameters"]["properties"]["cents"]["description"] == "How much."
    assert "operation" not in spec["parameters"]["properties"]
    result = charge.execute(op("charge", {"customer": "ann", "cents": 5}))
    assert result.provider_receipt == "ch-1" and '"cents": 5' in result.content
    # lookup by operation id: found (the same result), or None when provably not done.
    assert charge.lookup(op("charge", {})) == result
    assert charge.lookup(op("charge", {}, "c/other")) is None
    assert charge.target({}) == "pay"


def test_type_hints_make_the_argument_model_and_it_rejects_bad_arguments() -> None:
    assert (add.effect_class, add.supports_lookup) == ("read_only", False)
    assert add.execute(op("add", add.parse('{"a": 1}'))).content == "3"
    with pytest.raises(convdb.ToolArgumentError, match="a: Input should be a valid integer"):
        add.parse('{"a": "x"}')
    with pytest.raises(convdb.ToolArgumentError, match="c: Extra inputs are not permitted"):
        add.parse('{"a": 1, "c": 2}')
    with pytest.raises(convdb.ToolArgumentError, match="cents: Input should be greater than 0"):
        charge.parse('{"customer": "x", "cents": 0}')


def test_a_tool_past_its_timeout_has_an_unknown_outcome() -> None:
    release = threading.Event()

    @tool(effect="irreversible", timeout_s=0.2)
    def page(who: str) -> str:
        """Page someone."""
        release.wait(10)
        return who

    started = time.monotonic()
    with pytest.raises(OutcomeUnknownError, match="no answer within 0.2s"):
        page.execute(op("page", {"who": "ops"}))
    assert time.monotonic() - started < 5
    release.set()


def test_errors_the_function_raises_reach_the_runtime_unchanged() -> None:
    @tool(effect="idempotent")
    def fail(kind: str) -> str:
        """Fail."""
        raise (EffectError if kind == "definite" else OutcomeUnknownError)(kind)

    with pytest.raises(EffectError) as definite:
        fail.execute(op("fail", {"kind": "definite"}))
    assert not isinstance(definite.value, OutcomeUnknownError)
    with pytest.raises(OutcomeUnknownError):
        fail.execute(op("fail", {"kind": "maybe"}))


def test_bad_declarations_are_refused_when_the_tool_is_made() -> None:
    with pytest.raises(ValueError, match="effect must be one of"):
        tool(effect="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="has no type hint"):

        @tool
        def untyped(x):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
            return x


class EchoArgs(ToolArgs):
    text: str


class EchoTool(Tool):
    """The class form: class variables and `execute`."""

    name: ClassVar[str] = "echo"
    description: ClassVar[str] = "Echo."
    effect_class: ClassVar[convdb.EffectClass] = "read_only"
    Args: ClassVar[type[ToolArgs]] = EchoArgs
    prefix: str = ""

    def execute(self, operation: Operation) -> ToolResult:
        return ToolResult(self.prefix + operation.arguments["text"])


def test_agent_version_is_a_stable_digest_of_its_configuration() -> None:
    agent = Agent(model="convdb/scripted", tools=(charge, EchoTool()))
    same = Agent(model="convdb/scripted", tools=(charge, EchoTool()))
    assert agent.version == same.version and len(agent.version) == 16
    others = [
        agent.model_copy(update={"system_prompt": "Be terse."}),
        agent.model_copy(update={"model": "gpt-4o-mini"}),
        Agent(model="convdb/scripted", tools=(charge, EchoTool(prefix=">"))),
        Agent(model="convdb/scripted", tools=(charge,)),
        Agent(model="convdb/scripted", tools=(charge, EchoTool()), confirmation={"mode": "always"}),
    ]
    assert len({agent.version, *(o.version for o in others)}) == len(others) + 1
    assert agent.tool("echo").execute(op("echo", {"text": "hi"})).content == "hi"
    with pytest.raises(Exception, match="frozen"):
        agent.model = "x"  # type: ignore[misc]


@pytest.mark.kafka
def test_a_read_only_tool_past_its_timeout_is_an_error_the_llm_reads(
    settings: Settings, tmp_path: Path
) -> None:
    release = threading.Event()

    @tool(timeout_s=0.3)
    def lookup_stock(sku: str) -> str:
        """Ask the warehouse (it never answers)."""
        release.wait(10)
        return sku

    solo, publisher = standalone(direct(settings), workspace=tmp_path)
    runtime = solo.runtime
    runtime = dataclasses.replace(runtime, agent=Agent(model=runtime.agent.model, tools=(lookup_stock,)))
    conv = runtime.create("ro-timeout", "t1", solo.sink)
    conv.send_message('!lookup_stock {"sku": "A-1"}')
    assert conv.run() == "finished"
    release.set()
    publisher.flush()
    (observation,) = [e for e in events(settings, "ro-timeout") if isinstance(e, ObservationEvent)]
    assert observation.is_error and "no answer within 0.3s" in observation.content


def shop_agent(settings: Settings) -> Agent:
    """An agent factory, named as `module:attr`."""
    return Agent(model=settings.llm.model, tools=(charge, add))


def make_a_tool(settings: Settings) -> Tool:  # noqa: ARG001
    return add


def failing_agent(settings: Settings) -> Agent:  # noqa: ARG001
    raise RuntimeError("no key")


def test_agents_and_tools_load_by_module_attr_with_named_errors() -> None:
    settings = Settings()
    here = __name__
    assert convdb.load_agent(f"{here}:shop_agent", settings).tools == (charge, add)
    assert convdb.installed_tools(settings, f"{here}:add", f"{here}:charge") == (add, charge)
    assert "default" in convdb.installed_agents()
    with pytest.raises(convdb.UnknownAgentError, match="unknown agent 'nope'.*not module:attr"):
        convdb.load_agent("nope", settings)
    with pytest.raises(convdb.AgentLoadError, match="its factory raised RuntimeError: no key"):
        convdb.load_agent(f"{here}:failing_agent", settings)
    with pytest.raises(convdb.AgentLoadError, match="is a AddTool, not a convdb.Agent or a factory"):
        convdb.load_agent(f"{here}:add", settings)
    with pytest.raises(convdb.AgentLoadError, match="made a AddTool, not a convdb.Agent"):
        convdb.load_agent(f"{here}:make_a_tool", settings)
    with pytest.raises(convdb.AgentLoadError, match="does not load: ModuleNotFoundError"):
        convdb.load_agent("no_such_module_xyz:make", settings)
    with pytest.raises(convdb.UnknownAgentError, match="unknown tool 'nope'"):
        convdb.installed_tools(settings, "nope")
