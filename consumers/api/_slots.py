"""Per-tenant shares of the API's write slots: one tenant's flood cannot take every slot.

A write (a broker call on the writer threads, a webhook post waiting for its acks) holds a slot
until it ends. Slots are bounded in all, as before, and per tenant by `api.tenant_write_share`:
past its share a tenant is answered 429 (`WriteShareError`) while other tenants still find free
slots. The tenant a request writes for is set once it authenticates (`act_for`), in a holder
that `TenantScope` gives every request, so the write paths need no extra argument.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any

from convdb.infra.errors import PublishError

_ACTING: ContextVar[list[str] | None] = ContextVar("convdb_api_acting_tenant", default=None)


class WriteShareError(PublishError):
    """A tenant already holds its share of the API's write slots (the app answers 429)."""


class TenantScope:
    """ASGI middleware: each request gets its own holder for the tenant it acts for.

    A holder, not the variable itself: the tenant is learnt in a dependency that may run on a
    worker thread, whose changes to context variables would not come back to the request.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """Run the request with a fresh holder."""
        token = _ACTING.set([])
        try:
            await self.app(scope, receive, send)
        finally:
            _ACTING.reset(token)


def act_for(tenant_id: str) -> None:
    """The current request writes for `tenant_id` (its writes count against that tenant's share)."""
    holder = _ACTING.get()
    if holder is None:
        _ACTING.set([tenant_id])
    else:
        holder[:] = [tenant_id]


def acting_tenant() -> str | None:
    """The tenant the current request writes for; None before it authenticated (e.g. a receipt)."""
    holder = _ACTING.get()
    return holder[0] if holder else None


class WriteSlots:
    """Slots of one write path: `total` in all, `share` of them at most per tenant."""

    def __init__(self, total: int, share: float, what: str, setting: str) -> None:
        self.total = total
        self.per_tenant = max(1, int(total * share))
        self.share = share
        self._what, self._setting = what, setting
        self._held: dict[str | None, int] = {}
        self._lock = threading.Lock()

    def take(self) -> str | None:
        """A slot for the acting tenant (returned, to give the slot back with `give`).

        Raises:
            WriteShareError: the tenant holds its share already.
            PublishError: every slot is taken.
        """
        tenant = acting_tenant()
        with self._lock:
            waiting = sum(self._held.values())
            if waiting >= self.total:
                raise PublishError(f"{waiting} {self._what} are already waiting for the broker")
            mine = self._held.get(tenant, 0)
            if tenant is not None and mine >= self.per_tenant:
                raise WriteShareError(
                    f"tenant {tenant!r} already has {mine} {self._what} waiting for the broker, its share "
                    f"of this API process's {self.total} (CONVDB_API__TENANT_WRITE_SHARE={self.share:g} "
                    f"of {self._setting}); retry when they are answered"
                )
            self._held[tenant] = mine + 1
        return tenant

    def give(self, tenant: str | None) -> None:
        """Give back a slot `take` returned for `tenant`."""
        with self._lock:
            left = self._held.get(tenant, 0) - 1
            if left > 0:
                self._held[tenant] = left
            else:
                self._held.pop(tenant, None)

    @property
    def waiting(self) -> int:
        """Slots held now."""
        with self._lock:
            return sum(self._held.values())
