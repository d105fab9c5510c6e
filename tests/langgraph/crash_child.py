"""The crash demo's graph in a process of its own: `plan -> {fast, slow} -> finish`, `slow` charges a card.

    python -m tests.langgraph.crash_child SAVER ACTION WORKDIR [STORE]

SAVER: `sqlite` (LangGraph's SqliteSaver, the charge unwrapped) or `convdb` (ConvdbSaver, the
charge under `@effect`, with a provider lookup unless `CRASH_NO_LOOKUP=1`). ACTION: `run` (a
first invoke), `resume` (`invoke(None)`), or `decide` (`Command(resume=...)` for an unknown
charge). STORE: the SQLite file, or the convdb Settings fields as JSON. `CRASH_AT` names where
the run stops to be SIGKILLed by its parent: `before_effect` (the node runs, the charge is not
asked for yet), `before_call` (the ledger says started, the provider
has not been called), `after_call` (the provider charged, nothing recorded it), `after_confirmed`
(the charge is confirmed, the node has not returned, its writes are not saved). The provider is
the file `WORKDIR/provider.log`, one line per charge; the process writes `WORKDIR/paused` when it
waits for its kill. It prints the graph's final values (and interrupts) as JSON.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from convdb.infra.settings import Settings
from convdb.langgraph import ConvdbSaver, LookupResult, effect

WORK = Path(sys.argv[3])
PROVIDER = WORK / "provider.log"
CRASH_AT = os.environ.get("CRASH_AT", "") if sys.argv[2] == "run" else ""


class Order(TypedDict):
    """What the graph did, in order."""

    log: Annotated[list[str], operator.add]


def pause_here(point: str) -> None:
    """Wait to be SIGKILLed when the run was asked to stop at `point`; a zombie (`CRASH_WAKE=1`)
    waits for the file `WORKDIR/wake` instead, and goes on."""
    if CRASH_AT == point:
        (WORK / "paused").write_text(point)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.environ.get("CRASH_WAKE") and (WORK / "wake").exists():
                return
            time.sleep(0.05)
        raise SystemExit("never killed")


def provider_charge(key: str) -> dict[str, Any]:
    """The payment provider: records the charge (it honours no idempotency key: irreversible)."""
    pause_here("before_call")
    with PROVIDER.open("a") as f:
        f.write(f"charge {key} pid={os.getpid()}\n")
    pause_here("after_call")
    return {"charge_id": f"ch-{sum(1 for _ in PROVIDER.open())}", "amount": 42}


def provider_lookup(key: str) -> LookupResult:
    """The provider's lookup by idempotency key."""
    for n, line in enumerate(PROVIDER.read_text().splitlines() if PROVIDER.exists() else [], start=1):
        if line.split()[1] == key:
            return LookupResult(
                outcome="found",
                provider_receipt=f"ch-{n}",
                result=json.dumps({"charge_id": f"ch-{n}", "amount": 42}),
            )
    return LookupResult(outcome="not_found")


@effect("irreversible", lookup=None if os.environ.get("CRASH_NO_LOOKUP") else provider_lookup)
def charge_card(amount: int, *, idempotency_key: str) -> dict[str, Any]:
    """The charge under convdb's effect protocol."""
    assert amount == 42
    return provider_charge(idempotency_key)


def build(saver: BaseCheckpointSaver[Any], wrapped: bool) -> Any:
    def plan(_: Order) -> dict[str, list[str]]:
        return {"log": ["plan"]}

    def fast(_: Order) -> dict[str, list[str]]:
        return {"log": ["fast"]}

    def slow(_: Order) -> dict[str, list[str]]:
        pause_here("before_effect")
        receipt = charge_card(42) if wrapped else provider_charge("-")
        pause_here("after_confirmed")
        return {"log": [f"slow:{receipt['charge_id']}"]}

    def finish(_: Order) -> dict[str, list[str]]:
        return {"log": ["finish"]}

    builder = StateGraph(Order)
    for name, node in (("plan", plan), ("fast", fast), ("slow", slow), ("finish", finish)):
        builder.add_node(name, node)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "fast")
    builder.add_edge("plan", "slow")
    builder.add_edge(["fast", "slow"], "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=saver)


def main() -> None:
    kind, action, store = sys.argv[1], sys.argv[2], sys.argv[4]
    config = {"configurable": {"thread_id": "order-1"}}
    if kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        saver: BaseCheckpointSaver[Any] = SqliteSaver(sqlite3.connect(store, check_same_thread=False))
    else:
        saver = ConvdbSaver(Settings(_env_file=None, **json.loads(store)))  # type: ignore[call-arg]
    graph = build(saver, wrapped=kind == "convdb")
    if action == "run":
        out = graph.invoke({"log": []}, config, durability="sync")
    elif action == "resume":
        out = graph.invoke(None, config, durability="sync")
    else:
        out = graph.invoke(
            Command(resume=json.loads(os.environ["CRASH_DECISION"])), config, durability="sync"
        )
    interrupts = [i.value for i in out.get("__interrupt__", [])]
    print(json.dumps({"log": out.get("log", []), "interrupts": interrupts}))


if __name__ == "__main__":
    main()
