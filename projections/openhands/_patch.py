"""The difference between two JSON objects as data, and applying it: how OpenHands fields that
no convdb field carries travel in `extension`.

A patch turns `base` (the JSON rebuilt from convdb's fields) into `target` (what OpenHands
sent): ``{"=": {key: value}, "-": [key], ">": {key: patch}}`` sets, deletes, and descends into
objects present on both sides, and into arrays of the same length on both sides (an array's
patch is ``{"[": {index: patch}, "[=": {index: value}}``). Descending into arrays keeps the text
convdb already holds out of the patch: a content list that differs from the rebuilt one only in
an item's flags costs the flags, not a second copy of its text. Values are kept verbatim (nulls
included), and equality is strict about JSON types (``1``, ``1.0`` and ``true`` differ), so
`apply(base, diff(base, target)) == target` holds for every pair of JSON objects.

Recursion follows the nesting of the values: the payload checks bound it (`MAX_JSON_DEPTH`).
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


def _descends(base: Any, target: Any) -> bool:
    """Whether the patch describes `target` by its difference from `base` (else: set whole)."""
    if isinstance(base, dict) and isinstance(target, dict):
        return True
    return isinstance(base, list) and isinstance(target, list) and len(base) == len(target)


def _inner(base: Any, target: Any) -> JsonObject:
    return diff(base, target) if isinstance(target, dict) else _diff_list(base, target)


def diff(base: JsonObject, target: JsonObject) -> JsonObject:
    """The patch that turns `base` into `target` (``{}`` when they are the same)."""
    sets: JsonObject = {}
    descents: JsonObject = {}
    for key, value in target.items():
        if key not in base:
            sets[key] = value
        elif _descends(base[key], value):
            inner = _inner(base[key], value)
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


def _diff_list(base: list[Any], target: list[Any]) -> JsonObject:
    """The patch of two arrays of the same length, item by item (indices as text: JSON keys)."""
    sets: JsonObject = {}
    descents: JsonObject = {}
    for index, (old, new) in enumerate(zip(base, target, strict=True)):
        if _descends(old, new):
            inner = _inner(old, new)
            if inner:
                descents[str(index)] = inner
        elif not same(old, new):
            sets[str(index)] = new
    patch: JsonObject = {}
    if descents:
        patch["["] = descents
    if sets:
        patch["[="] = sets
    return patch


def apply(base: JsonObject, patch: JsonObject) -> JsonObject:
    """`base` with `patch` applied (a new object; `base` is not changed)."""
    out = dict(base)
    for key in patch.get("-", ()):
        out.pop(key, None)
    out.update(patch.get("=", {}))
    for key, inner in patch.get(">", {}).items():
        out[key] = _apply_inner(out.get(key), inner)
    return out


def _apply_inner(base: Any, inner: JsonObject) -> Any:
    if "[" in inner or "[=" in inner:
        items = list(base) if isinstance(base, list) else []
        for index, value in inner.get("[=", {}).items():
            items[int(index)] = value
        for index, item_patch in inner.get("[", {}).items():
            items[int(index)] = _apply_inner(items[int(index)], item_patch)
        return items
    return apply(base if isinstance(base, dict) else {}, inner)
