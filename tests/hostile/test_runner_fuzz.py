"""Fuzzing the running system with hostile OpenHands posts (issue 21), on both brokers.

Valid webhook batches and ConversationInfo posts, mutated (types, depths, sizes, integers,
Unicode: `tests.projections.openhands_mutations`), are posted to the API, and the same payloads
are written straight into the inbox as no API would let them pass. For every case: the API
answers 4xx, or the runner appends it or dead-letters it; so for every record written past the
API. Then the runner is still up and healthy, and another tenant's conversation on the same
partition finishes, also after the runner is killed and restarted with all of it behind it.
Bounded here (40 cases per broker); `-m slow` runs the long variant.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convdb.infra.dlq import CONSUMER, ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC
from convdb.infra.reader import read_topic
from tests.conftest import BrokerInfo, wait_until
from tests.hostile.runner_stack import ACME, RunnerStack, on_partition, openhands_id, runner_settings
from tests.projections.openhands_mutations import INFO, hostile_batches, hostile_infos

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

PARTITION = 2
"""Every fuzzed conversation, and the other tenant's, is on this partition."""


@pytest.fixture(scope="module")
def stack(broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerStack]:
    root = tmp_path_factory.mktemp(f"runner-fuzz-{broker.name}")
    running = RunnerStack(runner_settings(broker, root), root).start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Fuzzed:
    """What the cases did: the API's answers, and every inbox record written (conversation, place)."""

    answers: Counter[int] = field(default_factory=Counter)
    written: list[tuple[str, tuple[int, int]]] = field(default_factory=list)


payloads = st.one_of(
    st.tuples(st.just("events"), hostile_batches()),
    st.tuples(st.just("conversation_info"), hostile_infos()),
)


def post(stack: RunnerStack, fuzzed: Fuzzed, case: tuple[str, Any]) -> None:
    """One case, through the API and past it, each with a conversation of its own."""
    kind, payload = case
    cid, bypass = openhands_id(PARTITION, stack.settings), openhands_id(PARTITION, stack.settings)
    if kind == "conversation_info" and isinstance(payload, dict) and payload.get("id") == INFO["id"]:
        payload["id"] = uuid.UUID(cid).hex
    path = (
        f"/openhands/webhooks/events/{uuid.UUID(cid).hex}"
        if kind == "events"
        else "/openhands/webhooks/conversations"
    )
    answer = stack.call("POST", path, ACME, content=json.dumps(payload))
    assert answer.status_code == 200 or 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    fuzzed.answers[answer.status_code] += 1
    if answer.status_code == 200:
        fuzzed.written += [(cid, (r["partition"], r["offset"])) for r in answer.json()["records"]]
    fuzzed.written.append((bypass, stack.inbox_batch(bypass, json.dumps(payload), kind=kind)))


def outcomes(stack: RunnerStack, fuzzed: Fuzzed) -> Counter[str]:
    """Every inbox record written was appended (its conversation has events) or dead-lettered."""
    inbox = stack.settings.topic("inbox")
    dead = set()
    for msg in read_topic(stack.settings, stack.settings.topic("dlq")):
        headers = {k: (v or b"").decode(errors="replace") for k, v in msg.headers() or []}
        if headers.get(ORIGINAL_TOPIC) == inbox and headers.get(CONSUMER) == "runner":
            dead.add((int(headers[ORIGINAL_PARTITION]), int(headers[ORIGINAL_OFFSET])))
    events = read_topic(stack.settings, stack.settings.topic("events"))
    with_events = {(m.key() or b"").decode(errors="replace") for m in events}
    found: Counter[str] = Counter()
    for cid, at in fuzzed.written:
        outcome = "dead-lettered" if at in dead else "appended" if cid in with_events else "lost"
        assert outcome != "lost", f"inbox record {at} of {cid}: neither appended nor dead-lettered"
        found[outcome] += 1
    return found


def umbrella_finishes(stack: RunnerStack, what: str) -> None:
    cid = on_partition(PARTITION, stack.settings, lambda: f"umbrella-{uuid.uuid4().hex[:8]}")
    stack.message(cid, f"hello ({what})")
    wait_until(
        lambda: stack.finished(cid),
        180,
        f"umbrella's conversation on partition {PARTITION} ({what})",
        logs=stack.logs(),
    )


def healthy(stack: RunnerStack) -> None:
    assert stack.runner_alive()
    status, body = stack.health()
    assert status == 200, body


def fuzz(stack: RunnerStack, examples: int) -> None:
    fuzzed = Fuzzed()

    @settings(max_examples=examples, database=None, suppress_health_check=list(HealthCheck))
    @given(case=payloads)
    def one(case: tuple[str, Any]) -> None:
        post(stack, fuzzed, case)

    one()
    stack.caught_up(timeout=600)
    found = outcomes(stack, fuzzed)
    print(f"API answers {dict(fuzzed.answers)}; inbox records {dict(found)}")  # the figures of a run
    healthy(stack)
    umbrella_finishes(stack, "after the fuzzing")
    stack.kill_runner()
    stack.start_runner()
    umbrella_finishes(stack, "after a restart with every hostile record behind it")
    healthy(stack)


@pytest.mark.slow_on("apache")
def test_hostile_posts_are_refused_appended_or_dead_lettered_and_the_runner_goes_on(
    stack: RunnerStack,
) -> None:
    fuzz(stack, 40)


@pytest.mark.slow
def test_the_long_fuzz(stack: RunnerStack) -> None:
    fuzz(stack, 3000)
