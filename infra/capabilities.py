"""The broker-capability record: what convdb relies on, and what each broker kind really does.

Every field is probed against the broker in use by `tests/brokers/test_capabilities.py`, for the
supported and the unsupported values alike, so the record cannot drift from the brokers. Code
that must work around a gap asks this record (never the broker's name), and the workaround is
named after the embedded broker that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from convdb.infra.settings import Settings


@dataclass(frozen=True)
class BrokerCapabilities:
    """What one broker kind supports of the protocol features convdb uses."""

    kind: str
    idempotence: bool
    """librdkafka idempotent producer: InitProducerId, retries without duplicates."""
    idempotent_producer_survives_restart: bool
    """An idempotent producer that lived through a broker restart can still produce."""
    transactions: bool
    """librdkafka transactions: init, commit, abort, consumer offsets sent in the transaction."""
    read_committed_hides_aborted: bool
    """A read_committed reader never sees a record of an aborted transaction."""
    fencing_aborts_open_transaction: bool
    """A new producer with the same transactional.id aborts the zombie's open transaction, and
    the zombie's later commit fails as fenced."""
    aborted_visible_read_uncommitted: bool
    """A read_uncommitted reader still sees aborted records (Kafka keeps them in the log)."""
    aiokafka_idempotence: bool
    """aiokafka's InitProducerId (v0) is answered: faust can use an idempotent producer."""
    aiokafka_transactions: bool
    """aiokafka transactions work: faust can run with processing_guarantee="exactly_once"."""
    compaction: bool
    """The log cleaner compacts `cleanup.policy=compact` topics (older values of a key go away)."""
    offsets_for_times_by_create_time: bool
    """offsets_for_times finds the first record whose CreateTime is >= the query, and answers the
    end (-1) past the last record."""
    list_offsets_latest_exact: bool
    """ListOffsets LATEST is the true end offset even when the last batch holds many records."""
    delete_records: bool
    """DeleteRecords moves the log start offset."""
    create_partitions: bool
    """CreatePartitions adds partitions to a topic."""
    consumer_group_protocol: bool
    """The KIP-848 `group.protocol=consumer` rebalance protocol (the classic one works on both)."""
    quick_cooperative_handover: bool
    """A partition that a classic-protocol cooperative-sticky rebalance moves to a joining member
    reaches it within 3 s (Tansu 0.6 holds each of its three join rounds half a session: 4 s)."""
    short_session_timeouts: bool
    """Consumer session timeouts below 6 s are accepted (Kafka's group.min.session.timeout.ms)."""
    group_survives_members_leaving_together: bool
    """When the last members of a group leave while the first one's leave is still rebalancing the
    group, a new member later gets its assignment (Tansu 0.6 never assigns it: the group is stuck)."""


APACHE = BrokerCapabilities(
    kind="apache",
    idempotence=True,
    idempotent_producer_survives_restart=True,
    transactions=True,
    read_committed_hides_aborted=True,
    fencing_aborts_open_transaction=True,
    aborted_visible_read_uncommitted=True,
    aiokafka_idempotence=True,
    aiokafka_transactions=True,
    compaction=True,
    offsets_for_times_by_create_time=True,
    list_offsets_latest_exact=True,
    delete_records=True,
    create_partitions=True,
    consumer_group_protocol=True,
    quick_cooperative_handover=True,
    short_session_timeouts=False,
    group_survives_members_leaving_together=True,
)
"""Apache Kafka (the reference), as launched by infra/apache.py or any real cluster."""

EMBEDDED = BrokerCapabilities(
    kind="embedded",
    idempotence=True,
    idempotent_producer_survives_restart=False,
    transactions=True,
    read_committed_hides_aborted=False,
    fencing_aborts_open_transaction=False,
    aborted_visible_read_uncommitted=True,
    aiokafka_idempotence=False,
    aiokafka_transactions=False,
    compaction=False,
    offsets_for_times_by_create_time=False,
    list_offsets_latest_exact=False,
    delete_records=False,
    create_partitions=False,
    consumer_group_protocol=False,
    quick_cooperative_handover=False,
    short_session_timeouts=True,
    group_survives_members_leaving_together=False,
)
"""The embedded Tansu broker (memory storage), INFRA-NOTES §1.3–1.6."""


def capabilities_of(*, embedded: bool) -> BrokerCapabilities:
    """The record of a broker kind."""
    return EMBEDDED if embedded else APACHE


def capabilities(settings: Settings) -> BrokerCapabilities:
    """The record of the broker these settings point at."""
    return capabilities_of(embedded=settings.kafka.embedded)
