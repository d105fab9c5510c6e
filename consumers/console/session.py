"""Console sessions: an HMAC-signed cookie naming the API key by its hash, and CSRF tokens.

The API key is typed once into the login form; the cookie never holds it, only a SHA-256 prefix
of it, so the session dies when the key is removed from `CONVDB_API__KEYS`. The cookie is
HttpOnly, SameSite=Lax, and Secure whenever the console is served over https. Every POST form
carries a token derived from the session's nonce (double submit, checked in constant time).
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

from infra.settings import ApiSettings

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

    @property
    def decided_by(self) -> str:
        """`resolved_by` of this user's decisions: the tenant, and the name given at login."""
        return f"human:{self.tenant_id}" + (f":{self.name}" if self.name else "")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(api_key: str) -> str:
    """What a session stores of an API key: a prefix of its SHA-256."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


class Sessions:
    """Issues and checks session cookies and CSRF tokens for one API process."""

    def __init__(self, api: ApiSettings) -> None:
        secret = api.session_secret.get_secret_value() if api.session_secret else None
        self._secret = secret.encode() if secret else secrets.token_bytes(32)
        self._ttl = api.session_ttl_s
        self._tenants = {key_id(k): tenant for k, tenant in api.keys.items()}

    def _mac(self, purpose: str, text: str) -> str:
        return _b64(hmac.new(self._secret, f"{purpose}|{text}".encode(), hashlib.sha256).digest())

    def tenant_of_key(self, api_key: str) -> str | None:
        """The tenant of an API key typed at login; None when the key is unknown."""
        return self._tenants.get(key_id(api_key))

    def issue(self, api_key: str, name: str) -> str:
        """A cookie value for a known API key."""
        body = {
            "k": key_id(api_key),
            "n": name,
            "e": int(time.time()) + self._ttl,
            "s": secrets.token_hex(16),
        }
        text = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{text}.{self._mac('session', text)}"

    def user(self, request: Request) -> ConsoleUser | None:
        """The request's session user; None when there is no valid, unexpired session."""
        value = request.cookies.get(COOKIE, "")
        text, _, mac = value.partition(".")
        if not text or not hmac.compare_digest(mac, self._mac("session", text)):
            return None
        try:
            body = json.loads(_unb64(text))
        except (ValueError, UnicodeDecodeError):
            return None
        tenant = self._tenants.get(body.get("k", ""))
        if tenant is None or not isinstance(body.get("e"), int) or body["e"] < time.time():
            return None
        nonce = str(body.get("s", ""))
        return ConsoleUser(tenant, str(body.get("n", "")), nonce, self._mac("csrf", nonce))

    def login_token(self) -> str:
        """A fresh CSRF token for the login form (also set as the login cookie)."""
        return secrets.token_urlsafe(24)

    @property
    def ttl_s(self) -> int:
        """Session lifetime in seconds."""
        return self._ttl


def same_token(expected: str, given: str | None) -> bool:
    """Constant-time comparison of a CSRF token; False when either is missing."""
    return bool(expected) and bool(given) and hmac.compare_digest(expected, given or "")


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
