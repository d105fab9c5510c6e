"""Model ⇄ schema: every pydantic mirror agrees with its `.avsc` (fields, order, types, defaults, docs)."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal

import pytest
from pydantic import AwareDatetime
from pydantic_core import PydanticUndefined

from convdb.schemas import _types
from convdb.schemas.catalog import MODELS, SchemaVersion, shipped_catalog

CATALOG = shipped_catalog()
LATEST = sorted(CATALOG.latest.values(), key=lambda v: v.name)
OLDER = [v for v in CATALOG.versions if CATALOG.latest[v.name] is not v]
PRIMITIVES: dict[str, Any] = {
    "string": str,
    "long": int,
    "int": int,
    "double": float,
    "boolean": bool,
    "bytes": bytes,
}
LITERAL_ALIASES = {name: value for name, value in vars(_types).items() if typing.get_origin(value) is Literal}


OLDER_VERSION = "(an older version)"
"""Marks a `named` dict checked against an older schema version, whose enums may lack later symbols."""


def expected_annotation(avro: Any, named: dict[str, Any]) -> Any:
    """The Python annotation an Avro type must be mirrored by (named: enums seen so far)."""
    if isinstance(avro, str):
        if avro in PRIMITIVES:
            return PRIMITIVES[avro]
        return named[avro]
    if isinstance(avro, list):
        if len(avro) != 2 or avro[0] != "null":
            raise AssertionError(f"only ['null', X] unions are used, got {avro}")
        return expected_annotation(avro[1], named) | None
    kind = avro["type"]
    if kind == "long" and avro.get("logicalType") == "timestamp-micros":
        return AwareDatetime
    if kind == "enum":
        alias = LITERAL_ALIASES.get(avro["name"])
        assert alias is not None, f"enum {avro['name']} has no Literal alias of that name in _types"
        symbols = list(typing.get_args(alias))
        # An older version may know fewer symbols: an enum only grows, at its end.
        assert symbols[: len(avro["symbols"])] == avro["symbols"], avro["name"]
        assert named.get(OLDER_VERSION) or symbols == avro["symbols"], avro["name"]
        named[avro["name"]] = alias
        return alias
    if kind == "array":
        return tuple[expected_annotation(avro["items"], named), ...]  # type: ignore[misc]
    raise AssertionError(f"unmapped Avro type {avro}")


def model_default(model: type, name: str) -> Any:
    """The model's default for a field, in Avro JSON form (tuples as lists); PydanticUndefined if none."""
    info = model.model_fields[name]  # type: ignore[attr-defined]
    default = info.get_default(call_default_factory=True)
    return list(default) if isinstance(default, tuple) else default


def check_field(model: type, field: dict[str, Any], named: dict[str, Any]) -> None:
    name = field["name"]
    info = model.model_fields[name]  # type: ignore[attr-defined]
    annotation = info.annotation
    if name == "kind":
        # `kind` is a plain string on the wire (unions stay cheap) and a one-value Literal in Python.
        assert field["type"] == "string"
        assert typing.get_args(annotation) == (field["default"],), model.__name__
    else:
        assert annotation == expected_annotation(field["type"], named), f"{model.__name__}.{name}"
    if "default" in field:
        assert model_default(model, name) == field["default"], f"{model.__name__}.{name} default"
    else:
        assert info.is_required(), f"{model.__name__}.{name} has a default the schema lacks"
    nullable = isinstance(field["type"], list)
    assert nullable == (type(None) in typing.get_args(annotation)), f"{model.__name__}.{name} nullability"
    if nullable:
        assert field.get("default", PydanticUndefined) is None, "nullable fields default to null"
    assert field.get("doc") == info.description, f"{model.__name__}.{name} doc"


@pytest.mark.parametrize("version", LATEST, ids=[v.name for v in LATEST])
def test_model_mirrors_its_latest_schema(version: SchemaVersion) -> None:
    model = MODELS[version.name]
    schema = version.schema
    assert schema["type"] == "record"
    assert schema["name"] == model.__name__
    assert schema["namespace"] == "convdb"
    assert schema.get("doc") == inspect.getdoc(model)
    assert [f["name"] for f in schema["fields"]] == list(model.model_fields)
    assert model.model_config.get("frozen") and model.model_config.get("extra") == "forbid"
    named: dict[str, Any] = {}
    for field in schema["fields"]:
        check_field(model, field, named)


@pytest.mark.parametrize("version", OLDER, ids=[f"{v.name}.v{v.version}" for v in OLDER])
def test_older_versions_are_a_prefix_of_the_model(version: SchemaVersion) -> None:
    model = MODELS[version.name]
    names = [f["name"] for f in version.schema["fields"]]
    assert names == list(model.model_fields)[: len(names)], "fields are only ever appended"
    named: dict[str, Any] = {OLDER_VERSION: True}
    for field in version.schema["fields"]:
        check_field(model, field, named)
    added = list(model.model_fields)[len(names) :]
    for name in added:
        assert not model.model_fields[name].is_required(), f"{name} was added without a default"


def test_every_model_has_exactly_one_latest_schema() -> None:
    assert set(CATALOG.latest) == set(MODELS)
    assert len({v.fingerprint for v in CATALOG.versions}) == len(CATALOG.versions)


def test_every_record_is_keyed_by_conversation_and_named_by_kind() -> None:
    """`AvroModel` declares these to the type checker; every model must really have them."""
    for model in MODELS.values():
        fields = model.model_fields
        assert fields["conversation_id"].annotation is str and fields["tenant_id"].annotation is str
        assert fields["kind"].default == typing.get_args(fields["kind"].annotation)[0], model.__name__


def test_union_types_cover_only_optional_fields() -> None:
    for model in MODELS.values():
        for name, info in model.model_fields.items():
            if typing.get_origin(info.annotation) in (types.UnionType, typing.Union):
                assert info.default is None, f"{model.__name__}.{name}"
