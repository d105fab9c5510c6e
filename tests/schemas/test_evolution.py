"""Schema evolution: every shipped version of a record reads every other (backward and forward)."""

from __future__ import annotations

from io import BytesIO
from typing import Any

import pytest
from fastavro import schemaless_writer  # crafts old-writer bytes; the codec stays fastavro's only user

from convdb.schemas import InboxMessage, LLMUsageEvent, SingleObjectCodec, SystemPromptEvent
from convdb.schemas.catalog import MODELS, SchemaVersion, shipped_catalog
from convdb.schemas.errors import InvalidRecordError, UnreadableVersionError
from tests.schemas.records import sample_record

CATALOG = shipped_catalog()
PAIRS = [
    (writer, reader)
    for writer in CATALOG.versions
    for reader in CATALOG.versions
    if writer.name == reader.name
]


def written_by(version: SchemaVersion, values: dict[str, Any]) -> bytes:
    """Single-object bytes as a producer that only knows `version` would write them."""
    names = [f["name"] for f in version.schema["fields"]]
    buf = BytesIO()
    buf.write(version.header)
    schemaless_writer(buf, version.parsed, {n: values[n] for n in names}, strict=True)
    return buf.getvalue()


def field_names(version: SchemaVersion) -> list[str]:
    return [f["name"] for f in version.schema["fields"]]


GROWN_ENUMS = {"InboxMessage": {"command": "message"}}
"""Enum fields that gained symbols in a later version, and a symbol every version knows: a record
with a new symbol does not read on an old reader (`test_an_old_reader_refuses_a_new_command`)."""


def shared_symbols(record: Any) -> Any:
    """`record` with each grown enum set to a symbol every shipped version has."""
    return record.model_copy(update=GROWN_ENUMS.get(type(record).__name__, {}))


def test_llm_usage_v2_adds_cached_tokens_v3_adds_extension() -> None:
    v1, v2, v3 = sorted((v for v in CATALOG.versions if v.name == "LLMUsageEvent"), key=lambda v: v.version)
    assert (v1.version, v2.version, v3.version) == (1, 2, 3)
    assert field_names(v2) == [*field_names(v1), "cached_tokens"]
    assert field_names(v3) == [*field_names(v2), "extension"]
    assert v1.fingerprint != v2.fingerprint
    assert CATALOG.latest["LLMUsageEvent"] is v3


def test_llm_usage_v1_data_reads_with_the_v2_reader() -> None:
    v1 = next(v for v in CATALOG.versions if v.name == "LLMUsageEvent" and v.version == 1)
    record = sample_record(LLMUsageEvent)
    data = written_by(v1, record.__dict__)
    decoded = SingleObjectCodec().decode(data, expect=(LLMUsageEvent,))
    assert decoded.cached_tokens == 0  # the v2 default fills the field v1 never wrote
    assert decoded == record.model_copy(update={"cached_tokens": 0, "extension": None})


def test_llm_usage_v2_data_reads_with_a_v1_reader() -> None:
    record = sample_record(LLMUsageEvent).model_copy(update={"cached_tokens": 321, "extension": "{}"})
    data = SingleObjectCodec().encode(record)
    old_reader = SingleObjectCodec(CATALOG.restricted("LLMUsageEvent", 1))
    decoded = old_reader.decode(data)
    # The v1 reader drops cached_tokens and extension; everything v1 knows survives unchanged.
    assert (decoded.cached_tokens, decoded.extension) == (0, None)
    newer = {"cached_tokens", "extension"}
    assert decoded.model_dump(exclude=newer) == record.model_dump(exclude=newer)


def test_a_pinned_v1_writer_cannot_silently_drop_a_v2_field() -> None:
    old_writer = SingleObjectCodec(CATALOG.restricted("LLMUsageEvent", 1))
    with pytest.raises(InvalidRecordError, match="cannot encode LLMUsageEvent"):
        old_writer.encode(sample_record(LLMUsageEvent))


def test_restricted_refuses_a_version_that_was_never_shipped() -> None:
    with pytest.raises(KeyError, match="LLMUsageEvent v9"):
        CATALOG.restricted("LLMUsageEvent", 9)


@pytest.mark.parametrize(
    ("writer", "reader"), PAIRS, ids=[f"{w.name}-v{w.version}->v{r.version}" for w, r in PAIRS]
)
def test_every_shipped_version_reads_every_other(writer: SchemaVersion, reader: SchemaVersion) -> None:
    model = MODELS[writer.name]
    record = shared_symbols(sample_record(model))
    data = written_by(writer, record.__dict__)
    codec = SingleObjectCodec(CATALOG.restricted(reader.name, reader.version))
    decoded = codec.decode(data, expect=(model,))
    both = set(field_names(writer)) & set(field_names(reader))
    for name, info in model.model_fields.items():
        expected = record.__dict__[name] if name in both else info.get_default(call_default_factory=True)
        assert getattr(decoded, name) == expected, name


