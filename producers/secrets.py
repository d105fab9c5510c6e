"""Secrets registry for the runtime: `convdb.infra.secrets` (shared with the API and the log formatters)."""

from __future__ import annotations

from convdb.infra.secrets import SecretsRegistry, redact_patterns

__all__ = ["SecretsRegistry", "redact_patterns"]
