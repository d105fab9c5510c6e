"""A service told to stop ends within `CONVDB_OPS__STOP_GRACE_S`, even when every broker is gone.

A clean stop commits, flushes and leaves the consumer group: all of it waits on a broker. With
the brokers gone (the dev stack torn down under its services, a parent that died) the services
used to wait for ever, and an orphaned reconciler spun on its reconnects.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from convdb.consumers.reconciler import CHANGELOG
from convdb.infra.dev.broker import EmbeddedBroker
from convdb.infra.kafka import apply_topics
from convdb.infra.procs import free_port
from convdb.schemas.topics import ALL_TOPICS
from tests.conftest import BrokerInfo, settings_for, wait_until
from tests.reconciler.conftest import Proc, wait_worker_ready

GRACE_S = 4.0


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker of this test alone: the test takes it away."""
    with EmbeddedBroker(tmp_path / "tansu.log") as broker:
        yield broker


def _assigned(port: int) -> bool:
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return False
    return any(
        line.startswith("convdb_group_assigned_partitions{") and float(line.rsplit(" ", 1)[1]) > 0
        for line in text.splitlines()
    )


SERVICES = {
    "reconcile": ["reconcile", "--log-level", "info"],
    "consume all": ["consume", "all"],
    "consume archive": ["consume", "archive"],
    "runner": ["runner"],
}
"""The long-running services, by their `convdb` command line."""


@pytest.mark.parametrize("command", sorted(SERVICES))
def test_a_service_whose_brokers_are_gone_ends_within_its_stop_grace(
    own_broker: EmbeddedBroker, tmp_path: Path, command: str
) -> None:
    settings = settings_for(
        BrokerInfo(own_broker.bootstrap_servers, embedded=True, kind="embedded", name="own"),
        tmp_path / "data",
        partitions=2,
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        archive_url=f"file://{tmp_path / 'archive'}",
        ops={"stop_grace_s": GRACE_S},
    )
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    port = free_port()
    env = {
        **settings.to_env(),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "CONVDB_OPS__LOG_LEVEL": "INFO",
        "CONVDB_OPS__PORT": str(port),
    }
    argv = [sys.executable, "-m", "convdb", *SERVICES[command]]
    service = Proc(argv, tmp_path / "service.log", env).start()
    assert service.proc is not None
    try:
        if command == "reconcile":
            wait_worker_ready(service)
        else:

            def assigned() -> bool:
                assert service.alive, f"{command} exited:\n{service.tail()}"
                return _assigned(port)

            wait_until(assigned, 120, f"{command} to be up and assigned", logs=[service.log])
        own_broker.stop()
        time.sleep(1.0)  # it notices: its connections fail and it starts reconnecting
        service.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        wait_until(
            lambda: not service.alive, GRACE_S + 20, f"{command} to end after SIGTERM", logs=[service.log]
        )
        took = time.monotonic() - signalled
        log = service.log.read_text(errors="replace")
        # Either its clean stop finished without the brokers, or the deadline ended it, and said so.
        assert took < GRACE_S + 10, f"{command} took {took:.1f} s to end:\n{service.tail()}"
        if service.proc.returncode != 0:
            assert service.proc.returncode == 1 and "after the signal (brokers away?): exiting" in log, log
        print(f"{command}: ended {took:.1f} s after SIGTERM with status {service.proc.returncode}")
    finally:
        service.kill()
