"""Replay and audit against a real broker, real S3 and real SQLite stores, through the CLI."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from convdb.consumers.runner import Runner
from convdb.consumers.store import open_engine, stored_offsets
from convdb.consumers.views import ViewsConsumer
from convdb.infra.cli.main import main
from convdb.infra.settings import Settings
from tests.archive.conftest import SinkThread, chain, interleave, publish, rotated
from tests.conftest import wait_until
from tests.helpers import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.brokers]


def run_cli(monkeypatch: pytest.MonkeyPatch, settings: Settings, *argv: str) -> int:
    """`convdb ARGV` in this process with the settings in the environment; returns the exit code."""
    for key, value in settings.to_env().items():
        monkeypatch.setenv(key, value)
    try:
        return main(list(argv))
    except SystemExit as exc:  # argparse and UsageError exit through parser.exit
        return int(exc.code or 0)


def live_views(settings: Settings, url: str, expected: int) -> None:
    """Run the live views consumer until it has stored offsets covering `expected` records."""
    engine = open_engine(url)
    runner = Runner(settings, [ViewsConsumer(settings)], engine=engine, batch_size=500)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    topic = settings.topic("events")
    ends: dict[int, int] = {}
    for p, o, _, _ in read_topic(settings, topic, expected):
        ends[p] = max(ends.get(p, 0), o + 1)

    def caught_up() -> bool:
        with engine.connect() as conn:
            stored = stored_offsets(conn, ["views"], [(topic, p) for p in ends])
        return all(stored.get(("views", topic, p), -1) >= end for p, end in ends.items())

    try:
        wait_until(caught_up, 90, "the live views consumer to catch up")
    finally:
        runner.stop()
        thread.join(30)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[str, str]]:
    yield f"sqlite:///{tmp_path / 'live.db'}", f"sqlite:///{tmp_path / 'shadow.db'}"


def test_replay_from_archive_plus_kafka_tail_equals_live_and_tamper_is_named(
    s3_settings: Settings,
    stores: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = rotated(s3_settings, max_records=30, max_age_s=0.3)
    first = [chain(f"conv-{i}", 20) for i in range(6)]
    publish(settings, interleave(*first))
    with SinkThread(settings) as sink:  # the archive holds the first part only
        sink.wait_records(120)
    tails = [chain(f"conv-{i}", 15, start=21, parent=c[-1].id) for i, c in enumerate(first)]
    publish(settings, interleave(*tails, chain("conv-new", 10)))
    live, shadow = stores
    live_views(settings, live, 120 + 90 + 10)

    code = run_cli(
        monkeypatch, settings, "replay", "views", "--from-offset", "0", "--into", shadow, "--source", "auto"
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "220 events from archive+kafka" in out
    assert "events/s once records flowed, start-up excluded" in out and "rejected 0" in out
    assert run_cli(monkeypatch, settings, "audit", "diff", live, shadow) == 0
    capsys.readouterr()

    with open_engine(live).begin() as conn:
        # The digest is computed from the stored view (its row and branch), so tamper with the row.
        conn.execute(
            sa.text("UPDATE views_conversations SET last_seq = 999 WHERE conversation_id = 'conv-4'")
        )
        tampered = ViewsConsumer().digests(conn)["conv-4"]
        # conv-2's event at seq 7 has another id in the live store.
        conn.execute(
            sa.text("UPDATE views_events SET event_id = 'other' WHERE conversation_id = 'conv-2' AND seq = 7")
        )
    with open_engine(shadow).begin() as conn:
        conn.execute(sa.text("DELETE FROM views_conversations WHERE conversation_id = 'conv-new'"))
    assert run_cli(monkeypatch, settings, "audit", "diff", live, shadow) == 1
    printed = capsys.readouterr()
    lines = printed.out.strip().splitlines()
    assert len(lines) == 4, printed
    assert lines[0].startswith("views	conv-2	different (first differing seq 7)	live="), lines[0]
    assert lines[1].startswith(
        f"views	conv-4	different (no per-seq row differs)	live={tampered}	shadow="
    )
    assert lines[2].startswith("views	conv-new	missing in shadow	live="), lines[2]
    # The verdict, on stdout: how many were compared, and how they differ.
    assert (
        lines[3]
        == "audit: compared 7 conversation(s) across views: 3 differ (1 missing on one side, 2 different)"
    )


def test_replay_from_the_archive_alone_equals_kafka(
    s3_settings: Settings,
    stores: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = rotated(s3_settings, max_records=25, max_age_s=0.3)
    publish(settings, interleave(*(chain(f"c{i}", 30) for i in range(4))))
    with SinkThread(settings) as sink:
        sink.wait_records(120)
    from_kafka, from_archive = stores
    assert run_cli(monkeypatch, settings, "replay", "views", "--from-offset", "0", "--into", from_kafka) == 0
    assert (
        run_cli(
            monkeypatch,
            settings,
            "replay",
            "views",
            "--from-offset",
            "0",
            "--into",
            from_archive,
            "--source",
            "archive",
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "120 events from kafka" in out and "120 events from archive" in out
    assert run_cli(monkeypatch, settings, "audit", "diff", from_kafka, from_archive) == 0


def test_replay_in_worker_processes_equals_one_process(
    s3_settings: Settings,
    stores: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Partitions spread over 2 and 3 workers, from Kafka and from the archive: the same store."""
    settings = rotated(s3_settings, max_records=25, max_age_s=0.3)
    publish(settings, interleave(*(chain(f"c{i}", 30) for i in range(6))))
    with SinkThread(settings) as sink:
        sink.wait_records(180)
    one, _ = stores
    assert run_cli(monkeypatch, settings, "replay", "views", "--from-offset", "0", "--into", one) == 0
    for source, processes in (("kafka", "2"), ("archive", "3")):
        many = f"sqlite:///{tmp_path / f'{source}-{processes}.db'}"
        argv = ("--from-offset", "0", "--into", many, "--source", source, "--processes", processes)
        assert run_cli(monkeypatch, settings, "replay", "views", *argv) == 0
        assert f"180 events from {source}" in capsys.readouterr().out
        assert run_cli(monkeypatch, settings, "audit", "diff", one, many) == 0
        with open_engine(many).connect() as conn:  # the deferred indexes are there again
            query = sa.text("SELECT name FROM sqlite_master WHERE type = 'index'")
            names = {r[0] for r in conn.execute(query)}
        assert "views_conversations_tenant" in names
