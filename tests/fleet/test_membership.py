"""A runner's group membership settings, per broker kind: what librdkafka is given (no broker)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer

from convdb.infra.kafka import consumer_config, is_incremental
from convdb.infra.settings import Settings
from convdb.producers.fleet.membership import poll_interval_ms, run_budget_s, runner_config
from tests.conftest import settings_for


def settings_of(embedded: bool, **fields: Any) -> Settings:
    return settings_for(None, bootstrap_servers="127.0.0.1:1", kafka={"embedded": embedded}, **fields)


def accepted(conf: dict[str, Any]) -> bool:
    """librdkafka builds a consumer from it (it refuses classic settings under the consumer protocol)."""
    Consumer(conf).close()
    return True


def test_apache_runners_use_the_consumer_protocol_without_client_side_group_settings() -> None:
    conf = runner_config(settings_of(False))
    assert conf["group.protocol"] == "consumer" and is_incremental(conf)
    assert conf["group.remote.assignor"] == "range"  # each topic split, co-partitioned topics together
    assert not {"session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"} & set(conf)
    assert accepted(conf)


def test_the_embedded_broker_keeps_range_with_its_short_timeouts() -> None:
    s = settings_of(True)
    conf = runner_config(s)
    assert conf["partition.assignment.strategy"] == "range" and not is_incremental(conf)
    assert conf["session.timeout.ms"] == s.kafka.embedded_session_timeout_ms
    assert accepted(conf)


def test_eager_members_stay_eager_on_every_broker() -> None:
    for embedded in (False, True):
        conf = consumer_config(settings_of(embedded), "g")
        assert conf["partition.assignment.strategy"] == "range" and "group.protocol" not in conf


def test_a_runner_with_a_stable_name_is_a_static_member() -> None:
    assert "group.instance.id" not in runner_config(settings_of(False))
    conf = runner_config(settings_of(False, runtime={"instance_id": "convdb-runner-0"}))
    assert conf["group.instance.id"] == "convdb-runner-0" and accepted(conf)


def test_the_embedded_broker_ignores_a_stable_name(caplog: Any) -> None:
    """A static member there is assigned and revoked again every few seconds (bench fleet found it)."""
    conf = runner_config(settings_of(True, runtime={"instance_id": "convdb-runner-0"}))
    assert "group.instance.id" not in conf
    assert "CONVDB_RUNTIME__INSTANCE_ID ignored" in caplog.text


def test_the_poll_interval_covers_the_longest_run_the_settings_allow() -> None:
    s = settings_of(False)
    # 30 steps of a 60 s LLM call and two rounds of 10 s tool calls (8 children, 4 at a time).
    assert run_budget_s(s) == 30 * (60 + 2 * 10)
    assert runner_config(s)["max.poll.interval.ms"] == poll_interval_ms(s) == (2400 + 60) * 1000
    short = settings_of(False, runtime={"max_iterations": 1})
    assert poll_interval_ms(short) == 300_000  # never below librdkafka's default
