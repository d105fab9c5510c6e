"""Who owns a conversation, as the log says (DESIGN §11): the tenant of its first record.

The read side (views) names the owner of every conversation it has folded; an owner never
changes, so that answer is final. What the read side has not folded yet is in two short tails
of the conversation's partition: the inbox after the runners' committed offset (records no
runner has handled) and the events after the views' stored offset (events the read side has not
folded). Reading those two tails (never a partition from offset 0 while the read side keeps up)
gives the same answer the runner will give, so a post is refused with 404 when another tenant
owns the id even while the read side lags.

Two posts that race for a new id are both published; the first in the inbox partition wins (the
runner refuses the other to the DLQ). `confirm_claim` reads the inbox again up to the post's own
record, so the loser is answered 404 too, never 202.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlalchemy as sa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from convdb.consumers.errors import ConsumerError
from convdb.consumers.store import stored_offsets
from convdb.consumers.views import queries as views
from convdb.infra.kafka import fetch_wait_ms, make_consumer
from convdb.infra.partitioner import partition_for
from convdb.infra.records import coordinates
from convdb.infra.retry import Backoff
from convdb.infra.settings import Settings
from convdb.schemas import Codec
from convdb.schemas.errors import SchemaError
from convdb.schemas.topics import EVENTS, INBOX

COMMITTED_RETRY_S = 2.0
"""How long the runners' committed offset is asked for again while the broker answers with a
retriable error (waits of 0.2, 0.4, 0.8 s...: five quick tries)."""
VIEWS = "views"
"""The projector whose stored offsets say how far the read side has folded the events."""


class OwnershipUnknownError(ConsumerError):
    """The log tail to read is longer than `api.owner_scan_limit`: the read side lags too far to decide."""


@dataclass(frozen=True)
class Claim:
    """Where the inbox stood before a post: the tail `confirm_claim` reads again."""

    partition: int
    start: int


class LogOwnership:
    """Answers "who owns this conversation" from the read side and, for what it lacks, the log tails."""

    def __init__(self, settings: Settings, engine: sa.Engine, codec: Codec) -> None:
        self.settings = settings
        self.engine = engine
        self.codec = codec
        self.limit = settings.api.owner_scan_limit
        self._readers: list[Consumer] = []
        self._lock = threading.Lock()
        self._committed: Consumer | None = None

    def read_side_owner(self, conversation_id: str) -> str | None:
        """The tenant the views name as owner, None when they do not know the conversation."""
        with self.engine.connect() as conn:
            return views.owner(conn, conversation_id)

    def owner(self, conversation_id: str) -> tuple[str | None, Claim | None]:
        """The owner (None: nobody yet), and for a conversation the read side does not know, the
        inbox position a claim is confirmed from.

        Raises:
            OwnershipUnknownError: the broker does not answer, or a tail is too long to read now.
        """
        found = self.read_side_owner(conversation_id)
        if found is not None:
            return found, None
        partition = partition_for(conversation_id, self.settings.partitions)
        # The runners' position first: whatever they handle meanwhile is in the events tail.
        inbox_start = self._runners_position(partition)
        events = EVENTS.name(self.settings.namespace)
        found = self._first_tenant(events, partition, self._views_position(partition), None, conversation_id)
        if found is None:
            inbox = INBOX.name(self.settings.namespace)
            found = self._first_tenant(inbox, partition, inbox_start, None, conversation_id)
        return found, Claim(partition, inbox_start)

    def confirm_claim(self, claim: Claim, conversation_id: str, tenant_id: str, own_offset: int) -> bool:
        """True when no other tenant's record for the conversation precedes ours in the inbox."""
        inbox = INBOX.name(self.settings.namespace)
        first = self._first_tenant(inbox, claim.partition, claim.start, own_offset + 1, conversation_id)
        return first is None or first == tenant_id

    def close(self) -> None:
        """Close the log readers."""
        with self._lock:
            for reader in [*self._readers, *([self._committed] if self._committed else [])]:
                reader.close()
            self._readers.clear()
            self._committed = None

    def _runners_position(self, partition: int) -> int:
        inbox = INBOX.name(self.settings.namespace)
        with self._lock:
            if self._committed is None:
                # The runners' group id, to read what they committed; this consumer never joins the
                # group (no subscribe) and never commits.
                self._committed = make_consumer(self.settings, self.settings.group("runner"))
            backoff = Backoff(COMMITTED_RETRY_S, first_s=0.2)
            while True:
                try:
                    found = self._committed.committed([TopicPartition(inbox, partition)], timeout=10)
                    return max(found[0].offset, 0)
                except KafkaException as exc:
                    # e.g. NOT_COORDINATOR while a fresh broker elects the group's coordinator
                    error = exc.args[0]
                    wait = backoff.failed() if error.retriable() else None
                    if wait is None:
                        raise OwnershipUnknownError(f"runners' position in {inbox}: {error.str()}") from exc
                    backoff.wait(wait)

    def _views_position(self, partition: int) -> int:
        events = EVENTS.name(self.settings.namespace)
        with self.engine.connect() as conn:
            stored = stored_offsets(conn, [VIEWS], [(events, partition)])
        return max(stored.get((VIEWS, events, partition), 0), 0)

    def _first_tenant(
        self, topic: str, partition: int, start: int, end: int | None, conversation_id: str
    ) -> str | None:
        """The tenant of the first record of the conversation in [start, end) (end None: to the end)."""
        key = conversation_id.encode()
        with self._reader() as reader:
            reader.assign([TopicPartition(topic, partition, start)])
            read = 0
            try:
                while end is None or start + read < end:
                    msg = reader.poll(5.0)
                    if msg is None:
                        raise OwnershipUnknownError(f"{topic}[{partition}] did not answer within 5 s")
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            return None
                        raise OwnershipUnknownError(f"{topic}[{partition}]: {err.str()}")
                    read = coordinates(msg)[2] - start + 1
                    if read > self.limit:
                        raise OwnershipUnknownError(
                            f"{topic}[{partition}] has more than {self.limit} records the read side has "
                            "not folded: retry when it caught up"
                        )
                    value = msg.value()
                    if msg.key() == key and value:
                        try:
                            return self.codec.decode(value).tenant_id
                        except SchemaError:
                            continue  # a poison record claims nothing (the runner dead-letters it)
            finally:
                reader.unassign()
        return None

    @contextmanager
    def _reader(self) -> Iterator[Consumer]:
        with self._lock:
            reader = self._readers.pop() if self._readers else None
        if reader is None:
            reader = make_consumer(
                self.settings,
                self.settings.group("api-ownership"),
                # It reads a log tail to its end: an empty fetch there waits this long.
                **{"enable.partition.eof": True, "fetch.wait.max.ms": fetch_wait_ms(self.settings)},
            )
        try:
            yield reader
        finally:
            with self._lock:
                self._readers.append(reader)
