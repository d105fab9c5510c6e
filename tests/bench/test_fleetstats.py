"""The fleet bench's arithmetic on hand-made runs: gaps, moves and takeovers."""

from __future__ import annotations

import pytest

from bench.fleetprocs import Steps, owners
from bench.fleetstats import Window, event_figures, gaps_in, growth_exponent, percentile, takeovers


def line(runner: str, event: str, at: float, **fields: object) -> dict[str, object]:
    return {"runner": runner, "event": event, "at": at, **fields}


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile([5.0], 0.99) == 5.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_a_gap_belongs_to_the_span_it_ends_in_and_a_stalled_conversation_still_counts() -> None:
    times = [0.0, 1.0, 2.0, 6.0, 7.0]
    assert gaps_in(times, 3.0, 6.5, 10.0) == [4.0]
    assert gaps_in(times, 0.0, 1.5, 10.0) == [1.0]
    # Nothing after t=2 and the span ends at 9: a 7 s stall so far.
    assert gaps_in([0.0, 1.0, 2.0], 1.5, 9.0, 3.0) == [1.0, 7.0]


def test_owners_follow_eager_and_incremental_lines_and_a_kill() -> None:
    lines = [
        line("a", "assigned", 1.0, partitions=[0, 1, 2, 3]),
        line("a", "revoked", 5.0, partitions=[0, 1, 2, 3]),
        line("a", "assigned", 6.0, partitions=[0, 1]),
        line("b", "assigned", 6.5, partitions=[2, 3]),
        line("c", "assigned", 8.0, partitions=[1]),  # incremental: only what it gained
        line("a", "revoked", 7.9, partitions=[1]),
    ]
    lines.sort(key=lambda x: x["at"])
    assert owners(lines, {}, 4.0) == {0: "a", 1: "a", 2: "a", 3: "a"}
    assert owners(lines, {}, 5.5) == {}
    assert owners(lines, {}, 9.0) == {0: "a", 1: "c", 2: "b", 3: "b"}
    assert owners(lines, {"b": 8.5}, 9.0) == {0: "a", 1: "c"}


def test_event_figures_split_moved_from_unmoved_and_time_the_takeover() -> None:
    # Partition 0 stays with a; partition 1 goes from a (revoked at 10) to b (assigned at 11).
    lines = [
        line("a", "assigned", 0.0, partitions=[0, 1]),
        line("a", "revoked", 10.0, partitions=[1]),
        line("b", "assigned", 11.0, partitions=[1]),
    ]
    steps = Steps(
        times={
            "kept": [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0],
            "moved": [1.0, 3.0, 5.0, 7.0, 9.0, 11.5, 13.5],
        },
        partition={"kept": 0, "moved": 1},
    )
    window = Window("x", 9.5, 14.0, {})
    figures, taken = event_figures("f_x", lines, steps, {"kept", "moved"}, window, 2, 2.0, 2.0)
    assert figures["f_x_moved_partitions"] == 1
    assert figures["f_x_unmoved_gap_max_s"] == 2.0
    assert figures["f_x_moved_gap_max_s"] == 2.5
    assert taken == {1: (1.5, 0.5)}  # released at 10, assigned at 11, first step at 11.5
    assert figures["f_x_takeover_max_s"] == 1.5
    assert figures["f_x_unmoved_max_ratio"] == 1.0


def test_a_takeover_is_timed_from_the_message_when_none_waited_for_the_new_owner() -> None:
    lines = [
        line("a", "assigned", 0.0, partitions=[1]),
        line("b", "assigned", 11.0, began=10.8, partitions=[1]),
    ]
    # Its message was sent at 12.9 (after the assignment) and answered at 13.0: 0.1 s, not 2.2 s;
    # the one sent at 9.0 was answered at 9.1 by the old owner.
    steps = Steps({"c": [9.1, 13.0]}, {"c": 1}, sent={"c": [9.0, 12.9]})
    assert steps.ready("c", 1) == 12.9 and steps.ready("c", 0) == 9.0
    taken = takeovers(lines, steps, Window("x", 10.0, 14.0, {}), {1: ("a", "b")})
    assert taken[1][0] == pytest.approx(3.0) and taken[1][1] == pytest.approx(0.1)
    # Without the send times it counts from the start of the assignment callback.
    assert takeovers(
        lines, Steps({"c": [9.1, 13.0]}, {"c": 1}), Window("x", 10.0, 14.0, {}), {1: ("a", "b")}
    )[1][1] == pytest.approx(2.2)


def test_growth_exponent_is_one_for_linear_and_less_for_sub_linear() -> None:
    assert growth_exponent([100, 1000], [1.0, 10.0]) == pytest.approx(1.0)
    assert growth_exponent([100, 1000, 10000], [1.0, 2.0, 3.0]) == pytest.approx(0.2386, abs=1e-3)
