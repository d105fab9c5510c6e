"""Failed-authentication throttling that never stands between a valid credential and the API.

A credential is checked first; only a failing attempt is counted and only a failing attempt is
ever answered 429. Failures are counted twice: per client address (one scanner) and per
presented key prefix (one key guessed from many addresses). A valid key behind an address that
others fail from (a shared ingress, a NAT) always authenticates. The price is that a caller
already over its limit still learns whether a key is valid (200 against 429): API keys are random
secrets (`openssl rand -hex 24`), so that oracle is worth nothing against guessing, while locking
every tenant behind one address out is worth a lot to an attacker.

The client address is the peer's unless the peer is one of `api.trusted_proxies`; then it is
what their `X-Forwarded-For` says (`ProxyHeadersMiddleware`, installed by the app).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

from fastapi import HTTPException, Request

PREFIX_CHARS = 8
"""How much of a presented key names its failure bucket: enough to tell keys apart, too little to
be worth stealing from memory."""


class SlidingWindow:
    """Events per name in the last `window_s`, at most `limit` kept per name, `max_names` names.

    Bounded memory: the names least recently seen are forgotten beyond `max_names`, and an
    attacker's own names stay the most recent while it keeps trying.
    """

    def __init__(self, limit: int, window_s: float, max_names: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self.max_names = max_names
        self._times: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def wait_s(self, name: str) -> int | None:
        """Seconds until `name` is under its limit again; None when it is under it now."""
        with self._lock:
            now = time.monotonic()
            times = self._recent(name, now)
            if times is None or len(times) < self.limit:
                return None
            return max(1, int(times[0] + self.window_s - now) + 1)

    def add(self, name: str) -> None:
        """Count one event of `name`."""
        with self._lock:
            now = time.monotonic()
            times = self._recent(name, now)
            if times is None:
                times = self._times[name] = deque(maxlen=self.limit)
                while len(self._times) > self.max_names:
                    self._times.popitem(last=False)
            times.append(now)
            self._times.move_to_end(name)

    def _recent(self, name: str, now: float) -> deque[float] | None:
        times = self._times.get(name)
        while times and times[0] < now - self.window_s:
            times.popleft()
        return times


class AuthThrottle:
    """Counts failed authentications per client address and per presented key prefix."""

    def __init__(self, limit: int, window_s: float, max_names: int = 10_000) -> None:
        self.limit = limit
        self.window_s = window_s
        self._addresses = SlidingWindow(limit, window_s, max_names)
        self._prefixes = SlidingWindow(limit, window_s, max_names)

    def failed(self, client: str, presented: str | None = None) -> None:
        """Count one failed attempt; HTTPException(429) when its address or key prefix is over the limit.

        The caller answers its own 401 when this returns.
        """
        prefix = presented[:PREFIX_CHARS] if presented else None
        waits = [(self._addresses.wait_s(client), "this address")]
        if prefix:
            waits.append((self._prefixes.wait_s(prefix), "keys starting like this one"))
        # Counted even when refused: a caller that keeps failing stays refused until it pauses.
        self._addresses.add(client)
        if prefix:
            self._prefixes.add(prefix)
        refused = [(wait, what) for wait, what in waits if wait is not None]
        if refused:
            wait, what = max(refused, key=lambda pair: pair[0] or 0)
            raise HTTPException(
                429,
                f"too many failed authentications from {what} (CONVDB_API__AUTH_FAILURES="
                f"{self.limit} per {self.window_s:.0f}s); retry in {wait}s",
                headers={"Retry-After": str(wait)},
            )


def client_address(request: Request) -> str:
    """The caller's address: the peer, or the client a trusted proxy forwarded for."""
    return request.client.host if request.client else "unknown"
