"""The runner in-process: replay equals live, version change rebuilds by replay, plugins, CLI errors."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from convdb.consumers import plugins
from convdb.consumers.base import Projector
from convdb.consumers.errors import PluginError
from convdb.consumers.index import IndexConsumer
from convdb.consumers.runner import Runner
from convdb.consumers.stats import StatsConsumer
from convdb.consumers.store import ensure_projections
from convdb.consumers.views import ViewsConsumer
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import SingleObjectCodec
from tests.conftest import wait_until
from tests.consumers.builders import interleaved
from tests.consumers.verify import assert_index_exact, assert_stats_exact, assert_views_exact, scalar

pytestmark = pytest.mark.kafka


def run_to(settings: Settings, projectors: Sequence[Projector], url: str, total: int, name: str) -> dict:
    runner = Runner(settings, projectors, name=name)
    ensure_projections(runner.engine, projectors)  # a rebuild drops the tables before we look
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        # Wait for the assignment first: leaving a group mid-join confuses the embedded broker.
        wait_until(lambda: runner.assignment, 60, f"{name} to be assigned partitions")
        wait_until(
            lambda: (
                scalar(url, "SELECT SUM(event_count) FROM stats_conversations") == total
                and scalar(url, "SELECT COUNT(*) FROM views_events") == total
            ),
            60,
            f"{total} events",
        )
        with runner.engine.connect() as conn:
            return {p.name: p.digests(conn) for p in projectors}
    finally:
        runner.stop()
        thread.join(30)


class StatsV2(StatsConsumer):
    """The stats projector after a table-layout change."""

    version = 2


def test_replay_from_scratch_equals_live_and_a_version_change_rebuilds(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    live_url = f"sqlite:///{tmp_path / 'live.db'}"
    settings = make_settings(store_url=live_url)
    apply_topics(settings)
    events = interleaved(20, 30)
    publisher = EventPublisher(settings, SingleObjectCodec())
    publisher.publish_durable(events[:300])
    runner = Runner(settings, [ViewsConsumer(), IndexConsumer(), StatsConsumer()], name="live")
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    publisher.publish_durable(events[300:])  # the live store grows batch by batch
    try:
        wait_until(lambda: scalar(live_url, "SELECT COUNT(*) FROM index_events") == len(events), 60, "live")
        wait_until(
            lambda: scalar(live_url, "SELECT SUM(event_count) FROM stats_conversations") == len(events),
            60,
            "live stats",
        )
    finally:
        runner.stop()
        thread.join(30)
    for check in (assert_views_exact, assert_index_exact, assert_stats_exact):
        check(live_url, events)
    live = run_to(
        settings, [ViewsConsumer(), IndexConsumer(), StatsConsumer()], live_url, len(events), "live"
    )

    shadow_url = f"sqlite:///{tmp_path / 'shadow.db'}"
    shadow = run_to(
        settings.model_copy(update={"store_url": shadow_url}),
        [ViewsConsumer(), IndexConsumer(), StatsConsumer()],
        shadow_url,
        len(events),
        "shadow",
    )
    assert shadow == live

    rebuilt = run_to(settings, [ViewsConsumer(), IndexConsumer(), StatsV2()], live_url, len(events), "live")
    assert rebuilt == live
    assert scalar(live_url, "SELECT version FROM convdb_projections WHERE name = 'stats'") == 2


def test_plugins_are_found_through_entry_points(make_settings: Callable[..., Settings]) -> None:
    assert {"views", "index", "titles", "stats"} <= set(plugins.available())
    loaded = plugins.load_many(["all"], make_settings())
    assert [p.name for p in loaded] == list(plugins.DEFAULT_GROUP)
    with pytest.raises(PluginError, match="no consumer named 'nope'"):
        plugins.load("nope", make_settings())


def test_cli_rejects_an_unknown_consumer_with_exit_2(settings: Settings) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "convdb", "consume", "nope"],
        env={**settings.to_env(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "unknown consumer" in result.stderr and "views" in result.stderr
