"""A user's agent package, written outside the repository's packages for the runner processes to load.

`install(root)` writes `shopkit` (an agent `shop` with a keyed tool that has a lookup, an
irreversible tool without one, a tool that hangs, and an agent `broken` whose factory raises)
and a `shopkit-0.1.dist-info` whose `entry_points.txt` registers them, so that
`importlib.metadata` finds them for any process with `root` on its PYTHONPATH. The provider is a
SQLite file (`SHOPKIT_DB`): it outlives a SIGKILLed runner and counts what it did per operation.
"""

from __future__ import annotations

from pathlib import Path

AGENT = '''
"""shopkit: an agent with a payment provider (keyed, with lookup) and an SMS gateway (irreversible)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from pydantic import BaseModel, Field

import convdb


def provider() -> sqlite3.Connection:
    db = sqlite3.connect(os.environ["SHOPKIT_DB"], timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, customer TEXT, cents INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS calls (tool TEXT, key TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS sms (key TEXT, recipient TEXT, text TEXT)")
    return db


class ChargeArgs(BaseModel):
    customer: str = Field(description="Customer id.")
    cents: int = Field(gt=0, description="Amount in cents.")


def find_charge(operation_id: str) -> dict | None:
    row = provider().execute("SELECT key, cents FROM charges WHERE key = ?", (operation_id,)).fetchone()
    return None if row is None else {"charge": row[0], "cents": row[1]}


@convdb.tool(effect="keyed", lookup=find_charge, receipt=lambda charge: charge["charge"])
def charge(args: ChargeArgs, operation: convdb.Operation) -> dict:
    """Charge a customer (the operation id is the provider's idempotency key)."""
    db = provider()
    db.execute("INSERT INTO calls VALUES ('charge', ?)", (operation.operation_id,))
    db.execute(
        "INSERT OR IGNORE INTO charges VALUES (?, ?, ?)", (operation.operation_id, args.customer, args.cents)
    )
    return find_charge(operation.operation_id)


@convdb.tool(effect="irreversible")
def send_sms(to: str, text: str, operation: convdb.Operation) -> str:
    """Send a text message (cannot be undone, and the gateway cannot be asked)."""
    provider().execute("INSERT INTO sms VALUES (?, ?, ?)", (operation.operation_id, to, text))
    return f"sent to {to}"


@convdb.tool(effect="irreversible", timeout_s=1.0)
def slow_fax(to: str) -> str:
    """A fax gateway that never answers."""
    threading.Event().wait(3600)
    return to


def make(settings: convdb.Settings) -> convdb.Agent:
    return convdb.Agent(
        model=settings.llm.model,
        system_prompt="You run a small shop. Charge, then tell the customer.",
        tools=(charge, send_sms, slow_fax),
    )


def broken(settings: convdb.Settings) -> convdb.Agent:
    raise RuntimeError("the shop's API key is not set")
'''

ENTRY_POINTS = """[convdb.agents]
shop = shopkit.agent:make
broken = shopkit.agent:broken

[convdb.tools]
charge = shopkit.agent:charge
"""


def install(root: Path) -> Path:
    """Write the package and its dist-info under `root` (a PYTHONPATH entry); returns `root`."""
    pkg = root / "shopkit"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""shopkit."""\n')
    (pkg / "agent.py").write_text(AGENT)
    info = root / "shopkit-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shopkit\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root
