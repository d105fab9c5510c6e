"""Resolvers: plugins that ask a provider what happened to an operation (`lookup`).

A resolver answers for one tool, by the name it is registered under in the
`convdb.resolvers` entry-point group (name = tool name). The entry point is a factory (a class
or a function) called with the `Settings`; it returns None, or raises
`ResolverUnavailableError`, when the resolver is not configured here. A third party adds one
without touching convdb:

    [project.entry-points."convdb.resolvers"]
    charge_card = "mypkg.payments:ChargeResolver"

The built-in `create_issue` resolver is the tracker tool's own lookup
(`convdb.producers.tools.tracker:tracker_resolver`), so the runtime and the reconciler ask the provider
with one implementation. `lookup` is synchronous (the reconciler runs it in a thread) and never
raises for a provider that cannot tell: it answers `unknown` with the reason.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import Protocol

from convdb.consumers.errors import PluginError
from convdb.infra.settings import Settings
from convdb.projections.effects import LookupResult, OperationState

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


def load_resolvers(settings: Settings) -> dict[str, Resolver]:
    """Every installed and configured resolver, by tool name; unconfigured ones are skipped."""
    found: dict[str, Resolver] = {}
    for ep in entry_points(group=GROUP):
        try:
            resolver = ep.load()(settings)
        except ResolverUnavailableError as exc:
            logger.warning("resolver %s skipped: %s", ep.name, exc)
            continue
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"resolver {ep.name!r} ({ep.value}) does not load: {exc}") from exc
        if resolver is None:
            logger.warning("resolver %s skipped: not configured here", ep.name)
            continue
        found[ep.name] = resolver
    return found
