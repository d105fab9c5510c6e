"""Kafka client factories and topic provisioning, for Apache Kafka and the embedded broker alike."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from convdb.infra.capabilities import capabilities
from convdb.infra.errors import BrokerUnreachableError, NoBrokerError, TopicError
from convdb.infra.settings import Settings
from convdb.schemas.topics import ALL_TOPICS, Topic

logger = logging.getLogger(__name__)

LIBRDKAFKA_LOGGER = "convdb.librdkafka"
"""The Python logger librdkafka's own log lines go to (through the `logger` client setting)."""
PROBE_TIMEOUT_S = 4.0
"""How long a one-shot command waits for the broker to answer before it says it is unreachable."""


class OncePerProblem(logging.Filter):
    """librdkafka repeats a problem at every retry (a refused connection, every second): this lets
    one line per distinct problem through per `window_s`, WARNING and above, and says how often it
    was repeated meanwhile. Problems differ by their text with the numbers taken out."""

    def __init__(self, window_s: float = 60.0, *, capacity: int = 1000) -> None:
        super().__init__()
        self.window_s, self.capacity = window_s, capacity
        self._seen: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """Pass the first line of a problem in its window; count and drop the repeats."""
        if record.levelno < logging.WARNING:
            return False
        key = problem_key(record.getMessage())
        now = time.monotonic()
        with self._lock:
            first, repeats = self._seen.get(key, (float("-inf"), 0))
            if now - first < self.window_s:
                self._seen[key] = (first, repeats + 1)
                return False
            if len(self._seen) >= self.capacity:
                self._seen.clear()
            self._seen[key] = (now, 0)
        if repeats:
            record.msg, record.args = f"{record.getMessage()} (repeated {repeats} times before)", ()
        return True


def problem_key(message: str) -> str:
    """What makes a librdkafka log line a distinct problem: its text without client names and numbers."""
    return re.sub(r"\d+", "#", re.sub(r"rdkafka#\w+-\d+", "", message))


def librdkafka_logger() -> logging.Logger:
    """The logger every client is given: librdkafka's lines become Python log records (never raw
    `%3|...` lines on stderr), once per distinct problem (`OncePerProblem`)."""
    log = logging.getLogger(LIBRDKAFKA_LOGGER)
    if not any(isinstance(f, OncePerProblem) for f in log.filters):
        log.addFilter(OncePerProblem())
    return log


def common_config(settings: Settings) -> dict[str, Any]:
    """Settings every client shares: bootstrap servers, librdkafka's logs routed to Python logging
    (served by the client's poll, so nothing is printed once a client is closed), plus the raw
    `extra` passthrough."""
    if not settings.bootstrap_servers:
        raise NoBrokerError("no Kafka broker configured: set CONVDB_BOOTSTRAP_SERVERS or run `convdb dev up`")
    return {
        "bootstrap.servers": settings.bootstrap_servers,
        "logger": librdkafka_logger(),
        **settings.kafka.extra,
    }


