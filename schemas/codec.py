"""The one place fastavro is called: models to Avro bytes and back.

Two framings share the Avro binary payload:
- single-object encoding (default): ``C3 01`` + CRC-64-AVRO fingerprint + payload; the
  reader resolves the writer's schema by fingerprint among every shipped version;
- Confluent framing (with a schema registry): ``00`` + 4-byte schema id + payload.

Records are read with their writer's schema, never with a narrower reader schema that projects
out the fields a consumer does not read: fastavro's resolving reader (reader != writer) took 1.8x
the time of the writer's own on the bench's events (18 against 10 us) even when it skipped six
fields, and the read side's runner hosts the index, whose words come from every text field.
"""

from __future__ import annotations

from collections.abc import Callable
from io import BytesIO
from typing import Any, Protocol, TypeVar, overload

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from pydantic import ValidationError

from convdb.schemas._trusted import Build, trusted_builder
from convdb.schemas._types import AvroModel
from convdb.schemas.catalog import (
    MODELS,
    SINGLE_OBJECT_MAGIC,
    SchemaCatalog,
    SchemaVersion,
    parse_record,
    shipped_catalog,
)
from convdb.schemas.errors import (
    CorruptRecordError,
    InvalidRecordError,
    NotAvroError,
    TruncatedRecordError,
    UnexpectedRecordError,
    UnknownFingerprintError,
    UnreadableVersionError,
)
from convdb.schemas.validation import record_checker, record_problem

CONFLUENT_MAGIC = b"\x00"

_Direct = tuple[type[AvroModel], dict[str, Any], Build, Callable[[AvroModel], str | None], str]
"""A writer's direct decoding path: its model, parsed schema, builder, rule check and name."""


M = TypeVar("M", bound=AvroModel)


class Codec(Protocol):
    """Turns record models into bytes and back."""

    def encode(self, record: AvroModel) -> bytes:
        """Encode one record. Raises `InvalidRecordError`."""
        ...

    @overload
    def decode(self, data: bytes, expect: None = None) -> AvroModel: ...
    @overload
    def decode(self, data: bytes, expect: tuple[type[M], ...]) -> M: ...
    def decode(self, data: bytes, expect: tuple[type[M], ...] | None = None) -> AvroModel:
        """Decode one record, of one of the `expect` types if given. Raises a `SchemaError`."""
        ...


class _Decoder:
    """The typed `decode` of both codecs: the record is of one of the expected types, or it raises."""

    @overload
    def decode(self, data: bytes, expect: None = None) -> AvroModel: ...
    @overload
    def decode(self, data: bytes, expect: tuple[type[M], ...]) -> M: ...
    def decode(self, data: bytes, expect: tuple[type[M], ...] | None = None) -> AvroModel:
        """Decode one record, of one of the `expect` types if given.

        Raises:
            SchemaError: garbage (`NotAvroError`), an unknown writer schema, a truncated or
                corrupt payload, an invalid record, or one of another type (`UnexpectedRecordError`).
        """
        return self._decode(data, expect)

    def _decode(self, data: bytes, expect: tuple[type[AvroModel], ...] | None) -> AvroModel:
        raise NotImplementedError


def _write_payload(buf: BytesIO, parsed: dict[str, Any], record: AvroModel) -> None:
    problem = record_problem(record)
    if problem is not None:
        raise InvalidRecordError(f"cannot encode {type(record).__name__}: {problem}")
    try:
        # A pydantic model's __dict__ holds exactly its fields, already typed for Avro.
        schemaless_writer(buf, parsed, record.__dict__, strict=True)
    except (ValueError, TypeError, KeyError, OverflowError, UnicodeEncodeError) as exc:
        raise InvalidRecordError(f"cannot encode {type(record).__name__}: {exc}") from exc


