"""The sink benchmark helper (`bench.sinkrun`) end to end; prints events/s (not a timed test)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from bench.sinkrun import fill_topic, measure_sink
from convdb.consumers.index import IndexConsumer
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from tests.consumers.builders import interleaved
from tests.consumers.verify import assert_index_exact, assert_stats_exact, assert_views_exact

pytestmark = pytest.mark.kafka


def test_measure_sink_applies_everything_and_reports_a_rate(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = make_settings(store_url=url)
    apply_topics(settings)
    events = interleaved(100, 100)
    assert fill_topic(settings, events) == len(events)
    result = measure_sink(settings, [ViewsConsumer(), IndexConsumer(), StatsConsumer()], len(events))
    print(f"\nsink views+index+stats on {result.store}: {result.per_second:,.0f} events/s")
    assert result.store == "sqlite" and result.per_second > 0
    for check in (assert_views_exact, assert_index_exact, assert_stats_exact):
        check(url, events)