def probe_broker(settings: Settings, source: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise unless a broker answers a metadata request at `settings.bootstrap_servers` in `timeout`.

    `source` says where the address came from (an environment variable, the dev stack file).

    Raises:
        NoBrokerError: no address is configured.
        BrokerUnreachableError: nothing answered in time (the message names address and source).
    """
    admin = make_admin(settings)
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        reason = error.str() if hasattr(error, "str") else str(error)
        raise BrokerUnreachableError(
            f"no Kafka broker answered at {settings.bootstrap_servers} (from {source}) within "
            f"{timeout:.0f} s: {reason}"
        ) from exc


def producer_config(settings: Settings, transactional_id: str | None = None) -> dict[str, Any]:
    """An idempotent, acks=all producer that fails loudly after the delivery deadline."""
    conf = {
        **common_config(settings),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": settings.kafka.linger_ms,
        "message.timeout.ms": int(settings.kafka.delivery_timeout_s * 1000),
        # Same key -> partition mapping as the Java client, so any Kafka tool co-partitions.
        "partitioner": "murmur2_random",
        "allow.auto.create.topics": False,
    }
    if transactional_id:
        conf["transactional.id"] = transactional_id
        conf["transaction.timeout.ms"] = max(60000, conf["message.timeout.ms"])
    return conf


def group_timeouts_ms(settings: Settings) -> tuple[int, int]:
    """The group session timeout and heartbeat interval for this broker kind, in ms."""
    k = settings.kafka
    if k.embedded:
        return k.embedded_session_timeout_ms, k.embedded_heartbeat_interval_ms
    return k.session_timeout_ms, k.heartbeat_interval_ms


def rebalance_config(settings: Settings, *, incremental: bool) -> dict[str, Any]:
    """How a group member rebalances on this broker (the capability record decides, never its name).

    `incremental` members handle partial assignments (their rebalance callbacks get the moved
    partitions only): on a broker with the KIP-848 consumer protocol the broker assigns and hands
    partitions over one at a time, and its session timeout and heartbeat interval are the
    group's, set broker side (librdkafka refuses them, and `partition.assignment.strategy`, here);
    on a classic broker they use cooperative-sticky. Everyone else, and the embedded broker's
    members, rebalance eagerly with `range`.
    """
    caps = capabilities(settings)
    if incremental and caps.consumer_group_protocol:
        # The broker's `range` assignor, not its default `uniform`: uniform balances the count of
        # all partitions, so of two `consume all` members one got every events partition and the
        # other none (seen in tests/consumers/test_exactly_once.py); range splits each topic and
        # gives a member the same partition numbers of co-partitioned topics.
        return {"group.protocol": "consumer", "group.remote.assignor": "range"}
    session, heartbeat = group_timeouts_ms(settings)
    # Embedded-broker workaround (`quick_cooperative_handover` False): a cooperative-sticky join
    # takes three join rounds there, each held for half a session, so a moved partition waits
    # about twice as long as with `range` (4 s against 2 s measured on Tansu 0.6).
    cooperative = incremental and caps.quick_cooperative_handover
    return {
        "session.timeout.ms": session,
        "heartbeat.interval.ms": heartbeat,
        "partition.assignment.strategy": "cooperative-sticky" if cooperative else "range",
    }


def is_incremental(conf: dict[str, Any]) -> bool:
    """True when a member with these settings is given and revoked only the partitions that move
    (its rebalance callbacks see deltas), False for an eager member (all revoked, all assigned)."""
    return conf.get("group.protocol") == "consumer" or conf.get("partition.assignment.strategy") == (
        "cooperative-sticky"
    )


def apply_group_timeouts(settings: Settings, group_id: str, timeout: float = 10.0) -> bool:
    """Give a KIP-848 group the session timeout and heartbeat interval of these settings.

    Under the consumer protocol they are the group's config (set broker side, within the brokers'
    `group.consumer.min/max.*` bounds), not the client's: without this a group gets the brokers'
    defaults (45 s session, 5 s heartbeat), and a moved partition waits for heartbeats. Returns
    False, with a warning, when the brokers refuse (bounds, ACLs): the group then runs on their
    defaults. Nothing to do on a classic broker, where the client sends them.
    """
    if not capabilities(settings).consumer_group_protocol:
        return True
    session, heartbeat = group_timeouts_ms(settings)
    entries = [
        ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
        for name, value in (
            ("consumer.session.timeout.ms", session),
            ("consumer.heartbeat.interval.ms", heartbeat),
        )
    ]
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=entries)
    admin = make_admin(settings)
    try:
        admin.incremental_alter_configs([resource], request_timeout=timeout)[resource].result(timeout)
    except KafkaException as exc:
        logger.warning(
            "group %s: session timeout %d ms / heartbeat %d ms not set (the brokers' defaults apply): %s",
            group_id, session, heartbeat, exc.args[0] if exc.args else exc,
        )  # fmt: skip
        return False
    return True


def consumer_config(
    settings: Settings, group_id: str, *, incremental: bool = False, **overrides: Any
) -> dict[str, Any]:
    """A manually committed, read-committed group consumer with profile-appropriate timeouts;
    `incremental` members rebalance partition by partition where the broker can (`rebalance_config`)."""
    conf = {
        **common_config(settings),
        "group.id": group_id,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        **rebalance_config(settings, incremental=incremental),
        "allow.auto.create.topics": False,
        # The read side is latency-sensitive: an idle fetch is answered after at most this long
        # (librdkafka's 500 ms default puts half a second into produce -> visible on Apache Kafka;
        # the embedded broker answers as records arrive, and a short wait only burns its CPU).
        "fetch.wait.max.ms": group_fetch_wait_ms(settings),
    }
    conf.update(overrides)
    return conf


def fetch_wait_ms(settings: Settings) -> int:
    """`fetch.wait.max.ms` of a reader that reads to a partition's end, for this broker profile."""
    k = settings.kafka
    return k.embedded_fetch_wait_max_ms if k.embedded else k.fetch_wait_max_ms


