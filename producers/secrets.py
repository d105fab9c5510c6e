"""Secrets registry for the runtime: `infra.secrets` (shared with the API and the log formatters)."""

from __future__ import annotations

from infra.secrets import SecretsRegistry, redact_patterns

__all__ = ["SecretsRegistry", "redact_patterns"]
