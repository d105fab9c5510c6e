"""Pure parts of the archive: key layout, container determinism, the index."""

from __future__ import annotations

import json

import pytest

from convdb.consumers.archive import layout
from convdb.consumers.archive.container import RawRecord, container_metadata, read_container, write_container
from convdb.consumers.archive.errors import CorruptArchiveError
from convdb.consumers.archive.index import METADATA_LIMIT, ObjectIndex


def test_object_keys_are_zero_padded_so_listing_order_is_offset_order() -> None:
    keys = [layout.object_key("arch", "ns.events", 3, s, s + 9) for s in (0, 10, 100, 1000, 99990)]
    assert keys[0] == "arch/ns.events/partition=3/00000000000000000000-00000000000000000009.avro"
    assert sorted(keys) == keys
    assert layout.index_key(keys[1]).endswith("00000000000000000010-00000000000000000019.idx.json")
    assert layout.object_key("", "t", 0, 1, 2).startswith("t/partition=0/")


def test_parse_object_key_round_trips_and_ignores_sidecars() -> None:
    key = layout.object_key("p", "t", 2, 40, 79)
    assert layout.parse_object_key("p", "t", 2, key) == layout.ObjectRef("t", 2, 40, 79, key)
    assert layout.parse_object_key("p", "t", 2, layout.index_key(key)) is None
    assert layout.parse_object_key("p", "t", 1, key) is None


def test_start_after_bound_selects_objects_starting_at_or_after_an_offset() -> None:
    keys = [layout.object_key("p", "t", 0, s, s + 4) for s in (0, 5, 10)]
    bound = layout.start_after("p", "t", 0, 5)
    assert [k for k in keys if k > bound] == keys[1:]


def records(n: int, partition: int = 0, convs: int = 3) -> list[RawRecord]:
    return [
        RawRecord("ns.events", partition, 100 + i, 1_700_000_000_000 + i, f"c{i % convs}".encode(),
                  bytes([0xC3, 0x01]) + i.to_bytes(4, "big"), (("h", b"v"),) if i % 2 else ())
        for i in range(n)
    ]  # fmt: skip


def test_container_round_trips_byte_exact_and_is_deterministic() -> None:
    batch = records(50)
    a = write_container("k", batch, {"convdb.topic": "ns.events"})
    b = write_container("k", list(batch), {"convdb.topic": "ns.events"})
    assert a == b
    assert list(read_container(a, "k")) == batch
    assert container_metadata(a, "k") == {"convdb.topic": "ns.events"}
    assert write_container("other-key", batch, {}) != write_container("k", batch, {})


def test_garbage_is_a_corrupt_archive_error() -> None:
    with pytest.raises(CorruptArchiveError, match="not a readable archive object"):
        list(read_container(b"definitely not avro", "bad.avro"))


def test_index_lists_conversations_time_range_and_round_trips() -> None:
    batch = records(10, convs=3)
    index = ObjectIndex.build(batch)
    assert (index.start, index.end, index.records) == (100, 109, 10)
    assert index.conversations == {"c0": (4, 100, 109), "c1": (3, 101, 107), "c2": (3, 102, 108)}
    assert (index.min_ts_ms, index.max_ts_ms) == (1_700_000_000_000, 1_700_000_000_009)
    assert ObjectIndex.from_json(index.to_json(), "x") == index
    assert json.loads(index.to_json())["records"] == 10
    assert index.metadata()["conversations"] == "c0,c1,c2"
    assert index.may_hold_from(1_700_000_000_009) and not index.may_hold_from(1_700_000_000_010)


def test_metadata_stays_under_the_s3_limit_with_many_conversations() -> None:
    batch = [RawRecord("t", 0, i, 0, f"conversation-{i:05d}".encode(), b"x") for i in range(500)]
    meta = ObjectIndex.build(batch).metadata()
    assert "conversations" not in meta  # the sidecar carries the list
    assert meta["conversation-count"] == "500"
    assert sum(len(k) + len(v) for k, v in meta.items()) < METADATA_LIMIT


def test_container_bytes_do_not_depend_on_the_process_hash_seed() -> None:
    import os
    import subprocess
    import sys

    code = (
        "from consumers.archive.container import RawRecord, write_container;"
        "import sys; rec = RawRecord('t', 0, 1, 2, b'k', b'v');"
        "sys.stdout.buffer.write(write_container('k', [rec], {'a': 'b'}))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


@pytest.mark.parametrize("key", [b"nul\x00id", b"new\nline", b"com,ma", b"\xff\xfe", "é".encode()])
def test_metadata_never_carries_a_key_an_http_header_cannot(key: bytes) -> None:
    batch = [RawRecord("t", 0, 1, 0, key, b"x"), RawRecord("t", 0, 2, 0, b"plain", b"x")]
    meta = ObjectIndex.build(batch).metadata()
    assert "conversations" not in meta and meta["conversation-count"] == "2"
    assert all(v.isascii() and v.isprintable() for v in meta.values())
    index = ObjectIndex.build(batch)
    assert ObjectIndex.from_json(index.to_json(), "x") == index  # the sidecar keeps them all