def group_fetch_wait_ms(settings: Settings) -> int:
    """`fetch.wait.max.ms` of a long-lived group consumer, for this broker profile."""
    k = settings.kafka
    return k.embedded_group_fetch_wait_max_ms if k.embedded else k.fetch_wait_max_ms


def make_producer(settings: Settings, transactional_id: str | None = None) -> Producer:
    """A producer built from `producer_config`."""
    return Producer(producer_config(settings, transactional_id))


def make_consumer(settings: Settings, group_id: str, **overrides: Any) -> Consumer:
    """A consumer built from `consumer_config` (an eager member: see `rebalance_config`)."""
    return Consumer(consumer_config(settings, group_id, **overrides))


def make_admin(settings: Settings) -> AdminClient:
    """An admin client."""
    return AdminClient(common_config(settings))


def apply_topics(
    settings: Settings, topics: tuple[Topic, ...] = ALL_TOPICS, timeout: float = 30.0
) -> dict[str, str]:
    """Create the missing topics; idempotent. Returns name -> 'created' | 'exists'.

    Raises:
        TopicError: a topic exists with another partition count (joins would break), or
            creation failed.
    """
    admin = make_admin(settings)
    existing = admin.list_topics(timeout=timeout).topics
    result: dict[str, str] = {}
    wanted = []
    for topic in topics:
        name = topic.name(settings.namespace)
        if name in existing:
            have = len(existing[name].partitions)
            if have != settings.partitions:
                raise TopicError(
                    f"topic {name} has {have} partitions, expected {settings.partitions}: "
                    "co-partitioned joins need one count; recreate it or set CONVDB_PARTITIONS"
                )
            result[name] = "exists"
        else:
            wanted.append(
                NewTopic(name, settings.partitions, settings.replication_factor, config=topic.config)
            )
    futures = admin.create_topics(wanted, request_timeout=timeout) if wanted else {}
    for name, future in futures.items():
        try:
            future.result()
            result[name] = "created"
        except KafkaException as exc:
            if exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
                result[name] = "exists"
            else:
                raise TopicError(f"cannot create topic {name}: {exc}") from exc
    _wait_visible(admin, list(futures), timeout)
    return result


def _wait_visible(admin: AdminClient, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while names:
        topics = admin.list_topics(timeout=timeout).topics
        names = [n for n in names if n not in topics or topics[n].error is not None]
        if not names:
            return
        if time.monotonic() > deadline:
            raise TopicError(f"topics not visible after {timeout}s: {names}")
        time.sleep(0.05)


def list_topics(settings: Settings, timeout: float = 10.0) -> dict[str, int]:
    """Topics of this namespace with their partition counts."""
    topics = make_admin(settings).list_topics(timeout=timeout).topics
    prefix = settings.namespace + "."
    return {n: len(t.partitions) for n, t in sorted(topics.items()) if n.startswith(prefix)}
