"""Producing that never drops anything: enqueue, then wait for the broker's acknowledgement.

`DurableProducer` is the one produce-and-wait path of convdb (publisher, DLQ, API, titles):
an idempotent acks=all producer whose failures raise `PublishError` naming topic, partition
and key, from the wait or past its deadline. `TransactionalProducer` adds all-or-nothing
groups under one `transactional.id`, and `transaction_error` tells a fenced writer from a
failed commit. Every record gets the current W3C trace context in its headers (`convdb.infra.tracing`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition
from opentelemetry.trace import SpanKind

from convdb.infra import tracing
from convdb.infra.errors import FencedError, PublishError
from convdb.infra.kafka import producer_config
from convdb.infra.settings import Settings

logger = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
Key = str | bytes | None
"""A record key: text, or the original bytes of a record being copied (the DLQ)."""

_REAP_EVERY = 10000
"""Untracked deliveries kept before finished ones are dropped (and their failures raised)."""


class Delivery:
    """The broker's answer for one produced record: partition and offset, or the error."""

    __slots__ = ("topic", "key", "partition", "offset", "error", "done")

    def __init__(self, topic: str, key: Key) -> None:
        self.topic = topic
        self.key = key if isinstance(key, str) else (key or b"").decode(errors="replace")
        self.partition = -1
        self.offset = -1
        self.error: KafkaError | None = None
        self.done = False

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        self.error = err
        partition = msg.partition()
        self.partition = -1 if partition is None else partition
        if err is None:
            offset = msg.offset()
            self.offset = -1 if offset is None else offset
        self.done = True

    @property
    def where(self) -> str:
        """`topic[partition] key=...` (partition `?` while the producer has not picked one)."""
        partition = self.partition if self.partition >= 0 else "?"
        return f"{self.topic}[{partition}] key={self.key}"

    def raise_for_error(self) -> None:
        """Raise `PublishError` naming topic, partition, key and the broker's error, if it failed."""
        if self.error is not None:
            raise PublishError(f"{self.where}: not delivered: {self.error.str()}")


class DurableProducer:
    """An idempotent, acks=all producer whose writes are waited for until the broker has them.

    Thread-safe for `send` (the API's worker threads share one). `produce_raw` deliveries are
    tracked until `flush`.
    """

    def __init__(self, settings: Settings, producer: Producer | None = None) -> None:
        self.settings = settings
        self.producer = producer or Producer(producer_config(settings))
        self._pending: list[Delivery] = []
        self._reap_at = _REAP_EVERY
        """`_pending`'s length at which finished deliveries are dropped next."""
        self._deadline = settings.kafka.delivery_timeout_s

    def produce_raw(
        self, topic: str, key: Key, value: bytes | None, headers: Headers | None = None
    ) -> Delivery:
        """Enqueue one record (not yet durable); waits while the local queue is full."""
        delivery = self._enqueue(topic, key, value, headers)
        self._pending.append(delivery)
        if len(self._pending) >= self._reap_at:
            self._reap()
            # The deliveries the broker has not acknowledged yet stay: reaping again only once as many
            # more are pending keeps the cost per record constant (reaping on every record past a
            # fixed mark, while a fast producer ran ahead of the acks, made publishing quadratic).
            self._reap_at = len(self._pending) + _REAP_EVERY
        return delivery

    def send(self, topic: str, key: Key, value: bytes | None, headers: Headers | None = None) -> Delivery:
        """Produce one record and wait until it is durable; returns where it landed.

        Raises:
            PublishError: not acknowledged in time, or rejected (the message names topic and key).
        """
        with tracing.span(f"publish {topic}", kind=SpanKind.PRODUCER, attributes=_messaging(topic, key)):
            return self.wait_durable([self._enqueue(topic, key, value, headers)])[0]

    def wait_durable(self, deliveries: Iterable[Delivery], timeout: float | None = None) -> list[Delivery]:
        """Block until every delivery is acknowledged (acks=all); raise on the first failure."""
        wanted = list(deliveries)
        deadline = time.monotonic() + (self._deadline + 5.0 if timeout is None else timeout)
        for d in wanted:
            while not d.done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PublishError(
                        f"{d.where}: not acknowledged in time; is the broker at "
                        f"{self.settings.bootstrap_servers} reachable?"
                    )
                # flush, not poll: it sends at once instead of after linger.ms.
                self.producer.flush(min(remaining, 0.1))
            d.raise_for_error()
        return wanted

    def flush(self, timeout: float | None = None) -> None:
        """Wait until everything `produce_raw` enqueued is durable; raise if anything failed."""
        pending, self._pending, self._reap_at = self._pending, [], _REAP_EVERY
        self.wait_durable(pending, timeout)

    def close(self) -> None:
        """Flush what is pending."""
        self.flush()

    def _enqueue(self, topic: str, key: Key, value: bytes | None, headers: Headers | None) -> Delivery:
        delivery = Delivery(topic, key)
        headers = tracing.inject(headers)  # every record convdb writes continues the current trace
        deadline = time.monotonic() + self._deadline
        while True:
            try:
                # The stub types headers list[tuple[str, str | bytes | None]]: a list is invariant, so
                # list[tuple[str, bytes]] does not match it.
                self.producer.produce(topic, value, key, headers=headers, on_delivery=delivery)  # type: ignore[arg-type]
                return delivery
            except BufferError as exc:
                if time.monotonic() > deadline:
                    raise PublishError(f"{delivery.where}: local queue full for {self._deadline}s") from exc
                self.producer.poll(0.05)
            except KafkaException as exc:
                raise PublishError(f"{delivery.where}: rejected: {exc}") from exc

    def _reap(self) -> None:
        """Drop the acknowledged deliveries at the head of `_pending` (raising a failed one's error).

        Acknowledgements come nearly in produce order, so the head is where the finished ones are:
        this costs what it drops, not the length of what is still in flight.
        """
        self.producer.poll(0)
        pending = self._pending
        finished = 0
        for d in pending:
            if not d.done:
                break
            d.raise_for_error()
            finished += 1
        del pending[:finished]


