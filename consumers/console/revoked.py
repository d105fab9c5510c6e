"""Signed-out console sessions, kept in the store so that every API replica refuses them.

A session cookie is signed and self-contained, so signing out has to leave a record somewhere:
the store is what every replica of the API already shares and reads on every page, and a row
per signed-out session (its nonce, kept until the session would have expired anyway) is all it
takes. A revocation scheme derived from the session secret alone (a per-key version, say)
would still need that shared record, and would end every session of the key at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from convdb.consumers.store import insert_ignore

metadata = sa.MetaData()

revoked_sessions = sa.Table(
    "console_revoked_sessions",
    metadata,
    sa.Column("nonce", sa.String(64), primary_key=True),
    sa.Column("expires_at", sa.BigInteger, nullable=False, index=True),
)
"""One row per signed-out session until its cookie would have expired."""


def revoke(engine: Engine, nonce: str, expires_at: int, now: int) -> None:
    """Record that the session with `nonce` signed out (and forget revocations past their expiry)."""
    with engine.begin() as conn:
        # Writes only: on SQLite the transaction waits for the write lock, never has to upgrade a read.
        conn.execute(sa.delete(revoked_sessions).where(revoked_sessions.c.expires_at < now))
        insert_ignore(conn, revoked_sessions, [{"nonce": nonce, "expires_at": expires_at}], ["nonce"])


def is_revoked(conn: Connection, nonce: str) -> bool:
    """True when the session with `nonce` signed out."""
    found = conn.execute(sa.select(revoked_sessions.c.nonce).where(revoked_sessions.c.nonce == nonce))
    return found.first() is not None
