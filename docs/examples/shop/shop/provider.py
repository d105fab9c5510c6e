"""The shop's providers, standing in for a payment API and an SMS gateway: one SQLite file.

The payment API deduplicates charges by idempotency key and can be asked about a key; the SMS
gateway does neither (like most). It lives outside the runner process, so it remembers what it
did across a runner crash, which is what the effect protocol has to get right.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Provider:
    """The providers' records in `path`."""

    path: Path

    def _db(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, customer TEXT, cents INTEGER)")
        db.execute("CREATE TABLE IF NOT EXISTS payment_calls (key TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS sms (key TEXT, recipient TEXT, text TEXT)")
        return db

    def charge(self, key: str, customer: str, cents: int) -> dict[str, Any]:
        """Charge once per idempotency key (a second call with the key answers the first charge)."""
        with self._db() as db:
            db.execute("INSERT INTO payment_calls VALUES (?)", (key,))
            db.execute("INSERT OR IGNORE INTO charges VALUES (?, ?, ?)", (key, customer, cents))
        found = self.find_charge(key)
        assert found is not None
        return found

    def find_charge(self, key: str) -> dict[str, Any] | None:
        """The charge made under `key`, or None when there is none."""
        with self._db() as db:
            row = db.execute("SELECT rowid, customer, cents FROM charges WHERE key = ?", (key,)).fetchone()
        return None if row is None else {"charge_id": f"ch_{row[0]}", "customer": row[1], "cents": row[2]}

    def send_sms(self, key: str, to: str, text: str) -> None:
        """Send a text (every call sends one; `key` only labels it in the records)."""
        with self._db() as db:
            db.execute("INSERT INTO sms VALUES (?, ?, ?)", (key, to, text))

    def report(self) -> dict[str, Any]:
        """What the providers did: charges, payment API calls and texts, per operation id."""
        with self._db() as db:
            return {
                "charges": dict(db.execute("SELECT key, COUNT(*) FROM charges GROUP BY key").fetchall()),
                "payment_calls": dict(
                    db.execute("SELECT key, COUNT(*) FROM payment_calls GROUP BY key").fetchall()
                ),
                "sms": dict(db.execute("SELECT key, COUNT(*) FROM sms GROUP BY key").fetchall()),
            }