class WedgedError(PublishError):
    """A librdkafka call did not return within its deadline: the producer must be replaced."""


class TransactionalProducer(DurableProducer):
    """Groups of records committed all-or-nothing under one `transactional.id`.

    A newer producer with the same id fences this one: every later call raises `FencedError`.
    """

    def __init__(self, settings: Settings, transactional_id: str, init_timeout: float = 30.0) -> None:
        super().__init__(settings, Producer(producer_config(settings, transactional_id)))
        self.transactional_id = transactional_id
        self.wedged = False
        """True once a call outlived its deadline: nothing more may be asked of this producer."""
        try:
            self.producer.init_transactions(init_timeout)
        except KafkaException as exc:
            raise transaction_error(transactional_id, "init_transactions", exc) from exc

    def atomic(
        self,
        produce: Callable[[], object],
        offsets: list[TopicPartition] | None = None,
        group_metadata: Any = None,
        timeout: float | None = None,
        step: str = "commit",
    ) -> list[Delivery]:
        """Run `produce` (which calls `produce_raw`) and commit it, with consumer offsets, as one.

        Returns the deliveries of the transaction in produce order. An exception from `produce`
        aborts the transaction and propagates; a failed commit raises `FencedError` or
        `PublishError`.
        """
        timeout = self._deadline if timeout is None else timeout
        if self.wedged:
            raise WedgedError(f"transactional.id {self.transactional_id}: the producer is wedged")
        self._pending.clear()
        try:
            self.producer.begin_transaction()
            produce()
            if offsets:
                self._send_offsets(offsets, group_metadata, timeout)
            self.producer.commit_transaction(timeout)
        except KafkaException as exc:
            self._pending.clear()
            if exc.args[0].txn_requires_abort():
                self._abort(timeout)
            raise transaction_error(self.transactional_id, step, exc) from exc
        except WedgedError:
            self._pending.clear()  # no abort: librdkafka refuses it while the stuck call runs
            raise
        except BaseException:
            # Refused before anything was committed: end the open transaction so the next one can begin.
            self._pending.clear()
            self._abort(timeout)
            raise
        pending, self._pending = self._pending, []
        for d in pending:
            d.raise_for_error()
        return pending

    def _send_offsets(self, offsets: list[TopicPartition], group_metadata: Any, timeout: float) -> None:
        """`send_offsets_to_transaction`, with a deadline librdkafka does not always keep.

        When the group coordinator's broker dies, librdkafka 2.x can wait for it past the call's
        timeout, until that broker is back (confluentinc/librdkafka#5456, #5511). Past the
        deadline the producer is given up as wedged (`WedgedError`); its owner replaces it, and
        the new producer's `init_transactions` aborts the stuck transaction.
        """
        producer, done, failure = self.producer, threading.Event(), list[BaseException]()

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(offsets, group_metadata, timeout)
            except BaseException as exc:  # noqa: BLE001 - raised by the waiting caller
                failure.append(exc)
            finally:
                done.set()

        # A daemon thread: one that never returns holds the producer, not the process's exit.
        threading.Thread(target=call, name=f"send-offsets {self.transactional_id}", daemon=True).start()
        if not done.wait(timeout + 5.0):
            self.wedged = True
            logger.error(
                "transactional.id %s: send_offsets_to_transaction still waiting after %.0f s (group "
                "coordinator gone): giving this producer up",
                self.transactional_id,
                timeout + 5.0,
            )
            raise WedgedError(
                f"transactional.id {self.transactional_id}: send_offsets_to_transaction did not return "
                f"within {timeout + 5.0:.0f} s"
            )
        if failure:
            raise failure[0]

    def _abort(self, timeout: float) -> None:
        try:
            self.producer.abort_transaction(timeout)
        except KafkaException:
            logger.exception("abort_transaction failed for %s", self.transactional_id)


def transaction_error(transactional_id: str, step: str, exc: KafkaException) -> PublishError:
    """`FencedError` when a newer writer owns the id (or the producer is dead), else `PublishError`."""
    error = exc.args[0]
    if error.fatal() or error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ):
        return FencedError(f"transactional.id {transactional_id} was fenced at {step}: {error.str()}")
    return PublishError(f"transactional.id {transactional_id}: {step} failed: {error.str()}")


def _messaging(topic: str, key: Key) -> dict[str, str]:
    """Span attributes of a produced record."""
    text = key if isinstance(key, str) else (key or b"").decode(errors="replace")
    return {"messaging.system": "kafka", "messaging.destination.name": topic, "convdb.conversation_id": text}
