"""Fencing of a partition writer's zombie: its open transaction never reaches a read_committed reader.

A runner that lost its partition while frozen between producing and committing (SIGSTOP, GC pause,
network partition) is a zombie with an open transaction. Its successor's `init_transactions`
must abort that transaction. Apache Kafka does; the embedded broker does not (capability record:
`fencing_aborts_open_transaction`), and this test proves the gap is as recorded.
"""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from convdb.infra.settings import Settings
from convdb.producers.fleet import transactional_id
from convdb.producers.publisher import TransactionalPublisher
from convdb.schemas import MessageEvent, SingleObjectCodec
from convdb.schemas.topics import EVENTS
from tests.conftest import BrokerInfo
from tests.helpers import new_id, now
from tests.producers._support import records

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]


def message(conv: str, seq: int, text: str) -> MessageEvent:
    return MessageEvent(
        id=new_id(),
        conversation_id=conv,
        tenant_id="t1",
        seq=seq,
        timestamp=now(),
        source="agent",
        role="assistant",
        content=text,
    )


def test_a_zombies_open_transaction_is_aborted_by_its_successor(
    broker: BrokerInfo, settings: Settings
) -> None:
    codec = SingleObjectCodec()
    tid = transactional_id(settings, 0)
    zombie = TransactionalPublisher(settings, codec, tid)
    zombie.publish_atomic([(EVENTS, message("conv-z", 1, "committed before the freeze"))])

    # The zombie is frozen here: its records are in the log, its transaction is open.
    zombie.producer.begin_transaction()
    zombie.publish(message("conv-z", 2, "zombie: never committed"))
    zombie.producer.flush(30)

    successor = TransactionalPublisher(settings, codec, tid)  # takes the partition over
    successor.publish_atomic([(EVENTS, message("conv-z", 2, "successor"))])

    with pytest.raises(KafkaException) as woke_up:  # the zombie wakes up and tries to commit
        zombie.producer.commit_transaction(5)
    texts = [e.content for e in records(settings, EVENTS, "conv-z")]
    if broker.capabilities.fencing_aborts_open_transaction:
        assert woke_up.value.args[0].code() == KafkaError._FENCED
        assert texts == ["committed before the freeze", "successor"]
    else:
        # Known gap of the embedded broker: the open transaction survives its successor's init
        # (the zombie's commit just times out), and its record reaches read_committed readers.
        assert woke_up.value.args[0].code() == KafkaError._TIMED_OUT
        assert texts == ["committed before the freeze", "zombie: never committed", "successor"]
