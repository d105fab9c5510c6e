"""Hypothesis strategies that build a valid instance of every record model, from its fields."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime
from typing import Any, Literal

from hypothesis import strategies as st
from pydantic import AwareDatetime

from convdb.schemas._types import AvroModel
from convdb.schemas.catalog import MODELS
from convdb.schemas.validation import ID_FIELDS, OPERATION_FIELDS

AVRO_LONG_MIN = -(2**63)
AVRO_LONG_MAX = 2**63 - 1

# Avro strings are UTF-8: lone surrogates cannot be written, so never generate them; NUL breaks
# the text rule of `schemas.validation`, and identifiers are printable (tests/schemas/test_validation.py
# proves records that break the rules are refused).
texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
identifiers = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("C", "Z"), exclude_characters="/"),
    min_size=1,
    max_size=40,
)

# timestamp-micros keeps microseconds; datetimes are aware and UTC like the ones convdb writes.
timestamps = st.datetimes(
    min_value=datetime(1, 1, 2),
    max_value=datetime(9999, 12, 30),
    timezones=st.just(UTC),
)


def strategy_for(annotation: Any, name: str = "") -> st.SearchStrategy[Any]:
    """A strategy for one field annotation of a record model (identifier fields get identifiers)."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return st.sampled_from(typing.get_args(annotation))
    if origin in (types.UnionType, typing.Union):
        branches = [a for a in typing.get_args(annotation) if a is not type(None)]
        return st.none() | st.one_of([strategy_for(a, name) for a in branches])
    if origin is tuple:
        item, _ellipsis = typing.get_args(annotation)
        return st.lists(strategy_for(item, name), max_size=5).map(tuple)
    if annotation is str and name in ID_FIELDS | OPERATION_FIELDS:
        return identifiers
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: texts,
        bool: st.booleans(),
        bytes: st.binary(max_size=40),
        int: st.integers(AVRO_LONG_MIN, AVRO_LONG_MAX),
        float: st.floats(allow_nan=False, allow_infinity=False),
        AwareDatetime: timestamps,
    }
    if annotation in simple:
        return simple[annotation]
    raise TypeError(f"no strategy for field annotation {annotation!r}")


def record_of(model: type[AvroModel]) -> st.SearchStrategy[AvroModel]:
    """Valid instances of one model: every field drawn, defaults included."""
    fields = {name: strategy_for(info.annotation, name) for name, info in model.model_fields.items()}
    return st.fixed_dictionaries(fields).map(lambda values: model(**values))


RECORD_STRATEGIES: dict[str, st.SearchStrategy[AvroModel]] = {
    name: record_of(model) for name, model in MODELS.items()
}
"""A strategy per record name (Avro record name = class name)."""

any_record: st.SearchStrategy[AvroModel] = st.one_of(list(RECORD_STRATEGIES.values()))
"""An instance of any record model."""


def sample_value(name: str, annotation: Any, index: int) -> Any:
    """A fixed, non-default value for one field (deterministic, for broker round trips)."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        return choices[index % len(choices)]
    if origin in (types.UnionType, typing.Union):
        branch = next(a for a in typing.get_args(annotation) if a is not type(None))
        return sample_value(name, branch, index)
    if origin is tuple:
        item, _ellipsis = typing.get_args(annotation)
        if item is not str:
            return (sample_value(name, item, index), sample_value(name, item, index + 1))
        return (f"{name}-a", f"{name}-b ✓")
    values: dict[Any, Any] = {
        str: f"{name} #{index} — ünïcødé",
        bool: True,
        int: 1_000_000_007 * (index + 1),
        float: 0.125 * (index + 1),
        bytes: f"{name} #{index}".encode() + b"\x00\xff",
        AwareDatetime: datetime(2025, 6, 1, 12, 30, index, 123456, tzinfo=UTC),
    }
    return values[annotation]


def sample_record(model: type[AvroModel]) -> AvroModel:
    """A deterministic instance of `model` with every field set to a non-default value."""
    values = {
        name: sample_value(name, info.annotation, i)
        for i, (name, info) in enumerate(model.model_fields.items())
    }
    return model(**values)
