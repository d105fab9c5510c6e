"""The shop agent: charge a customer (keyed, with a lookup), then text them (irreversible, no lookup).

`make(settings)` is the factory the `convdb.agents` entry point names; the runner calls it once
with its settings (`convdb.load_settings()`: the dev stack when it is up).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

import convdb
from shop.provider import Provider

PROMPT = "You run a small shop. Charge the customer, then text them the receipt. Answer briefly."


class Charge(BaseModel):
    """Arguments of `charge`: the LLM's JSON is validated against this model."""

    customer: str = Field(description="Customer id, e.g. 'cus_42'.")
    cents: int = Field(gt=0, le=100_000, description="Amount in cents.")


def tools(settings: convdb.Settings) -> tuple[convdb.Tool, ...]:
    """The shop's tools, bound to the providers under the data dir."""
    provider = Provider(settings.data_dir / "shop-provider.sqlite")

    @convdb.tool(
        effect="keyed",
        # After a crash the runtime asks the provider by operation id before doing anything again.
        lookup=provider.find_charge,
        receipt=lambda charge: charge["charge_id"],
        target=lambda args: f"payments:{args['customer']}",
    )
    def charge(args: Charge, operation: convdb.Operation) -> dict:
        """Charge a customer's card."""
        # The operation id is the idempotency key: a retry after a crash charges once.
        return provider.charge(operation.operation_id, args.customer, args.cents)

    @convdb.tool(effect="irreversible", timeout_s=10.0)
    def send_sms(to: str, text: str, operation: convdb.Operation) -> str:
        """Text a customer (cannot be undone; the gateway cannot be asked what it sent)."""
        provider.send_sms(operation.operation_id, to, text)
        return f"texted {to}"

    return charge, send_sms


def make(settings: convdb.Settings) -> convdb.Agent:
    """The shop agent: its model is the settings' (`CONVDB_LLM__MODEL`, or `--model`)."""
    return convdb.Agent(model=settings.llm.model, system_prompt=PROMPT, tools=tools(settings))
