"""No record stops a runner (issue 21, runner side), on both brokers.

Hostile OpenHands posts are refused by the API (4xx) or appended by the runner; the same payloads
written past the API, records too large for the broker, records on the wrong partition, and
foreign bytes in the events and state topics are dead-lettered with a reason. Every time the
runner stays up, `/healthz` tells the truth, and another tenant's conversation on the same
partition finishes, also after the runner is restarted with the hostile records behind it.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE
from convdb.infra.partitioner import partition_for
from convdb.schemas import ExternalEvent, MessageEvent, Snapshot
from tests.conftest import BrokerInfo, wait_until
from tests.hostile.runner_stack import (
    ACME,
    CODEC,
    RunnerStack,
    on_partition,
    openhands_id,
    runner_settings,
)
from tests.projections.openhands_mutations import STATS_EVENT, USAGE, nested_list, nested_object
from tests.projections.test_openhands import SAMPLE

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


@pytest.fixture(scope="module")
def stack(broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerStack]:
    root = tmp_path_factory.mktemp(f"runner-input-{broker.name}")
    running = RunnerStack(runner_settings(broker, root), root).start()
    try:
        yield running
    finally:
        running.stop()


def events_url(cid: str) -> str:
    return f"/openhands/webhooks/events/{uuid.UUID(cid).hex}"


def fresh(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of events with new ids (parents follow), so each post is a new batch."""
    text = json.dumps(events)
    for event in events:
        text = text.replace(event["id"], str(uuid.uuid4()))
    return json.loads(text)  # type: ignore[no-any-return]


def with_action(**changes: Any) -> list[dict[str, Any]]:
    events = fresh(SAMPLE)
    events[2].update(changes)
    return events


def stats(metrics: dict[str, Any]) -> dict[str, Any]:
    return {**STATS_EVENT, "id": str(uuid.uuid4()), "value": {"usage_to_metrics": {"agent": metrics}}}


def umbrella_finishes(stack: RunnerStack, partition: int, what: str) -> str:
    """Another tenant's convdb conversation on `partition` gets a message and runs to the end."""
    cid = on_partition(partition, stack.settings, lambda: f"umbrella-{uuid.uuid4().hex[:8]}")
    stack.message(cid, f"hello from umbrella ({what})")
    wait_until(
        lambda: stack.finished(cid),
        120,
        f"umbrella's conversation on partition {partition} ({what})",
        logs=stack.logs(),
    )
    return cid


def healthy(stack: RunnerStack) -> None:
    assert stack.runner_alive()
    status, body = stack.health()
    assert status == 200, body


def test_hostile_webhook_posts_are_refused_by_the_api_or_appended(stack: RunnerStack) -> None:
    refused = [
        (with_action(action={"pattern": nested_list(450), "kind": "GlobAction"}), "nested more than 64"),
        ([*fresh(SAMPLE), stats({**USAGE, "accumulated_token_usage": {"prompt_tokens": 2**63}})], "64-bit"),
        ([*fresh(SAMPLE), stats({**USAGE, "accumulated_cost": float("nan")})], "NaN"),
        (with_action(source={"an": "object"}), "`source` must be one of"),
    ]
    cid = openhands_id(1, stack.settings)
    for batch, message in refused:
        answer = stack.call("POST", events_url(cid), ACME, content=json.dumps(batch))
        assert answer.status_code == 400 and message in answer.json()["detail"], answer.text
    info = {"id": uuid.UUID(cid).hex, "stats": {"usage_to_metrics": {"a": {"accumulated_cost": 1e400}}}}
    answer = stack.call("POST", "/openhands/webhooks/conversations", ACME, content=json.dumps(info))
    assert answer.status_code == 400, answer.text

    # Each of these crashed every runner before (issue 21, finding 1); the API accepts them.
    accepted = [
        [*fresh(SAMPLE), stats({**USAGE, "response_latencies": [{"response_id": {"an": "object"}}]})],
        [*fresh(SAMPLE), stats({**USAGE, "response_latencies": 7, "token_usages": "x"})],
        [*fresh(SAMPLE)[:2], {**stats({}), "key": "execution_status", "value": {"an": "object"}}],
        with_action(tool_call={**SAMPLE[2]["tool_call"], "arguments": json.dumps(nested_list(600))}),
    ]
    ids = []
    for batch in accepted:
        answer = stack.call("POST", events_url(cid), ACME, content=json.dumps(batch))
        assert answer.status_code == 200, answer.text
        ids += [e["id"] for e in batch]
    wait_until(
        lambda: set(ids) <= {e.id for e in stack.events(cid)},
        120,
        "every accepted event appended",
        logs=stack.logs(),
    )
    umbrella_finishes(stack, 1, "after the hostile posts")
    healthy(stack)