@pytest.mark.parametrize(
    ("model", "old", "added"),
    [(SystemPromptEvent, 2, {"agent", "agent_version"}), (InboxMessage, 1, {"agent"})],
)
def test_the_agent_fields_read_both_ways(model: type[Any], old: int, added: set[str]) -> None:
    """A conversation or inbox message from before agents were named reads with no agent; one that
    names its agent reads on an old reader without it (everything else unchanged)."""
    older = next(v for v in CATALOG.versions if v.name == model.__name__ and v.version == old)
    named_in = next(v for v in CATALOG.versions if v.name == model.__name__ and v.version == old + 1)
    assert field_names(named_in) == [*field_names(older), *sorted(added)]
    # Fields later versions added read as their defaults too.
    newer = set(model.model_fields) - set(field_names(older))
    record = shared_symbols(sample_record(model))
    decoded = SingleObjectCodec().decode(written_by(older, record.__dict__), expect=(model,))
    defaults = {name: model.model_fields[name].get_default(call_default_factory=True) for name in newer}
    assert decoded == record.model_copy(update=defaults)
    named = record.model_copy(update={name: "shop" for name in added})
    by_old = SingleObjectCodec(CATALOG.restricted(model.__name__, old)).decode(
        SingleObjectCodec().encode(named)
    )
    assert by_old.model_dump(exclude=newer) == named.model_dump(exclude=newer)


INBOX_V3 = [
    "at_seq",
    "source_conversation_id",
    "parent_conversation_id",
    "parent_operation_id",
    "delegation_depth",
    "budget_usd",
    "child_conversation_id",
    "child_status",
]


def test_inbox_v3_adds_history_commands_and_delegation_links() -> None:
    """v3 adds the branch and fork commands and their fields, and a delegated child's links to its
    parent (and its report's); v2 records read with all of them null."""
    v2, v3 = (v for n in (2, 3) for v in CATALOG.versions if v.name == "InboxMessage" and v.version == n)
    assert field_names(v3) == [*field_names(v2), *INBOX_V3]
    record = shared_symbols(sample_record(InboxMessage))
    decoded = SingleObjectCodec().decode(written_by(v2, record.__dict__), expect=(InboxMessage,))
    later = [f for f in field_names(CATALOG.latest["InboxMessage"]) if f not in field_names(v3)]
    assert decoded == record.model_copy(update=dict.fromkeys([*INBOX_V3, *later]))


def test_an_old_reader_refuses_a_new_command() -> None:
    """A fork read by a runner that predates it is a named schema error (it goes to the DLQ), never
    a message or a pause read wrongly."""
    fork = sample_record(InboxMessage).model_copy(
        update={"command": "fork", "at_seq": 3, "source_conversation_id": "source"}
    )
    old_reader = SingleObjectCodec(CATALOG.restricted("InboxMessage", 2))
    with pytest.raises(UnreadableVersionError, match="fork not found"):
        old_reader.decode(SingleObjectCodec().encode(fork))


def test_inbox_v4_adds_the_cancel_command_and_an_old_reader_refuses_it() -> None:
    """v4 adds the `cancel` symbol and a child's reported cost: a v3 record reads with no cost, and a
    cancel read by a runner that predates it is a named schema error (to the DLQ), never a pause."""
    v3, v4 = (v for n in (3, 4) for v in CATALOG.versions if v.name == "InboxMessage" and v.version == n)
    assert field_names(v4) == [*field_names(v3), "child_cost_usd"]
    assert v4.schema["fields"][4]["type"]["symbols"] == [*v3.schema["fields"][4]["type"]["symbols"], "cancel"]
    record = shared_symbols(sample_record(InboxMessage)).model_copy(update={"child_cost_usd": 0.25})
    decoded = SingleObjectCodec().decode(written_by(v3, record.__dict__), expect=(InboxMessage,))
    assert decoded == record.model_copy(update={"child_cost_usd": None})
    cancel = record.model_copy(update={"command": "cancel"})
    old_reader = SingleObjectCodec(CATALOG.restricted("InboxMessage", 3))
    with pytest.raises(UnreadableVersionError, match="cancel not found"):
        old_reader.decode(SingleObjectCodec().encode(cancel))
