"""The crash demo's graph as a hosted graph: `convdb runner --graph tests.langgraph.hosted_graph:make`.

`plan -> {fast, slow} -> finish` on a `messages` channel: the user's message comes in from the
inbox, `slow` charges a card under `@effect`, `finish` answers with an AIMessage (with usage).
The environment of the runner process says where the provider's file is (`CRASH_WORK`: one line
per charge in `provider.log`), where to stop to be SIGKILLed (`CRASH_AT`: `before_effect`,
`before_call`, `after_call`, `after_confirmed`; the process writes `paused` there and waits, or
freezes itself with `CRASH_SIGNAL=SIGSTOP`), and whether the
provider has a lookup (`CRASH_NO_LOOKUP=1`: no, so an unknown charge goes to a human), and whether
`finish` asks a human first with LangGraph's `interrupt()` (`HOSTED_APPROVAL=1`).
"""

from __future__ import annotations

import json
import operator
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt

from convdb.infra.settings import Settings
from convdb.langgraph import LookupResult, effect


class Order(TypedDict):
    """The conversation and what the graph did, in order."""

    messages: Annotated[list[AnyMessage], add_messages]
    log: Annotated[list[str], operator.add]


def work() -> Path:
    return Path(os.environ["CRASH_WORK"])


def pause_here(point: str) -> None:
    """Wait to be SIGKILLed when this process was asked to stop at `point`; with
    `CRASH_SIGNAL=SIGSTOP`, freeze there (a zombie) and go on once continued."""
    if os.environ.get("CRASH_AT") == point:
        (work() / "paused").write_text(point)
        if os.environ.get("CRASH_SIGNAL") == "SIGSTOP":
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        time.sleep(120)
        raise SystemExit("never killed")


def provider_charge(key: str) -> dict[str, Any]:
    """The payment provider: records the charge (it honours no idempotency key: irreversible)."""
    pause_here("before_call")
    with (work() / "provider.log").open("a") as f:
        f.write(f"charge {key} pid={os.getpid()}\n")
    pause_here("after_call")
    return {"charge_id": f"ch-{len(charges())}", "amount": 42}


def charges() -> list[str]:
    log = work() / "provider.log"
    return log.read_text().splitlines() if log.exists() else []


def provider_lookup(key: str) -> LookupResult:
    """The provider's lookup by idempotency key."""
    for n, line in enumerate(charges(), start=1):
        if line.split()[1] == key:
            result = json.dumps({"charge_id": f"ch-{n}", "amount": 42})
            return LookupResult(outcome="found", provider_receipt=f"ch-{n}", result=result)
    return LookupResult(outcome="not_found")


def make(_settings: Settings) -> Any:
    """The graph (a `StateGraph`: the runner compiles it with its partition's checkpointer)."""
    lookup = None if os.environ.get("CRASH_NO_LOOKUP") else provider_lookup

    @effect("irreversible", lookup=lookup)
    def charge_card(amount: int, *, idempotency_key: str) -> dict[str, Any]:
        assert amount == 42
        return provider_charge(idempotency_key)

    def plan(_: Order) -> dict[str, list[str]]:
        return {"log": ["plan"]}

    def fast(_: Order) -> dict[str, list[str]]:
        return {"log": ["fast"]}

    def slow(_: Order) -> dict[str, list[str]]:
        pause_here("before_effect")
        receipt = charge_card(42)  # None when a human confirmed it without the provider's receipt
        pause_here("after_confirmed")
        return {"log": [f"slow:{receipt['charge_id'] if receipt else 'confirmed-by-a-human'}"]}

    def finish(state: Order) -> dict[str, Any]:
        charged = next(e for e in state["log"] if e.startswith("slow:"))
        asked = state["messages"][-1].content
        approved = ""
        if os.environ.get("HOSTED_APPROVAL"):  # LangGraph's own interrupt(), answered by a human
            answer = interrupt({"question": "ship the tickets?"})
            approved = f" ({answer['decision']} by {answer['by']})"
        reply = AIMessage(
            content=f"Charged {charged[5:]} for: {asked}{approved}",
            usage_metadata={"input_tokens": 12, "output_tokens": 5, "total_tokens": 17},
            response_metadata={"model_name": "scripted-checkout"},
        )
        return {"log": ["finish"], "messages": [reply]}

    builder = StateGraph(Order)
    for name, node in (("plan", plan), ("fast", fast), ("slow", slow), ("finish", finish)):
        builder.add_node(name, node)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "fast")
    builder.add_edge("plan", "slow")
    builder.add_edge(["fast", "slow"], "finish")
    builder.add_edge("finish", END)
    return builder
