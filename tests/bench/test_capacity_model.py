"""The capacity model: docs/capacity.md's table is the model's, and the formulas behave."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench import capmodel
from bench.capmodel import ASSUMED, MEASURED, plan, predict, runner_steps_per_s

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity.md"


def test_the_doc_table_is_the_models() -> None:
    stale = "docs/capacity.md is stale: paste bench.capmodel.table() into it"
    assert capmodel.table() in DOC.read_text(), stale


def test_ten_times_the_load_needs_about_ten_times_the_processes() -> None:
    small, large = plan(10_000, MEASURED, ASSUMED), plan(100_000, MEASURED, ASSUMED)
    assert large.events_per_s == 10 * small.events_per_s == 200_000
    for field in ("runners", "consumers", "archivers", "stores"):
        ratio = getattr(large, field) / getattr(small, field)
        assert 8 <= ratio <= 12, (field, ratio)
    assert small.partitions >= max(small.runners, small.consumers, small.archivers)
    assert small.brokers >= ASSUMED.replication


def test_a_runner_is_bounded_by_its_steps_in_flight_and_then_by_a_core() -> None:
    sequential = runner_steps_per_s(MEASURED, ASSUMED)
    assert sequential < 1.0  # one step at a time, each waiting a second for the LLM
    flying = runner_steps_per_s(MEASURED, replace(ASSUMED, steps_in_flight=10_000))
    assert flying == 1000 / MEASURED.runner_cpu_ms_per_step


def test_the_prediction_is_within_the_plans_headroom() -> None:
    assumed = replace(ASSUMED, step_latency_s=0.05)
    planned = plan(50, MEASURED, assumed)
    expected = predict(planned, MEASURED, assumed)
    assert expected.runner_busy <= capmodel.UTILIZATION
    period = MEASURED.events_per_step / assumed.events_per_s_each
    assert period < expected.step_gap_s < period + 1.0
