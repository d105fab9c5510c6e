"""Produce from the event loop and await the broker's acknowledgements (acks=all), no thread per request.

A poller thread serves the producer's delivery callbacks and hands each result to the waiting
request's future, so many webhook posts share one producer and librdkafka batches their
records (the ingest rate target of DESIGN §12 needs that concurrency).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from convdb.consumers.api._slots import WriteSlots
from convdb.infra import tracing
from convdb.infra.errors import PublishError
from convdb.infra.kafka import make_producer
from convdb.infra.settings import Settings


class AsyncAcks:
    """One shared idempotent producer whose `send` returns once every record is durable."""

    def __init__(self, settings: Settings, timeout_s: float, max_waiting: int) -> None:
        self.producer = make_producer(settings)
        self.timeout = timeout_s
        self.slots = WriteSlots(
            max_waiting, settings.api.tenant_write_share, "posts", "CONVDB_OPENHANDS__MAX_WAITING"
        )
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="convdb-acks", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.producer.poll(0.05)

    async def send(self, topic: str, records: list[tuple[str, bytes]]) -> list[tuple[int, int]]:
        """Produce `(key, value)` records; (partition, offset) of each once all are acknowledged.

        Raises:
            PublishError: a record was refused, not acknowledged within the timeout, or too many
                posts are already waiting for the broker (`WriteShareError`: too many of the
                posting tenant's).
        """
        # The broker is slow or down: fail fast instead of holding ever more bodies in memory.
        holder = self.slots.take()
        try:
            return await self._send(topic, records)
        finally:
            self.slots.give(holder)

    @property
    def waiting(self) -> int:
        """Posts waiting for the broker now."""
        return self.slots.waiting

    async def _send(self, topic: str, records: list[tuple[str, bytes]]) -> list[tuple[int, int]]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[tuple[int, int]]] = []
        for key, value in records:
            future: asyncio.Future[tuple[int, int]] = loop.create_future()

            def delivered(err: KafkaError | None, msg: Message, future: Any = future) -> None:
                loop.call_soon_threadsafe(_settle, future, err, msg.partition(), msg.offset())

            try:
                # Every record convdb writes continues the current trace (the webhook request's).
                headers = tracing.inject(None)
                # The stub types headers list[tuple[str, str | bytes | None]]: a list is invariant, so
                # list[tuple[str, bytes]] does not match it.
                self.producer.produce(topic, value, key, headers=headers, on_delivery=delivered)  # type: ignore[arg-type]
            except (BufferError, KafkaException) as exc:
                raise PublishError(f"{topic} key={key}: not queued: {exc}") from exc
            futures.append(future)
        try:
            return await asyncio.wait_for(asyncio.gather(*futures), self.timeout)
        except TimeoutError as exc:
            raise PublishError(f"{topic}: not acknowledged within {self.timeout:.0f}s") from exc

    def close(self) -> None:
        """Stop the poller and flush what is queued."""
        self._stop.set()
        self._poller.join(5)
        self.producer.flush(self.timeout)


def _settle(
    future: asyncio.Future[tuple[int, int]], err: KafkaError | None, partition: int | None, offset: int | None
) -> None:
    if future.done():
        return
    if err is not None:
        future.set_exception(PublishError(f"partition {partition}: not delivered: {err.str()}"))
    elif partition is None or offset is None:  # librdkafka reports both for every delivered record
        future.set_exception(PublishError("delivered, but the broker's answer names no partition and offset"))
    else:
        future.set_result((partition, offset))
