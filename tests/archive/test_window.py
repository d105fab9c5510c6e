"""Replay windows: exactly the events at or after a time; bad input exits 2 with a message."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.replay import open_store, plan_replay, replay
from convdb.consumers.archive.sources import Window
from convdb.consumers.archive.target import open_target
from convdb.consumers.base import ConsumedRecord
from convdb.infra.settings import Settings
from convdb.schemas import SingleObjectCodec
from convdb.schemas.topics import EVENTS
from tests.archive.conftest import SinkThread, chain, interleave, publish, rotated
from tests.archive.test_replay import run_cli
from tests.helpers import now

pytestmark = [pytest.mark.kafka, pytest.mark.s3]

seen = sa.Table(
    "seen_events",
    sa.MetaData(),
    sa.Column("event_id", sa.String(64), primary_key=True),
    sa.Column("offset", sa.BigInteger, nullable=False),
)


class SeenProjector:
    """A minimal projector (the `Projector` contract): one row per event it was given."""

    name = "seen"
    topics = (EVENTS,)
    version = 1

    def create(self, connection: Any) -> None:
        seen.metadata.create_all(connection)

    def drop(self, connection: Any) -> None:
        seen.metadata.drop_all(connection)

    def apply(self, connection: Any, records: Sequence[ConsumedRecord]) -> None:
        connection.execute(seen.insert(), [{"event_id": r.value.id, "offset": r.offset} for r in records])  # type: ignore[attr-defined]

    def digests(self, connection: Any) -> dict[str, str]:
        rows = connection.execute(sa.select(seen.c.event_id, seen.c.offset))
        return {event_id: str(offset) for event_id, offset in rows}


@pytest.mark.parametrize("source", ["kafka", "archive"])
def test_replay_from_a_timestamp_includes_exactly_the_events_at_or_after_it(
    s3_settings: Settings, tmp_path: Path, source: str
) -> None:
    settings = rotated(s3_settings, max_records=20, max_age_s=0.3)
    before = interleave(*(chain(f"a{i}", 15) for i in range(4)))
    publish(settings, before)
    cut = now()
    after = interleave(
        *(chain(f"b{i}", 10) for i in range(3)), chain("a0", 5, start=16, parent=before[-4].id)
    )
    publish(settings, after)
    with SinkThread(settings) as sink:
        sink.wait_records(len(before) + len(after))
    target, prefix = open_target(settings)
    reader = ArchiveReader(target, prefix)
    engine = open_store(f"sqlite:///{tmp_path / 'seen.db'}")
    window = Window(from_time=cut)
    try:
        segments = plan_replay(settings, SeenProjector(), window, source, reader)  # type: ignore[arg-type]
        result = replay(settings, SeenProjector(), engine, segments, window, SingleObjectCodec(), reader)  # type: ignore[arg-type]
    finally:
        reader.close()
    with engine.connect() as conn:
        ids = {row[0] for row in conn.execute(sa.select(seen.c.event_id))}
    assert ids == {e.id for e in after}
    assert result.applied == len(after)


def test_bad_input_exits_2_with_a_message(
    s3_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(s3_settings, chain("x", 5))
    shadow = f"sqlite:///{tmp_path / 's.db'}"
    cases = {
        ("replay", "views", "--from-offset", "0", "--into", "nosuchdb://x"): "unsupported store",
        (
            "replay",
            "views",
            "--from-offset",
            "0",
            "--into",
            "postgresql://postgres@127.0.0.1:1/none",
        ): "cannot open store",
        ("replay", "nosuch", "--from-offset", "0", "--into", shadow): "no consumer named 'nosuch'",
        ("replay", "archive", "--from-offset", "0", "--into", shadow): "not a projector",
        ("replay", "views", "--from-offset", "1000000", "--into", shadow): "past the end of every partition",
        ("replay", "views", "--from-offset", "5", "--to-offset", "5", "--into", shadow): "must be greater",
        ("replay", "views", "--from-offset", "0", "--into", shadow, "--source", "archive"): "holds nothing",
        ("audit", "diff", shadow, "nosuchdb://y"): "unsupported store",
        ("audit", "show", "x", "--at", "yesterday"): "ISO-8601 time or an offset",
        ("export", "nobody"): "has no events",
    }
    for argv, message in cases.items():
        assert run_cli(monkeypatch, s3_settings, *argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)


def test_cli_in_a_subprocess_exports_and_shows_and_refuses_bad_offsets(
    s3_settings: Settings, tmp_path: Path
) -> None:
    events = chain("sub", 6)
    publish(s3_settings, events)
    env = {**s3_settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"}

    def convdb(*argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "convdb", *argv], env=env, capture_output=True, timeout=120
        )

    done = convdb("export", "sub", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    assert [line.count(b'"seq"') for line in done.stdout.splitlines()] == [1] * 6
    shown = convdb("audit", "show", "sub", "--at", events[2].timestamp.isoformat())
    assert shown.returncode == 0 and b"seq 3, 3 event(s) in view" in shown.stdout, shown.stdout
    bad = convdb("replay", "views", "--from-offset", "99999", "--into", f"sqlite:///{tmp_path / 'x.db'}")
    assert bad.returncode == 2 and b"past the end" in bad.stderr and b"Traceback" not in bad.stderr