@pytest.mark.slow_on("apache")
def test_what_the_api_refuses_is_dead_lettered_by_the_runner_and_it_goes_on(stack: RunnerStack) -> None:
    """The same payloads written past the API (an older API, a foreign producer, a replay)."""
    cid = openhands_id(2, stack.settings)
    good = fresh(SAMPLE)
    hostile = [
        with_action(action={"pattern": nested_list(450), "kind": "GlobAction"}),
        with_action(action={"deep": nested_object(900)}),
        [*fresh(SAMPLE), stats({**USAGE, "accumulated_token_usage": {"prompt_tokens": 2**64}})],
        with_action(source={"an": "object"}),
        "[" * 5000 + "]" * 5000,  # not even parseable without exhausting the recursion limit
        "{not json",
    ]
    first = stack.inbox_batch(cid, good)
    placed = [stack.inbox_batch(cid, payload) for payload in hostile]
    last = stack.inbox_batch(cid, fresh(SAMPLE))
    umbrella_finishes(stack, 2, "after the hostile inbox records")
    stack.caught_up()
    letters = [stack.dead_letter_of(at) for at in placed]
    assert all(letter is not None for letter in letters), letters
    assert {letter[ERROR_CLASS] for letter in letters if letter} == {"ForeignRecordError"}
    assert stack.dead_letter_of(first) is None and stack.dead_letter_of(last) is None
    assert {e["id"] for e in good} <= {e.id for e in stack.events(cid)}
    assert 'convdb_runner_refused_records_total{reason="invalid"}' in stack.metrics()
    healthy(stack)

    stack.kill_runner()  # comes back with the dead-lettered records behind it
    stack.start_runner()
    umbrella_finishes(stack, 2, "after a restart")
    healthy(stack)


def test_records_too_large_for_the_broker_are_dead_lettered_and_the_text_is_stored_once(
    stack: RunnerStack,
) -> None:
    cid = openhands_id(3, stack.settings)
    big = fresh(SAMPLE)[:2]
    big[1]["llm_message"]["content"] = [{"type": "text", "text": "x" * 800_000}]
    answer = stack.call("POST", events_url(cid), ACME, content=json.dumps(big))
    assert answer.status_code == 200, answer.text
    wait_until(
        lambda: big[1]["id"] in {e.id for e in stack.events(cid)},
        120,
        "the 800 kB event appended",
        logs=stack.logs(),
    )
    message = next(e for e in stack.events(cid) if e.id == big[1]["id"])
    assert isinstance(message, MessageEvent) and len(CODEC.encode(message)) < 810_000

    twice = fresh(SAMPLE)[:2]
    twice[1]["llm_message"]["content"] = [{"type": "text", "text": "y" * 420_000}] * 2
    answer = stack.call("POST", events_url(cid), ACME, content=json.dumps(twice))
    assert answer.status_code == 413 and "convdb record of" in answer.json()["detail"], answer.text
    past_api = stack.inbox_batch(cid, twice)
    huge_message = on_partition(3, stack.settings, lambda: f"acme-{uuid.uuid4().hex[:8]}")
    # Fits the broker as an inbox record, not as the event it becomes (with its trace headers).
    too_big = stack.message(huge_message, "z" * 999_300, tenant="acme")
    umbrella_finishes(stack, 3, "after records too large to write")
    stack.caught_up()
    for at in (past_api, too_big):
        letter = stack.dead_letter_of(at)
        assert letter is not None and letter[ERROR_CLASS] == "RecordTooLargeError", letter
        assert "at most" in letter[ERROR_MESSAGE]
    assert stack.events(huge_message) == []
    assert 'convdb_runner_refused_records_total{reason="too_large"} 2.0' in stack.metrics()
    healthy(stack)


def test_records_on_the_wrong_partition_are_dead_lettered_not_run_by_a_second_writer(
    stack: RunnerStack,
) -> None:
    partitions = stack.settings.partitions
    cid = on_partition(0, stack.settings, lambda: f"acme-{uuid.uuid4().hex[:8]}")
    wrong = stack.message(cid, "on partition 1", tenant="acme", partition=1)
    # librdkafka's own default partitioner (CRC32) sends many keys elsewhere than murmur2 does.
    crc = on_partition(0, stack.settings, lambda: f"acme-{uuid.uuid4().hex[:8]}")
    while zlib.crc32(crc.encode()) % partitions == 0:
        crc = on_partition(0, stack.settings, lambda: f"acme-{uuid.uuid4().hex[:8]}")
    by_crc = stack.message(crc, "wherever", tenant="acme", partitioner="consistent_random")
    assert by_crc[0] == zlib.crc32(crc.encode()) % partitions != partition_for(crc, partitions)
    stack.caught_up()
    for at in (wrong, by_crc):
        letter = stack.dead_letter_of(at)
        assert letter is not None and letter[ERROR_CLASS] == "MisplacedRecordError", letter
        assert "maps to partition 0" in letter[ERROR_MESSAGE]
    assert stack.events(cid) == [] and stack.events(crc) == []

    stack.message(cid, "where it belongs", tenant="acme")
    wait_until(lambda: stack.finished(cid), 120, "the conversation run by its own runner", logs=stack.logs())
    assert stack.events_by_partition(cid) == {0}  # one writer, on the key's partition
    user = [e.content for e in stack.events(cid) if isinstance(e, MessageEvent) and e.role == "user"]
    assert user == ["where it belongs"]
    assert 'convdb_runner_refused_records_total{reason="partition"} 2.0' in stack.metrics()


