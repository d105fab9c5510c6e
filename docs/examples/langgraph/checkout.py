"""docs/langgraph.md's example: a LangGraph checkout graph on convdb, its charge under `@effect`.

    convdb dev up && convdb topics apply && python docs/examples/langgraph/checkout.py

Prints one JSON object: the receipts the graph holds, its checkpoints, the provider's charges.
Run it twice: the thread is durable in Kafka, the second run adds a checkout to the same thread.
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import convdb
from convdb.langgraph import ConvdbSaver, LookupResult, effect

PAYMENTS: dict[str, dict[str, Any]] = {}
"""The payment provider of this example: charges by idempotency key (a real one is remote)."""


def find_charge(idempotency_key: str) -> LookupResult:
    """The provider's lookup: did a charge with this key happen?"""
    found = PAYMENTS.get(idempotency_key)
    if found is None:
        return LookupResult(outcome="not_found")
    return LookupResult(outcome="found", provider_receipt=found["charge_id"], result=json.dumps(found))


@effect("keyed", lookup=find_charge)
def charge(customer: str, cents: int, *, idempotency_key: str) -> dict[str, Any]:
    """Charge a customer; the provider deduplicates by the key convdb passes."""
    receipt = {"charge_id": f"ch_{len(PAYMENTS) + 1}", "customer": customer, "cents": cents}
    return PAYMENTS.setdefault(idempotency_key, receipt)


class Checkout(TypedDict):
    """The graph's state: who pays what, and the receipts so far."""

    customer: str
    cents: int
    receipts: Annotated[list[dict[str, Any]], operator.add]


def pay(state: Checkout) -> dict[str, Any]:
    """The node with the side effect: re-run after a crash, it gets the recorded receipt back."""
    return {"receipts": [charge(state["customer"], state["cents"])]}


def main() -> None:
    builder = StateGraph(Checkout)
    builder.add_node("pay", pay)
    builder.add_edge(START, "pay")
    builder.add_edge("pay", END)
    graph = builder.compile(checkpointer=ConvdbSaver(convdb.load_settings()))  # the one-line change

    config = {"configurable": {"thread_id": "checkout-42"}}
    out = graph.invoke({"customer": "cus_42", "cents": 500, "receipts": []}, config)
    history = list(graph.get_state_history(config))
    print(
        json.dumps(
            {"receipts": out["receipts"], "checkpoints": len(history), "provider_charges": len(PAYMENTS)}
        )
    )


if __name__ == "__main__":
    main()
