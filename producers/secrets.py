"""Secrets registry: values are known to tools, and replaced by `<secret:NAME>` before publishing."""

from __future__ import annotations

import re
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_PLACEHOLDER = re.compile(r"<secret:([A-Za-z0-9_.-]+)>")


class SecretsRegistry:
    """Named secret values; `redact` hides them, `reveal` puts them back for a tool call."""

    def __init__(self, secrets: dict[str, str] | None = None) -> None:
        self._values: dict[str, str] = {}
        for name, value in (secrets or {}).items():
            self.register(name, value)

    def register(self, name: str, value: str) -> None:
        """Add a secret; empty values are refused because they would match everywhere."""
        if not value:
            raise ValueError(f"secret {name!r} has an empty value")
        if not _PLACEHOLDER.fullmatch(f"<secret:{name}>"):
            raise ValueError(f"secret name {name!r} must match [A-Za-z0-9_.-]+")
        self._values[name] = value

    @property
    def names(self) -> tuple[str, ...]:
        """Registered names (never values), for snapshots."""
        return tuple(sorted(self._values))

    def redact(self, text: str) -> str:
        """Replace every registered value by its placeholder (longest values first)."""
        for name, value in sorted(self._values.items(), key=lambda kv: -len(kv[1])):
            if value in text:
                text = text.replace(value, f"<secret:{name}>")
        return text

    def reveal(self, text: str) -> str:
        """Replace placeholders of registered secrets by their values (tool input only)."""
        return _PLACEHOLDER.sub(lambda m: self._values.get(m.group(1), m.group(0)), text)

    def redact_record(self, record: M) -> M:
        """A copy of a record with every string field (and tuple of strings) redacted."""
        if not self._values:
            return record
        update: dict[str, Any] = {}
        for field, value in record.__dict__.items():
            if isinstance(value, str):
                clean: Any = self.redact(value)
            elif isinstance(value, tuple) and all(isinstance(v, str) for v in value):
                clean = tuple(self.redact(v) for v in value)
            else:
                continue
            if clean != value:
                update[field] = clean
        return record.model_copy(update=update) if update else record