@pytest.mark.slow_on("apache")
def test_foreign_records_in_the_events_and_state_topics_never_stop_a_restore(stack: RunnerStack) -> None:
    owner = umbrella_finishes(stack, 0, "before foreign records")
    partition = partition_for(owner, stack.settings.partitions)
    stack.kill_runner()
    other = CODEC.encode(
        Snapshot(
            conversation_id="someone-else",
            tenant_id="acme",
            timestamp=datetime.now(UTC),
            last_seq=0,
            execution_status="idle",
        )
    )
    planted = {
        "events": [
            stack.produce("events", owner.encode(), b"\xc3\x01garbage-not-avro", partition),
            stack.produce("events", b"no-such-conversation", b"\x00\x01\x02", partition),
            stack.produce("events", owner.encode(), other, partition),  # a snapshot on the events topic
        ],
        "state": [
            stack.produce("state", owner.encode(), b"not a snapshot", partition),
            stack.produce("state", owner.encode(), other, partition),  # another conversation's
            stack.produce("state", b"random-key", b"\xc3\x01\x00", partition),
        ],
    }
    for attempt in ("first", "second"):
        stack.start_runner()  # every restart reads the records again, and goes on
        stack.message(owner, f"still there? ({attempt} restart)")
        wait_until(
            lambda a=attempt: any(
                isinstance(e, MessageEvent) and f"({a} restart)" in e.content for e in stack.events(owner)
            ),
            120,
            f"the owner's conversation goes on after the {attempt} restart",
            logs=stack.logs(),
        )
        wait_until(lambda: stack.finished(owner), 120, "finished again", logs=stack.logs())
        healthy(stack)
        if attempt == "first":
            stack.kill_runner()
    for topic, places in planted.items():
        for at in places:
            letter = stack.dead_letter_of(at, topic)
            assert letter is not None and letter[ERROR_CLASS].endswith("Error"), (topic, at, letter)
    user = [e.content for e in stack.events(owner) if isinstance(e, MessageEvent) and e.role == "user"]
    assert user[0].startswith("hello from umbrella") and len(user) == 3  # nothing lost, nothing foreign
    assert not any(isinstance(e, ExternalEvent) for e in stack.events(owner))
    assert 'convdb_runner_refused_records_total{reason="log"}' in stack.metrics()


def test_a_record_the_broker_refuses_is_traced_to_it_and_dead_lettered(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    """What passes the runner's own check but not librdkafka's (a lower message.max.bytes): the
    batch's commit fails, its records commit one by one, and the culprit is dead-lettered."""
    settings = runner_settings(broker, tmp_path)
    stack = RunnerStack(
        settings, tmp_path, runner_env={"CONVDB_KAFKA__EXTRA": '{"message.max.bytes": 300000}'}
    )
    cid = openhands_id(1, settings)
    big = fresh(SAMPLE)[:2]
    big[1]["llm_message"]["content"] = [{"type": "text", "text": "b" * 400_000}]
    before, after = fresh(SAMPLE), fresh(SAMPLE)
    places = [stack.inbox_batch(cid, batch) for batch in (before, big, after)]  # one batch, read at once
    try:
        stack.start(api=False)
        umbrella_finishes(stack, 1, "after a record the broker refused")
        stack.caught_up()
        letter = stack.dead_letter_of(places[1])
        assert letter is not None and letter[ERROR_CLASS] == "RecordTooLargeError", letter
        assert letter["value_bytes"] == 0 and "too large" in letter[ERROR_MESSAGE]
        assert stack.dead_letter_of(places[0]) is None and stack.dead_letter_of(places[2]) is None
        held = {e.id for e in stack.events(cid)}
        assert {e["id"] for e in before + after} <= held and big[1]["id"] not in held
        assert len(stack.lines("write_failed")) == 2  # the batch, then the record alone
        healthy(stack)
        assert "convdb_runner_stalled_partitions 0.0" in stack.metrics()
    finally:
        stack.stop()
