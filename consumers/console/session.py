"""Console sessions: an HMAC-signed cookie naming the API key by a keyed hash, and CSRF tokens.

The API key is typed once into the login form; the cookie never holds it, only an HMAC of it
under the session secret (an unkeyed digest would let anyone holding a cookie test guesses of
the key offline), so the session dies when the key is removed from `CONVDB_API__KEYS`. Signing
out records the session's nonce in the store (`revoked`), so a copied cookie dies with it on
every replica. The cookie is HttpOnly, SameSite=Lax, and Secure whenever the console is served
over https. Every POST form carries a token derived from the session's nonce (double submit,
checked in constant time).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response
from sqlalchemy.engine import Engine

from convdb.consumers.console.revoked import is_revoked, revoke
from convdb.infra.settings import ApiSettings

COOKIE = "convdb_session"
LOGIN_COOKIE = "convdb_login"
"""Short-lived cookie holding the login form's CSRF token (before any session exists)."""


@dataclass(frozen=True)
class ConsoleUser:
    """Who a console request acts for: the tenant of the session's API key."""

    tenant_id: str
    name: str
    nonce: str
    csrf: str
    expires: int
    """When the session ends anyway (Unix seconds)."""

    @property
    def decided_by(self) -> str:
        """`resolved_by` of this user's decisions: the tenant, and the name given at login."""
        return f"human:{self.tenant_id}" + (f":{self.name}" if self.name else "")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    """Issues and checks session cookies and CSRF tokens for one API process."""

    def __init__(self, api: ApiSettings, engine: Engine) -> None:
        secret = api.session_secret.get_secret_value() if api.session_secret else None
        self._secret = secret.encode() if secret else secrets.token_bytes(32)
        self._ttl = api.session_ttl_s
        self._engine = engine
        self._tenants = {self.key_id(k): tenant for k, tenant in api.keys.items()}

    def _mac(self, purpose: str, text: str) -> str:
        return _b64(hmac.new(self._secret, f"{purpose}|{text}".encode(), hashlib.sha256).digest())

    def key_id(self, api_key: str) -> str:
        """What a session stores of an API key: an HMAC of it under the session secret."""
        return self._mac("key", api_key)[:32]

    def tenant_of_key(self, api_key: str) -> str | None:
        """The tenant of an API key typed at login; None when the key is unknown."""
        return self._tenants.get(self.key_id(api_key))

    def issue(self, api_key: str, name: str) -> str:
        """A cookie value for a known API key."""
        body = {
            "k": self.key_id(api_key),
            "n": name,
            "e": int(time.time()) + self._ttl,
            "s": secrets.token_hex(16),
        }
        text = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{text}.{self._mac('session', text)}"

    def user(self, request: Request) -> ConsoleUser | None:
        """The request's session user; None when there is no valid, unexpired, signed-in session.

        Reads the store (revocations): call it off the event loop.
        """
        user = self._signed(request.cookies.get(COOKIE, ""))
        if user is None or not self.valid(user):
            return None
        return user

    def valid(self, user: ConsoleUser) -> bool:
        """True while `user`'s session has neither expired nor signed out (reads the store)."""
        if user.expires < time.time():
            return False
        with self._engine.connect() as conn:
            return not is_revoked(conn, user.nonce)

    def revoke(self, user: ConsoleUser) -> None:
        """Sign `user`'s session out, on every replica sharing the store (writes to it)."""
        revoke(self._engine, user.nonce, user.expires, int(time.time()))

    def _signed(self, value: str) -> ConsoleUser | None:
        text, _, mac = value.partition(".")
        if not text or not _same(mac, self._mac("session", text)):
            return None
        try:
            body = json.loads(_unb64(text))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(body, dict):
            return None
        tenant, expires, nonce = self._tenants.get(str(body.get("k", ""))), body.get("e"), body.get("s")
        if tenant is None or not isinstance(expires, int) or not isinstance(nonce, str) or not nonce:
            return None
        return ConsoleUser(tenant, str(body.get("n", "")), nonce, self._mac("csrf", nonce), expires)

    def login_token(self) -> str:
        """A fresh CSRF token for the login form (also set as the login cookie)."""
        return secrets.token_urlsafe(24)

    @property
    def ttl_s(self) -> int:
        """Session lifetime in seconds."""
        return self._ttl


def same_token(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a CSRF token; False when either is missing."""
    return bool(expected) and bool(given) and _same(expected, given or "")


def _same(expected: str, given: str) -> bool:
    # Bytes: compare_digest refuses str with non-ASCII characters (a hostile cookie or form).
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def set_cookie(
    response: Response, request: Request, name: str, value: str, max_age: int, path: str = "/"
) -> None:
    """Set a console cookie: HttpOnly, SameSite=Lax, Secure when the request came over https."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
