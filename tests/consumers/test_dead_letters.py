"""`BatchLetters`: a batch's dead letters, each record once by its coordinates, all again after a
failed DLQ write (the DLQ itself is exercised against a real broker in test_poison)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import Message

from convdb.consumers.dlq import BatchLetters
from convdb.infra.errors import PublishError


@dataclass
class RecordingDeadLetters:
    """Stands for `DeadLetters`: records what is sent; its waits fail while `failing` is set."""

    sent: list[tuple[int, str]] = field(default_factory=list)
    failing: bool = False

    def send(self, msg: Message, error: BaseException) -> None:
        self.sent.append((msg.offset(), str(error)))

    def wait_durable(self) -> None:
        if self.failing:
            raise PublishError("dlq not acknowledged")


def batch(*offsets: int) -> dict[tuple[str, int, int], Message]:
    return {("t", 0, o): Message(topic="t", partition=0, offset=o, key=b"k", value=b"v") for o in offsets}


def test_a_record_refused_again_by_a_retried_transaction_is_dead_lettered_once() -> None:
    dead, raw = RecordingDeadLetters(), batch(1, 2, 3)
    letters = BatchLetters(dead, raw, [(raw[("t", 0, 1)], ValueError("undecodable"))])  # type: ignore[arg-type]
    letters.send()
    letters.add(("t", 0, 2), ValueError("refused"))
    letters.wait_durable()
    letters.add(("t", 0, 2), ValueError("refused again"))  # the same record, on the next try
    letters.add(("t", 0, 1), ValueError("refused too"))  # the poison, refused by the store as well
    letters.wait_durable()
    assert dead.sent == [(1, "undecodable"), (2, "refused")]
    assert len(letters) == 2


def test_after_a_failed_wait_every_letter_of_the_batch_is_sent_again() -> None:
    dead, raw = RecordingDeadLetters(failing=True), batch(1, 2)
    letters = BatchLetters(dead, raw, [(raw[("t", 0, 1)], ValueError("undecodable"))])  # type: ignore[arg-type]
    letters.add(("t", 0, 2), ValueError("refused"))
    with pytest.raises(PublishError):
        letters.wait_durable()
    dead.failing = False
    letters.wait_durable()
    assert dead.sent == [(1, "undecodable"), (2, "refused")] * 2
    letters.wait_durable()  # durable now: nothing is sent a third time
    assert len(dead.sent) == 4
