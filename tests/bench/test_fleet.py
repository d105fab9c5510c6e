"""The fleet bench at a tiny size on the embedded broker: real runner processes, every figure there.

Not a timed test: the figures are checked for being measured and consistent with each other
(a gap is positive, p50 <= p99 <= max, a moved partition was taken over), never against a target.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import BenchContext
from bench.fleet import FIGURES, SIZES, measure
from bench.fleettakeover import curve
from tests.conftest import BrokerInfo, settings_for

pytestmark = pytest.mark.kafka


def test_the_fleet_bench_measures_every_event_at_a_tiny_size(
    embedded_broker: BrokerInfo, tmp_path: Path
) -> None:
    size = SIZES["tiny"]
    ctx = BenchContext(settings_for(embedded_broker, tmp_path), "small", 1, tmp_path)
    figures = measure(ctx, size)
    assert set(figures) <= set(FIGURES), set(figures) - set(FIGURES)
    usual = figures["fleet_usual_gap_p50_s"]
    # The pacer sends each conversation a message every period, so no gap is shorter than about
    # that; how much longer depends on the machine's load (CI runs other tests beside this one),
    # so the upper side is a consistency check, not a speed target.
    assert 0.5 * size.period_s < usual <= figures["fleet_usual_gap_p99_s"], figures
    assert 0 < figures["fleet_steps_per_s"] <= 1.5 * size.live / size.period_s, figures
    assert size.events == ("a_join", "b_leave", "c_kill")  # (d) takes half a minute more
    for event in size.events:
        p = f"fleet_{event}"
        assert figures[f"{p}_steps_per_s"] > 0, p
        assert figures[f"{p}_gap_max_s"] >= usual * 0.5, p
        for klass in ("unmoved", "moved"):
            if f"{p}_{klass}_gap_p50_s" in figures:
                p50, p99, most = (figures[f"{p}_{klass}_gap_{q}_s"] for q in ("p50", "p99", "max"))
                assert 0 < p50 <= p99 <= most, (p, klass, p50, p99, most)
    # A join, a graceful leave and a kill each move partitions, and their new runners serve them.
    for event in ("a_join", "b_leave", "c_kill"):
        assert figures[f"fleet_{event}_moved_partitions"] >= 1, event
        assert figures[f"fleet_{event}_takeover_max_s"] >= figures[f"fleet_{event}_takeover_p50_s"] > 0, event
    # A killed runner's partitions wait for its session to time out before anyone takes them.
    assert figures["fleet_c_kill_moved_gap_max_s"] >= figures["fleet_session_timeout_s"]
    assert ctx.notes and "assignor" in ctx.notes[0]


def test_the_takeover_curve_serves_its_probes(embedded_broker: BrokerInfo, tmp_path: Path) -> None:
    ctx = BenchContext(settings_for(embedded_broker, tmp_path), "small", 1, tmp_path)
    figures = curve(ctx, (10, 30), 3)
    for label in ("10", "30"):
        first, last = figures[f"fleet_takeover_first_s_{label}"], figures[f"fleet_takeover_all_s_{label}"]
        assert 0 < first <= last < 60, (label, first, last)
        assert figures[f"fleet_takeover_restore_ms_{label}"] > 0
        assert 0 < figures[f"fleet_takeover_callback_ms_{label}"] / 1000 < first, label
        assert figures[f"fleet_takeover_restored_all_s_{label}"] > 0, label
    assert "fleet_takeover_growth" in figures
