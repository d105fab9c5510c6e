"""The demo's issue-tracker provider: a real HTTP server honouring idempotency keys."""

from convdb.infra.dev.tracker.server import ProviderState, make_server

__all__ = ["ProviderState", "make_server"]