def _read_payload(
    data: bytes, offset: int, writer: dict[str, Any], reader: dict[str, Any] | None, what: str
) -> dict[str, Any]:
    buf = BytesIO(data)
    buf.seek(offset)
    try:
        record = schemaless_reader(buf, writer, reader)
    except EOFError as exc:
        raise TruncatedRecordError(
            f"{what}: payload ends early ({len(data) - offset} bytes after the header)"
        ) from exc
    except SchemaResolutionError as exc:
        raise UnreadableVersionError(f"{what}: this reader's schema cannot hold it: {exc}") from exc
    except (ValueError, TypeError, IndexError, KeyError, UnicodeDecodeError, OverflowError) as exc:
        raise CorruptRecordError(f"{what}: payload does not decode: {exc}") from exc
    if buf.tell() != len(data):
        raise CorruptRecordError(f"{what}: {len(data) - buf.tell()} bytes left after the record")
    if not isinstance(record, dict):
        raise CorruptRecordError(f"{what}: decodes to a {type(record).__name__}, not a record")
    return record


def _to_model(
    name: str, record: dict[str, Any], expect: tuple[type[AvroModel], ...] | None, build: Build | None = None
) -> AvroModel:
    model = MODELS.get(name)
    if model is None:
        raise UnknownFingerprintError(f"record {name!r} has no model in this version of convdb")
    if expect is not None and model not in expect:
        allowed = ", ".join(m.__name__ for m in expect)
        raise UnexpectedRecordError(f"got a {name} where only {allowed} are allowed")
    built = build(record) if build is not None else None
    if built is None:
        try:
            built = model.model_validate(record)
        except ValidationError as exc:
            raise InvalidRecordError(f"{name} does not validate: {exc}") from exc
    # Avro guarantees types, not convdb's rules: a foreign or older producer's record that breaks
    # them is a data error here, before any store sees it.
    problem = record_problem(built)
    if problem is not None:
        raise InvalidRecordError(f"{name}: {problem}")
    return built


class SingleObjectCodec(_Decoder):
    """Avro single-object encoding; writer schemas resolved from the shipped versions."""

    def __init__(self, catalog: SchemaCatalog | None = None) -> None:
        self.catalog = catalog or shipped_catalog()
        self._builders: dict[bytes, Build | None] = {}
        self._direct: dict[bytes, _Direct | None] = {}
        """Per writer fingerprint: what `_decode` needs for a record it builds directly, or None."""
        self._writers: dict[type[AvroModel], tuple[bytes, dict[str, Any]]] = {}
        """Per model: the header and parsed schema of its newest version (looked up once)."""

    def _builder(self, version: SchemaVersion) -> Build | None:
        # Only for a writer that is also the reader: then the decoded dict has the model's fields.
        if version.fingerprint not in self._builders:
            model = MODELS.get(version.name)
            build = None if model is None else trusted_builder(model, version.schema)
            self._builders[version.fingerprint] = build
        return self._builders[version.fingerprint]

    def encode(self, record: AvroModel) -> bytes:
        """Encode with the newest schema version of the record's type."""
        writer = self._writers.get(type(record))
        if writer is None:
            version = self.catalog.latest[type(record).__name__]
            writer = self._writers[type(record)] = (version.header, version.parsed)
        header, parsed = writer
        buf = BytesIO(header)
        buf.seek(len(header))
        _write_payload(buf, parsed, record)
        return buf.getvalue()

    def _direct_path(self, fingerprint: bytes) -> _Direct | None:
        """The direct path of a writer that is its record's newest version (the usual case), or None.

        Remembered for the shipped writers only: unknown fingerprints (garbage) must not grow it.
        """
        direct = self._direct.get(fingerprint)
        if direct is not None or fingerprint in self._direct:
            return direct
        writer = self.catalog.by_fingerprint.get(fingerprint)
        if writer is None:
            return None
        model = MODELS.get(writer.name)
        build = self._builder(writer) if self.catalog.latest[writer.name] is writer else None
        if model is not None and build is not None:
            direct = (model, writer.parsed, build, record_checker(model), f"{writer.name} v{writer.version}")
        self._direct[fingerprint] = direct
        return direct

    def _decode(self, data: bytes, expect: tuple[type[AvroModel], ...] | None) -> AvroModel:
        """Decode bytes written by any shipped schema version into the current model.

        A record of its type's newest version, of an expected type, is read, built and checked by
        one precomputed path (the consuming thread's per-record work beside fastavro); anything
        else (an older version, an unexpected type, a record the builder hands to validation, a
        broken rule) takes the general path below, which raises the errors.
        """
        direct = self._direct_path(bytes(data[2:10])) if data[:2] == SINGLE_OBJECT_MAGIC else None
        if direct is not None:
            model, parsed, build, check, what = direct
            if expect is None or model in expect:
                built = build(_read_payload(data, 10, parsed, None, what))
                if built is not None and check(built) is None:
                    return built
        return self._decode_general(data, expect)

    def _decode_general(self, data: bytes, expect: tuple[type[AvroModel], ...] | None) -> AvroModel:
        """Any record: checks the framing, resolves an older writer against the newest reader."""
        if len(data) < 10 or data[:2] != SINGLE_OBJECT_MAGIC:
            head = bytes(data[:4]).hex() or "empty"
            raise NotAvroError(f"not Avro single-object encoded (starts with {head}, {len(data)} bytes)")
        writer = self.catalog.by_fingerprint.get(bytes(data[2:10]))
        if writer is None:
            raise UnknownFingerprintError(
                f"unknown schema fingerprint {bytes(data[2:10]).hex()}: written by a newer or "
                f"foreign producer ({len(self.catalog.by_fingerprint)} versions known)"
            )
        reader = self.catalog.latest[writer.name]
        what = f"{writer.name} v{writer.version}"
        if reader is writer:
            record = _read_payload(data, 10, writer.parsed, None, what)
            return _to_model(writer.name, record, expect, self._builder(writer))
        record = _read_payload(data, 10, writer.parsed, reader.parsed, what)
        return _to_model(writer.name, record, expect)


