"""The difference between two JSON objects as data, and applying it: how OpenHands fields that
no convdb field carries travel in `extension`.

A patch turns `base` (the JSON rebuilt from convdb's fields) into `target` (what OpenHands
sent): ``{"=": {key: value}, "-": [key], ">": {key: patch}}`` sets, deletes, and descends into
objects present on both sides. Values are kept verbatim (nulls included), and equality is
strict about JSON types (``1``, ``1.0`` and ``true`` differ), so `apply(base, diff(base,
target)) == target` holds for every pair of JSON objects.
"""

from __future__ import annotations

from typing import Any

JsonObject = dict[str, Any]


def same(a: Any, b: Any) -> bool:
    """JSON equality that tells ``1``, ``1.0`` and ``true`` apart (Python's `==` does not)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def diff(base: JsonObject, target: JsonObject) -> JsonObject:
    """The patch that turns `base` into `target` (``{}`` when they are the same)."""
    sets: JsonObject = {}
    descents: JsonObject = {}
    for key, value in target.items():
        if key not in base:
            sets[key] = value
        elif isinstance(value, dict) and isinstance(base[key], dict):
            inner = diff(base[key], value)
            if inner:
                descents[key] = inner
        elif not same(base[key], value):
            sets[key] = value
    deletes = [key for key in base if key not in target]
    patch: JsonObject = {}
    if sets:
        patch["="] = sets
    if deletes:
        patch["-"] = deletes
    if descents:
        patch[">"] = descents
    return patch


def apply(base: JsonObject, patch: JsonObject) -> JsonObject:
    """`base` with `patch` applied (a new object; `base` is not changed)."""
    out = dict(base)
    for key in patch.get("-", ()):
        out.pop(key, None)
    out.update(patch.get("=", {}))
    for key, inner in patch.get(">", {}).items():
        out[key] = apply(out.get(key) or {}, inner)
    return out
