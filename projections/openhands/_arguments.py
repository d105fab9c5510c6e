"""An action's raw `tool_call.arguments` told by how it differs from convdb's canonical `arguments`.

OpenHands keeps the LLM's arguments text as it came (key order, spacing), convdb keeps canonical
JSON (sorted keys, no spaces). Carrying the raw text in the patch would store every argument
twice (a file written by a tool: its text twice). Most raw texts are canonical JSON re-spaced and
re-ordered, so the patch carries only that: a format and the key order of each object (only
where it is not sorted), checked at ingest to give the raw text back exactly; else the text.
"""

from __future__ import annotations

import json
from typing import Any

from convdb.projections.openhands._fields import canonical_json
from convdb.schemas.validation import json_problem

WORTH = 1024
"""Shorter raw texts are kept as they are: the second copy costs less than spelling it back."""
REFERENCE = "$canonical"
"""Key of the reference that replaces the raw text in a patch (the raw text is always a string)."""

_FORMATS: dict[str, tuple[tuple[str, str], bool]] = {
    "python": ((", ", ": "), True),
    "spaced": ((", ", ": "), False),
    "compact": ((",", ":"), False),
    "ascii": ((",", ":"), True),
}
"""Name -> (separators, ensure_ascii) of the spellings a raw text is tried against."""


def _orders(value: Any) -> list[list[str]]:
    """The key order of every object in `value`, depth first (the order `_reordered` reads them)."""
    found: list[list[str]] = []
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            found.append(list(item))
            pending.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            pending.extend(reversed(item))
    return found


def _reordered(value: Any, orders: list[list[str]], at: list[int]) -> Any:
    if isinstance(value, dict):
        keys = orders[at[0]] if orders else sorted(value)
        at[0] += 1
        return {k: _reordered(value[k], orders, at) for k in keys}
    if isinstance(value, list):
        return [_reordered(v, orders, at) for v in value]
    return value


def spell(canonical: str, reference: dict[str, Any]) -> str:
    """The raw text a reference stands for (`reference` from `reference_for`)."""
    separators, ascii_only = _FORMATS[reference["format"]]
    value = _reordered(json.loads(canonical), reference.get("orders", []), [0])
    return json.dumps(value, separators=separators, ensure_ascii=ascii_only)


def reference_for(canonical: str, raw: str) -> dict[str, Any] | None:
    """A reference that spells `raw` from `canonical` exactly, or None (the patch keeps `raw`)."""
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict | list) or json_problem(parsed) is not None:
        return None
    if canonical_json(parsed) != canonical:
        return None
    orders = _orders(parsed)
    sorted_already = all(keys == sorted(keys) for keys in orders)
    for name in _FORMATS:
        reference: dict[str, Any] = {"format": name}
        if not sorted_already:
            reference["orders"] = orders
        if spell(canonical, reference) == raw:
            return reference
    return None


def compact(patch: dict[str, Any], canonical: str) -> dict[str, Any]:
    """`patch` of an ActionEvent with its raw arguments text replaced by a reference, when one
    spells it and is shorter."""
    call = patch.get(">", {}).get("tool_call", {})
    raw = call.get("=", {}).get("arguments")
    if not isinstance(raw, str) or len(raw) < WORTH:
        return patch
    reference = reference_for(canonical, raw)
    if reference is None or len(json.dumps(reference)) >= len(raw):
        return patch
    sets = {**call["="], "arguments": {REFERENCE: reference}}
    return {**patch, ">": {**patch[">"], "tool_call": {**call, "=": sets}}}


def expand(oh: dict[str, Any], canonical: str) -> dict[str, Any]:
    """An exported ActionEvent with a referenced arguments text spelled out (`compact` undone)."""
    call = oh.get("tool_call")
    if not isinstance(call, dict):
        return oh
    arguments = call.get("arguments")
    if not isinstance(arguments, dict) or REFERENCE not in arguments:
        return oh
    return {**oh, "tool_call": {**call, "arguments": spell(canonical, arguments[REFERENCE])}}
