"""The shipped `.avsc` files, parsed once: reader schemas, writer versions and fingerprints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from convdb.schemas._types import AvroModel
from convdb.schemas.events import EVENT_TYPES
from convdb.schemas.records import RECORD_TYPES

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
"""Avro single-object encoding marker (Avro spec, 'Single-object encoding')."""

MODELS: dict[str, type[AvroModel]] = {m.__name__: m for m in (*EVENT_TYPES, *RECORD_TYPES)}
"""Every record model by Avro record name (which equals the class name)."""


@dataclass(frozen=True)
class SchemaVersion:
    """One shipped version of one record schema."""

    name: str
    version: int
    schema: dict[str, Any]
    parsed: dict[str, Any]
    fingerprint: bytes

    @property
    def schema_json(self) -> str:
        """The schema as compact JSON text (what a schema registry stores)."""
        return json.dumps(self.schema, separators=(",", ":"))

    @property
    def header(self) -> bytes:
        """Single-object header: magic + little-endian CRC-64-AVRO fingerprint."""
        return SINGLE_OBJECT_MAGIC + self.fingerprint


def single_object_fingerprint(schema: dict[str, Any]) -> bytes:
    """CRC-64-AVRO fingerprint of a schema's canonical form, as the 8 little-endian bytes."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))


class SchemaCatalog:
    """All schema versions in a directory of `Name.vN.avsc` files; the newest is the reader."""

    def __init__(self, versions: list[SchemaVersion]) -> None:
        self.versions = versions
        self.by_fingerprint = {v.fingerprint: v for v in versions}
        self.latest: dict[str, SchemaVersion] = {}
        for v in sorted(versions, key=lambda v: v.version):
            self.latest[v.name] = v

    @classmethod
    def shipped(cls) -> SchemaCatalog:
        """The catalog of the `.avsc` files shipped in `schemas/avro/`."""
        root = resources.files("convdb.schemas") / "avro"
        versions = []
        for entry in sorted(root.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".avsc"):
                name, version, _ = entry.name.split(".")
                versions.append(load_version(name, int(version.removeprefix("v")), entry.read_text()))
        return cls(versions)

    def restricted(self, name: str, version: int) -> SchemaCatalog:
        """This catalog with `name` pinned to one version as reader (for evolution tests and old readers).

        Newer versions stay known as writers, so the pinned reader resolves their data onto its schema.
        """
        pinned = SchemaCatalog(self.versions)
        matches = [v for v in self.versions if v.name == name and v.version == version]
        if not matches:
            raise KeyError(f"no shipped schema {name} v{version}")
        pinned.latest[name] = matches[0]
        return pinned


def load_version(name: str, version: int, text: str) -> SchemaVersion:
    """Parse one `.avsc` text into a `SchemaVersion`."""
    schema = json.loads(text)
    if schema.get("name") != name:
        raise ValueError(f"schema file for {name} v{version} declares record {schema.get('name')!r}")
    return SchemaVersion(name, version, schema, parse_record(schema), single_object_fingerprint(schema))


def parse_record(schema: dict[str, Any]) -> dict[str, Any]:
    """fastavro's parsed form of a record schema (a dict, unlike a primitive or union schema's)."""
    parsed = parse_schema(schema)
    if not isinstance(parsed, dict):
        raise ValueError(f"not a record schema: {str(schema)[:80]}")
    return parsed


_SHIPPED: SchemaCatalog | None = None


def shipped_catalog() -> SchemaCatalog:
    """The shipped catalog, parsed on first use and cached (parsing costs milliseconds)."""
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = SchemaCatalog.shipped()
    return _SHIPPED
