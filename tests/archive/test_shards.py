"""How a parallel replay splits the planned segments over its worker processes (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from convdb.consumers.archive.parallel import shards
from convdb.consumers.archive.sources import Segment


def planned(sizes: dict[int, int], topic: str = "events") -> dict[str, list[Segment]]:
    return {topic: [Segment(topic, p, "kafka", 100, 100 + n) for p, n in sorted(sizes.items())]}


def loads(parts: list[dict[str, list[Segment]]]) -> list[int]:
    return [sum(s.stop - s.start for segs in part.values() for s in segs) for part in parts]


def test_the_measured_split_is_balanced() -> None:
    # The bench's 100 conversations on 4 partitions: every other partition gave 43k and 57k.
    sizes = {0: 25_000, 1: 22_000, 2: 18_000, 3: 35_000}
    assert sorted(loads(shards(planned(sizes), 2))) == [47_000, 53_000]


def test_no_more_shards_than_partitions() -> None:
    assert len(shards(planned({0: 5, 1: 7}), 8)) == 2
    assert len(shards(planned({}), 2)) == 1


@given(
    st.dictionaries(st.integers(0, 63), st.integers(0, 100_000), min_size=1, max_size=24),
    st.integers(1, 8),
)
def test_each_partition_in_one_shard_and_no_shard_above_the_greedy_bound(
    sizes: dict[int, int], processes: int
) -> None:
    parts = shards(planned(sizes), processes)
    owners = [{s.partition for segs in part.values() for s in segs} for part in parts]
    assert sorted(p for owned in owners for p in owned) == sorted(sizes)
    assert len(parts) == min(processes, len(sizes))
    # Largest-first greedy: the fullest shard exceeds the mean by at most one partition.
    biggest = max(sizes.values())
    assert max(loads(parts)) <= sum(sizes.values()) / len(parts) + biggest
