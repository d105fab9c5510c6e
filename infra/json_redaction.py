"""Credentials hidden in a JSON text without breaking it (webhook payloads, imported files).

The registry redacts text; a JSON text redacted as text stays valid JSON as long as no match
spans a quote or an escape. When one does, the JSON is redacted string by string instead (keys
and values), so what is written always parses.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from convdb.infra.secrets import SecretsRegistry


def redact_json(secrets: SecretsRegistry, text: str) -> str:
    """`text` (JSON) with every registered or detected credential replaced by its placeholder."""
    redacted = secrets.redact(text)
    if redacted == text:
        return text
    try:
        json.loads(redacted)
    except ValueError:
        whole = _strings(json.loads(text), secrets.redact)
        return json.dumps(whole, separators=(",", ":"), ensure_ascii=False)
    return redacted


def _strings(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with every string in it (object keys included) redacted. Recursive: the payloads
    it is given passed the nesting bound of `convdb.schemas.validation.json_problem` first."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_strings(item, redact) for item in value]
    if isinstance(value, dict):
        return {redact(key): _strings(item, redact) for key, item in value.items()}
    return value
