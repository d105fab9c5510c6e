"""The archive sink against a real broker and real S3: byte-exact, indexed, exportable, secret-free."""

from __future__ import annotations

from collections import Counter

import pytest

from convdb.consumers.archive import export, layout
from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.target import open_target
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import read_topic as read_kafka
from convdb.infra.settings import Settings
from convdb.producers.agent import Agent
from convdb.producers.conversation import Conversation
from convdb.producers.llm import DirectScriptedClient
from convdb.producers.publisher import EventPublisher
from convdb.producers.secrets import SecretsRegistry
from convdb.producers.sink import DurableSink
from convdb.schemas import SingleObjectCodec
from convdb.schemas.topics import GRAPH
from tests.archive.conftest import (
    SinkThread,
    archive_objects,
    archived_records,
    chain,
    interleave,
    publish,
    rotated,
)
from tests.helpers import read_topic
from tests.producers._support import records

pytestmark = [pytest.mark.kafka, pytest.mark.s3]


def test_every_record_is_archived_once_byte_exact_in_deterministic_keys(s3_settings: Settings) -> None:
    settings = rotated(s3_settings, max_records=25, max_age_s=0.5)
    events = interleave(*(chain(f"conv-{i}", 40) for i in range(5)))
    publish(settings, events)
    with SinkThread(settings) as sink:
        sink.wait_records(len(events))
    in_kafka = read_topic(settings, settings.topic("events"), len(events))
    archived = archived_records(settings)
    assert Counter((r.partition, r.offset) for r in archived) == Counter((p, o) for p, o, _, _ in in_kafka)
    by_offset = {(p, o): (k, v) for p, o, k, v in in_kafka}
    assert all(by_offset[(r.partition, r.offset)] == (r.key, r.value) for r in archived)  # byte-exact
    target, prefix = open_target(settings)
    for key in archive_objects(settings):
        ref = next(
            layout.parse_object_key(prefix, settings.topic("events"), p, key)
            for p in range(settings.partitions) if f"partition={p}/" in key
        )  # fmt: skip
        assert ref is not None and ref.end - ref.start + 1 <= 25  # count rotation
        assert target.get(layout.index_key(key)) is not None  # every object has its sidecar


def test_export_from_the_archive_equals_export_from_kafka_and_uses_the_index(s3_settings: Settings) -> None:
    settings = rotated(s3_settings, max_records=10, max_age_s=0.5)
    events = interleave(*(chain(f"conv-{i}", 15) for i in range(8)))
    publish(settings, events)
    with SinkThread(settings) as sink:
        sink.wait_records(len(events))
    codec = SingleObjectCodec()
    target, prefix = open_target(settings)
    reader = ArchiveReader(target, prefix)
    try:
        topic = settings.topic("events")
        refs = reader.conversation_objects(topic, "conv-3", settings.partitions)
        home = partition_for("conv-3", settings.partitions)
        assert refs and {r.partition for r in refs} == {home}
        all_refs = [r for p in range(settings.partitions) for r in reader.objects(topic, p)]
        assert len(refs) < len(all_refs)  # only the objects that hold it are read
        from_archive = export.from_archive(settings, reader, "conv-3", codec)
    finally:
        reader.close()
    from_kafka = export.from_kafka(settings, "conv-3", codec)
    assert [e.seq for e in from_archive.events] == list(range(1, 16))
    assert export.to_jsonl(from_archive) == export.to_jsonl(from_kafka)
    assert export.to_avro(from_archive) == export.to_avro(from_kafka)


def test_secrets_never_appear_in_any_archived_object(s3_settings: Settings) -> None:
    secret = "sk-live-4f9a1c0ffee4242"
    settings = rotated(s3_settings, max_age_s=0.3)
    codec = SingleObjectCodec()
    secrets = SecretsRegistry({"API_TOKEN": secret})
    sink = DurableSink(EventPublisher(settings, codec))
    conv = Conversation("secret-conv", "t1", Agent(), sink, DirectScriptedClient(), secrets=secrets)
    conv.send_message(f"deploy with token {secret} please")
    conv.send_message(f"again: {secret}!")
    written = sum(1 for _ in read_topic(settings, settings.topic("events"), 3))
    assert written >= 3
    with SinkThread(settings) as archive:
        archive.wait_records(written)
    target, prefix = open_target(settings)
    everything = [(k, target.get(k) or b"") for k in target.list(prefix)]
    assert everything
    placeholders = 0
    for key, data in everything:
        assert secret.encode() not in data, key
        if key.endswith(layout.OBJECT_SUFFIX):
            for rec in ArchiveReader.records_of_bytes(data, key):
                blob = (rec.key or b"") + (rec.value or b"") + b"".join(v or b"" for _, v in rec.headers)
                assert secret.encode() not in blob, (key, rec.offset)
                placeholders += blob.count(b"<secret:API_TOKEN>")
    assert placeholders >= 2  # the messages were archived, redacted


def test_the_graph_topic_is_archived_byte_exact(s3_settings: Settings) -> None:
    """A LangGraph thread's checkpoints and task writes (the `graph` topic, archived by default)."""
    pytest.importorskip("langgraph")
    from convdb.langgraph import ConvdbSaver
    from tests.langgraph.graphs import counter_graph

    settings = rotated(s3_settings, max_records=5, max_age_s=0.5)
    saver = ConvdbSaver(settings)
    counter_graph(saver).invoke({"count": 1, "steps": []}, {"configurable": {"thread_id": "lg-archived"}})
    saver.close()
    written = records(settings, GRAPH)
    assert len(written) >= 4  # a checkpoint per step, and the steps' writes
    in_kafka = read_topic(settings, settings.topic("graph"), len(written))
    with SinkThread(settings) as sink:
        sink.wait_records(len(in_kafka))
    archived = archived_records(settings, "graph")
    assert Counter((r.partition, r.offset, r.key, r.value) for r in archived) == Counter(in_kafka)


def test_a_large_graph_value_goes_to_the_archive_bucket_by_reference(s3_settings: Settings) -> None:
    """A LangGraph value above a quarter of the record size limit: in the bucket, content-addressed,
    the record refers to it, and another saver (another process) reads it back."""
    pytest.importorskip("langgraph")
    from convdb.langgraph import ConvdbSaver
    from tests.langgraph.graphs import counter_graph

    settings = s3_settings.model_copy(
        update={"runtime": s3_settings.runtime.model_copy(update={"max_record_bytes": 100_000})}
    )
    big = "x" * 300_000  # three times the record size limit
    config = {"configurable": {"thread_id": "lg-large"}}
    saver = ConvdbSaver(settings)
    assert counter_graph(saver).invoke({"count": 1, "steps": [big]}, config)["steps"] == [
        big,
        "add",
        "double",
    ]
    assert max(len(m.value()) for m in read_kafka(settings, settings.topic("graph"))) < 20_000
    target, prefix = open_target(settings)
    stored = list(target.list(f"{prefix}/graph-values/{settings.namespace}/"))
    assert stored and all(len(target.get(k) or b"") > 300_000 for k in stored)
    saver.close()
    again = counter_graph(ConvdbSaver(settings)).get_state(config).values
    assert again["steps"] == [big, "add", "double"]