class ConfluentCodec(_Decoder):
    """Confluent wire format, schemas registered per record name (RecordNameStrategy)."""

    def __init__(self, registry_url: str, catalog: SchemaCatalog | None = None) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.catalog = catalog or shipped_catalog()
        # new_client, not the constructor: it maps a mock:// URL to the in-memory registry.
        self.client = SchemaRegistryClient.new_client({"url": registry_url})
        self._ids: dict[str, int] = {}
        self._writers: dict[int, tuple[str, dict[str, Any]]] = {}

    def _schema_id(self, name: str) -> int:
        from confluent_kafka.schema_registry import Schema

        if name not in self._ids:
            version = self.catalog.latest[name]
            schema = Schema(version.schema_json, "AVRO")
            self._ids[name] = self.client.register_schema(f"convdb.{name}", schema)
        return self._ids[name]

    def encode(self, record: AvroModel) -> bytes:
        """Encode with the newest schema, registering it on first use."""
        name = type(record).__name__
        buf = BytesIO()
        buf.write(CONFLUENT_MAGIC + self._schema_id(name).to_bytes(4, "big"))
        _write_payload(buf, self.catalog.latest[name].parsed, record)
        return buf.getvalue()

    def _writer(self, schema_id: int) -> tuple[str, dict[str, Any]]:
        import json

        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if schema_id not in self._writers:
            try:
                schema = self.client.get_schema(schema_id)
            except SchemaRegistryError as exc:
                raise UnknownFingerprintError(f"schema id {schema_id} is not in the registry") from exc
            if schema.schema_str is None:
                raise UnknownFingerprintError(f"schema id {schema_id} has no schema text in the registry")
            raw = json.loads(schema.schema_str)
            self._writers[schema_id] = (raw["name"], parse_record(raw))
        return self._writers[schema_id]

    def _decode(self, data: bytes, expect: tuple[type[AvroModel], ...] | None) -> AvroModel:
        """Decode Confluent-framed bytes, resolving the writer schema through the registry."""
        if len(data) < 5 or data[:1] != CONFLUENT_MAGIC:
            head = bytes(data[:4]).hex() or "empty"
            raise NotAvroError(f"not Confluent-framed Avro (starts with {head}, {len(data)} bytes)")
        schema_id = int.from_bytes(data[1:5], "big")
        name, writer = self._writer(schema_id)
        reader = self.catalog.latest.get(name)
        if reader is None:
            raise UnknownFingerprintError(f"schema id {schema_id} is record {name!r}, unknown here")
        record = _read_payload(data, 5, writer, reader.parsed, f"{name} (schema id {schema_id})")
        return _to_model(name, record, expect)


def make_codec(schema_registry_url: str | None = None) -> Codec:
    """The codec for a deployment: Confluent framing with a registry, single-object without."""
    if schema_registry_url:
        return ConfluentCodec(schema_registry_url)
    return SingleObjectCodec()
