"""The effect reconciler: a faust-streaming app over events, effects and receipts (DESIGN §7)."""

from convdb.consumers.reconciler.app import CHANGELOG, INPUTS, Worker, build_app, faust_config
from convdb.consumers.reconciler.core import Reconciler
from convdb.consumers.reconciler.resolvers import Resolver, ResolverUnavailableError, load_resolvers

__all__ = [
    "CHANGELOG",
    "INPUTS",
    "Reconciler",
    "Resolver",
    "ResolverUnavailableError",
    "Worker",
    "build_app",
    "faust_config",
    "load_resolvers",
]
