"""`python -m bench` runs and reports (not a timed test: no figure is compared with a target)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS
from bench.filelog import load_log, search_log, write_log
from bench.sink import interleaved

ROOT = Path(__file__).resolve().parent.parent
CODEC_KEYS = {
    "codec_encode_per_s",
    "codec_decode_per_s",
    "fastavro_encode_per_s",
    "fastavro_decode_per_s",
    "json_encode_per_s",
    "json_decode_per_s",
    "validation_ns_per_record",
}


def test_codec_bench_prints_every_figure_as_json() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--only",
            "codec",
            "--size",
            "small",
            "--json",
            "--no-write",
            "--repeats",
            "1",
        ],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(figures) == CODEC_KEYS
    assert all(isinstance(v, float) and v > 0 for v in figures.values())
    assert "| `codec_encode_per_s` |" in proc.stdout  # the table is printed too


def test_an_unknown_benchmark_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "nope", "--no-write"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "invalid choice: 'nope'" in proc.stderr


def test_every_registered_benchmark_declares_its_figures() -> None:
    import importlib

    for name in BENCHMARKS:
        module = importlib.import_module(f"bench.{name}")
        assert callable(module.run), name
        assert module.FIGURES and all(len(v) == 3 for v in module.FIGURES.values()), name
    assert {"e2e", "replay", "resume", "step"} <= set(BENCHMARKS)


@pytest.mark.parametrize("count", [1, 30])
def test_the_file_log_baseline_loads_and_searches_what_was_written(tmp_path: Path, count: int) -> None:
    events = interleaved(count * 100)[::100]  # one conversation's worth, seq 1..count
    root = write_log(tmp_path / "log", events)
    loaded = load_log(root, lambda raw: raw["id"])
    assert loaded == [e.id for e in sorted(events, key=lambda e: e.seq)]
    page = search_log(root, ("observation",), limit=5)
    wanted = sorted((e for e in events if e.kind == "observation"), key=lambda e: e.timestamp)[:5]
    assert [r["id"] for r in page] == [e.id for e in wanted]


@pytest.mark.kafka
def test_publish_bench_runs_on_both_brokers_side_by_side() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--only",
            "publish",
            "--broker",
            "both",
            "--repeats",
            "1",
            "--no-write",
        ],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = "| key | what | embedded | apache | unit |"
    assert header in proc.stdout, proc.stdout
    side = proc.stdout[proc.stdout.index(header) :]
    assert "| `publish_events_per_s` |" in side and "| `publish_ratio` |" in side


def test_the_fulltext_bench_fills_a_store_and_times_its_searches(tmp_path: Path) -> None:
    from bench import fulltext

    url = f"sqlite:///{tmp_path / 'fulltext.db'}"
    fulltext.fill(url, 3_000)
    times = fulltext.timings(url)  # raises BenchError on another tenant's hit or a short common page
    assert len(times) >= fulltext.SEARCHES // 2 * len(fulltext.QUERIES) and all(t > 0 for t in times)
    assert fulltext.percentile(times, 0.5) <= fulltext.percentile(times, 0.99)
