"""Resolvers: plugins that ask a provider what happened to an operation (`lookup`).

A resolver answers for one tool, by the name it is registered under in the
`convdb.resolvers` entry-point group (name = tool name), and its constructor takes the
`Settings`. A third party adds one without touching convdb:

    [project.entry-points."convdb.resolvers"]
    charge_card = "mypkg.payments:ChargeResolver"

`lookup` is synchronous (the reconciler runs it in a thread) and never raises for a provider
that cannot tell: it answers `unknown` with the reason.
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import entry_points
from typing import Protocol

import httpx

from consumers.errors import PluginError
from infra.settings import Settings
from projections.effects import LookupResult, OperationState

logger = logging.getLogger(__name__)

GROUP = "convdb.resolvers"
"""The entry-point group resolvers register under (name = tool name)."""


class ResolverUnavailableError(PluginError):
    """A resolver is installed but not configured here (e.g. no provider URL): it is skipped."""


class Resolver(Protocol):
    """Answers `lookup(operation)` for one tool: found, not_found (provably not done) or unknown."""

    def lookup(self, operation: OperationState) -> LookupResult:
        """Ask the provider about one operation."""
        ...


class TrackerResolver:
    """`create_issue` on the demo issue tracker: `GET /issues/by-key?key=<operation_id>`."""

    def __init__(self, settings: Settings) -> None:
        url = settings.reconciler.resolver_urls.get("tracker")
        if not url:
            raise ResolverUnavailableError(
                'tracker resolver: set CONVDB_RECONCILER__RESOLVER_URLS=\'{"tracker": "http://..."}\''
            )
        self.url = url.rstrip("/")
        self.timeout = settings.reconciler.lookup_timeout_s

    def lookup(self, operation: OperationState) -> LookupResult:
        """The issue created under this operation's idempotency key, if any."""
        try:
            response = httpx.get(
                f"{self.url}/issues/by-key",
                params={"key": operation.operation_id},
                timeout=self.timeout,
            )
        except httpx.HTTPError as exc:
            return LookupResult(outcome="unknown", detail=f"{type(exc).__name__}: {exc}")
        if response.status_code == 404:
            return LookupResult(outcome="not_found", detail="(404 by key)")
        if response.status_code != 200:
            return LookupResult(outcome="unknown", detail=f"HTTP {response.status_code}")
        try:
            issue = response.json()
        except json.JSONDecodeError:
            return LookupResult(outcome="unknown", detail=f"not JSON: {response.text[:100]}")
        return LookupResult(
            outcome="found",
            provider_receipt=issue.get("receipt"),
            result=json.dumps(issue, sort_keys=True),
        )


def load_resolvers(settings: Settings) -> dict[str, Resolver]:
    """Every installed and configured resolver, by tool name; unconfigured ones are skipped."""
    found: dict[str, Resolver] = {}
    for ep in entry_points(group=GROUP):
        try:
            found[ep.name] = ep.load()(settings)
        except ResolverUnavailableError as exc:
            logger.warning("resolver %s skipped: %s", ep.name, exc)
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"resolver {ep.name!r} ({ep.value}) does not load: {exc}") from exc
    return found
