"""The LangGraph bench at a tiny size on the embedded broker: convdb's saver in this process, and
the hosted loop in a real `convdb runner --graph` process.

Not a timed test: the figures are checked for being measured and consistent (a rate, a p99 no
shorter than the mean gap), never against a target.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.common import BenchContext, drop_namespace
from bench.langgraph import FIGURES, hosted_namespace, measure, measure_hosted
from convdb.langgraph import ConvdbSaver
from convdb.schemas.topics import GRAPH
from tests.conftest import BrokerInfo, settings_for

pytestmark = pytest.mark.kafka


def test_the_langgraph_bench_times_the_saver_and_a_hosted_runner(
    embedded_broker: BrokerInfo, tmp_path: Path
) -> None:
    ctx = BenchContext(settings_for(embedded_broker, tmp_path), "small", 1, tmp_path)
    assert {"langgraph_hosted_steps_per_s", "langgraph_hosted_p99_ms"} <= set(FIGURES)
    steps = 30
    settings = ctx.fresh("langgraph", (GRAPH,))
    saver = ConvdbSaver(settings)
    saver.open()
    try:
        rate, p99 = measure(saver, steps, "t-0")
    finally:
        saver.close()
        drop_namespace(settings)
    assert rate > 0 and p99 >= 1000 / rate * 0.5, (rate, p99)

    hosted = hosted_namespace(ctx)
    try:
        rate, p99 = measure_hosted(ctx, hosted, steps, 0)  # a BenchError unless every step was recorded
    finally:
        drop_namespace(hosted)
    assert rate > 0 and p99 >= 1000 / rate * 0.5, (rate, p99)
