"""What an operator sees from the CLI: the DLQ readable, quiet pipes, honest replay progress."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from convdb.consumers.archive.replay import open_store, plan_replay, replay
from convdb.consumers.archive.sources import Window
from convdb.consumers.views import ViewsConsumer
from convdb.infra import dlq
from convdb.infra.producer import DurableProducer, TransactionalProducer
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import SingleObjectCodec
from convdb.schemas.topics import DLQ, EVENTS
from tests.infra.test_cli import convdb, events_for

pytestmark = pytest.mark.kafka


def test_tail_reads_the_dlq_with_its_reasons(settings: Settings) -> None:
    producer = DurableProducer(settings)
    good = SingleObjectCodec().encode(events_for("conv-x", 1)[0])
    refused = [(b"not avro", "NotAvroError"), (good, "SequenceGapError")]
    for value, error in refused:
        headers = dlq.error_headers("views", EVENTS.name(settings.namespace), 2, 41, ValueError(error))
        headers[0] = (dlq.ERROR_CLASS, error.encode())
        producer.send(DLQ.name(settings.namespace), "conv-x", value, headers)
    done = convdb(settings.to_env(), "tail", "--topic", "dlq", "--format", "json")
    assert done.returncode == 0, done.stderr
    letters = sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda x: x["error_class"])
    assert [x["error_class"] for x in letters] == ["NotAvroError", "SequenceGapError"]
    assert all(
        x["origin"] == f"{EVENTS.name(settings.namespace)}[2]@41" and x["refused_by"] == "views"
        for x in letters
    )
    assert letters[0]["value_base64"] == "bm90IGF2cm8="  # undecodable: the original bytes
    assert letters[1]["record"]["conversation_id"] == "conv-x"  # decodable: refused for its content
    pretty = convdb(settings.to_env(), "tail", "--topic", "dlq")
    assert pretty.returncode == 0 and "refused by views: NotAvroError" in pretty.stdout


def test_a_closed_pipe_ends_quietly(settings: Settings) -> None:
    EventPublisher(settings, SingleObjectCodec()).publish_durable(events_for("conv-pipe", 400))
    proc = subprocess.Popen(
        [sys.executable, "-m", "convdb", "tail", "--format", "json"],
        env={**settings.to_env(), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    json.loads(proc.stdout.readline())  # like `| head -1`: read one line, then go away
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_replay_from_offset_zero_of_an_empty_topic_is_no_error(settings: Settings, tmp_path: Path) -> None:
    done = convdb(
        settings.to_env(), "replay", "views", "--from-offset", "0", "--into", f"sqlite:///{tmp_path / 's.db'}"
    )
    assert done.returncode == 0, done.stderr
    assert "replayed views: 0 events" in done.stdout


def test_replay_progress_counts_transaction_markers_to_the_end(settings: Settings, tmp_path: Path) -> None:
    codec = SingleObjectCodec()
    writer = TransactionalProducer(settings, f"{settings.namespace}-progress")
    topic = EVENTS.name(settings.namespace)
    for n in range(5):  # five transactions: five commit markers in the partition
        events = events_for(f"conv-{n}", 3)
        writer.atomic(
            lambda ev=events: [writer.produce_raw(topic, e.conversation_id, codec.encode(e)) for e in ev]
        )
    projector, window = ViewsConsumer(), Window(from_offset=0)
    segments = plan_replay(settings, projector, window, "kafka", None)
    total = sum(s.stop - s.start for segs in segments.values() for s in segs)
    assert total > 15  # the markers take offsets too
    steps: list[int] = []
    engine = open_store(f"sqlite:///{tmp_path / 'shadow.db'}")
    result = replay(settings, projector, engine, segments, window, codec, progress=steps.append, batch_size=4)
    assert result.applied == 15
    assert sum(steps) == total and all(step >= 0 for step in steps)
