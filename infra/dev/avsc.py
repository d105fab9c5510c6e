"""Write a record's next `.avsc` from its pydantic model (`convdb dev schema NAME`).

The checked-in `.avsc` files stay the truth (`tests/schemas/test_schema_agreement.py` compares each
model with its latest schema); this writes the file a model change needs, so a new field or a new
event type is its model plus the generated file, checked and committed. The mapping is the one the
agreement test reads backwards: `str` → string, `int` → long, `float` → double, `bool` → boolean,
aware datetimes → timestamp-micros, `Literal` aliases of `schemas._types` → named enums (defined at
first use, then referenced), `tuple[X, ...]` → array, `X | None` → `["null", X]` defaulting to null.
"""

from __future__ import annotations

import ast
import inspect
import json
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime
from pydantic_core import PydanticUndefined

from convdb.schemas import _types
from convdb.schemas._types import AvroModel
from convdb.schemas.catalog import MODELS, SchemaCatalog, single_object_fingerprint

PRIMITIVES: dict[Any, str] = {str: "string", int: "long", float: "double", bool: "boolean", bytes: "bytes"}


class SchemaWriteError(ValueError):
    """A model field has a type no Avro mapping here covers, or the record is unknown."""


def _enum_docs() -> dict[str, str]:
    """The docstring under each `Literal` alias of `schemas._types` (attribute docstrings)."""
    tree = ast.parse(inspect.getsource(_types))
    docs = {}
    body = tree.body
    for node, after in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.Assign)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    docs[target.id] = after.value.value
    return docs


def _enums() -> dict[Any, str]:
    return {value: name for name, value in vars(_types).items() if typing.get_origin(value) is Literal}


def avro_type(annotation: Any, defined: set[str], where: str) -> Any:
    """The Avro type of a model annotation; enums already in `defined` are referenced by name."""
    if annotation in PRIMITIVES:
        return PRIMITIVES[annotation]
    if annotation is AwareDatetime:
        return {"type": "long", "logicalType": "timestamp-micros"}
    enum = _enums().get(annotation)
    if enum is not None:
        if enum in defined:
            return enum
        defined.add(enum)
        symbols = list(typing.get_args(annotation))
        return {"type": "enum", "name": enum, "symbols": symbols, "doc": _enum_docs().get(enum, "")}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": avro_type(args[0], defined, where)}
    if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return ["null", avro_type(inner, defined, where)]
    raise SchemaWriteError(f"{where}: no Avro mapping for {annotation!r}")


def _enums_defined(avro: Any) -> set[str]:
    """The enum names an Avro type defines (so later fields reference them by name)."""
    if isinstance(avro, list):
        return set().union(*(_enums_defined(a) for a in avro))
    if isinstance(avro, dict):
        if avro.get("type") == "enum":
            return {avro["name"]}
        if avro.get("type") == "array":
            return _enums_defined(avro["items"])
    return set()


def grown_enums(avro: Any, annotation: Any) -> Any:
    """A shipped field's wire type with the symbols its model's `Literal` has gained appended to
    each enum it defines (a reader resolves an appended symbol by name; one it lacks is an
    `UnreadableVersionError`). Everything else stays as shipped."""
    if isinstance(avro, dict) and avro.get("type") == "enum":
        new = [s for s in typing.get_args(annotation) if s not in avro["symbols"]]
        return {**avro, "symbols": [*avro["symbols"], *new]} if new else avro
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(avro, list) and len(args) == 1:
        return [a if a == "null" else grown_enums(a, args[0]) for a in avro]
    if isinstance(avro, dict) and avro.get("type") == "array" and args:
        return {**avro, "items": grown_enums(avro["items"], args[0])}
    return avro


def schema_of(model: type[AvroModel], shipped: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Avro record schema a model mirrors, field by field in the model's order.

    `shipped`: the latest shipped schema, whose fields come first in the model (fields are only
    ever appended); their wire types are kept as shipped (an Avro `int` and a `long` are both a
    Python int), the fields after them are derived from the model.
    """
    kept = {f["name"]: f["type"] for f in (shipped or {}).get("fields", ())}
    defined: set[str] = set()
    fields = []
    for name, info in model.model_fields.items():
        where = f"{model.__name__}.{name}"
        if name == "kind":  # a plain string on the wire, a one-value Literal in Python
            fields.append({"name": name, "type": "string", "default": info.default, "doc": info.description})
            continue
        if name in kept:
            avro = grown_enums(kept[name], info.annotation)
            defined |= _enums_defined(avro)
        else:
            avro = avro_type(info.annotation, defined, where)
        field: dict[str, Any] = {"name": name, "type": avro, "doc": info.description}
        default = info.get_default(call_default_factory=True)
        if default is not PydanticUndefined:
            field["default"] = list(default) if isinstance(default, tuple) else default
        fields.append(field)
    return {
        "type": "record",
        "name": model.__name__,
        "namespace": "convdb",
        "doc": inspect.getdoc(model),
        "fields": fields,
    }


def avro_dir() -> Path:
    """The shipped schemas' folder (the repository's `schemas/avro` in an editable install)."""
    return Path(str(resources.files("convdb.schemas") / "avro"))


def write_next(name: str, folder: Path | None = None) -> Path | None:
    """Write `Name.v<N+1>.avsc` when the model differs from its latest shipped schema; None when
    they agree. Raises SchemaWriteError for an unknown record or an unmappable field."""
    model = MODELS.get(name)
    if model is None:
        raise SchemaWriteError(f"no record model named {name!r} (known: {', '.join(sorted(MODELS))})")
    folder = folder or avro_dir()
    latest = SchemaCatalog.shipped().latest.get(name)
    schema = schema_of(model, latest.schema if latest is not None else None)
    if latest is not None and latest.schema == schema:
        return None
    if latest is not None and single_object_fingerprint(latest.schema) == single_object_fingerprint(schema):
        raise SchemaWriteError(
            f"{name}: the model differs from {name}.v{latest.version}.avsc only in docs or defaults, which "
            "the schema fingerprint does not cover: a new version would not be told apart on the wire; "
            "change the model back, or add a field"
        )
    version = latest.version + 1 if latest is not None else 1
    path = folder / f"{name}.v{version}.avsc"
    path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
    return path
