"""One tenant's flood of writes takes at most its share of the API's write slots; another tenant's
writes are still served. The real `convdb serve` on a broker of its own per kind, frozen
(SIGSTOP) while the flood waits on it, so the slots are held for as long as the test needs.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from convdb.infra.dev.apache import ApacheKafka
from convdb.infra.dev.broker import EmbeddedBroker
from convdb.infra.kafka import apply_topics
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.schemas import SingleObjectCodec
from convdb.schemas.topics import INBOX
from tests.api.served import served
from tests.conftest import BROKER_KINDS, BrokerInfo, settings_for, wait_until
from tests.projections.test_openhands import SAMPLE

pytestmark = pytest.mark.kafka

KEYS = {"key-flood-0123456789": "flood", "key-quiet-0123456789": "quiet"}
FLOOD = {"X-API-Key": "key-flood-0123456789"}
QUIET = {"X-API-Key": "key-quiet-0123456789"}
SLOTS = 8  # publish_concurrency and openhands.max_waiting; share 0.5: four per tenant
POSTS = 12


@dataclass(frozen=True)
class FreezableBroker:
    """A broker of this module's own, whose process group the test may stop and continue."""

    broker: BrokerInfo
    pid: int

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The broker stopped (SIGSTOP): every request to it waits until the block ends."""
        os.killpg(self.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.killpg(self.pid, signal.SIGCONT)


@pytest.fixture(scope="module", params=BROKER_KINDS)
def freezable(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FreezableBroker]:
    root = tmp_path_factory.mktemp(f"freezable-{request.param}")
    if request.param == "embedded":
        with EmbeddedBroker(root / "tansu.log") as tansu:
            assert tansu.proc is not None
            yield FreezableBroker(
                BrokerInfo(tansu.bootstrap_servers, True, "embedded", "own"), tansu.proc.pid
            )
        return
    with ApacheKafka(root / "kafka", size=1) as kafka:
        pid = kafka.nodes[0].pid
        assert pid is not None
        yield FreezableBroker(BrokerInfo(kafka.bootstrap_servers, False, "apache-local", "own"), pid)


@pytest.fixture
def stack_settings(freezable: FreezableBroker, tmp_path: Path) -> Settings:
    settings = settings_for(
        freezable.broker,
        tmp_path / "data",
        store_url=f"sqlite:///{tmp_path / 'store.db'}",
        partitions=2,
        openhands={"max_waiting": SLOTS},
        kafka={"delivery_timeout_s": 120.0},
    )
    apply_topics(settings)
    return settings


def flood_while_frozen(
    freezable: FreezableBroker, flood: Callable[[], httpx.Response], quiet: Callable[[], httpx.Response]
) -> tuple[list[httpx.Response], httpx.Response]:
    """POSTS flood writes and one quiet write while the broker is frozen; every answer once it thaws."""
    with ThreadPoolExecutor(POSTS + 1) as pool:
        with freezable.frozen():
            floods = [pool.submit(flood) for _ in range(POSTS)]
            # The flood's writes past its share are answered at once; the rest wait on the broker.
            over = POSTS - SLOTS // 2
            wait_until(lambda: sum(f.done() for f in floods) >= over, 30, f"{over} refusals")
            late: Future[httpx.Response] = pool.submit(quiet)
            with pytest.raises(TimeoutError):
                # Admitted (a refused write is answered in milliseconds): it waits on the broker.
                late.result(timeout=3)
        return [f.result() for f in floods], late.result(timeout=90)


def test_a_tenant_flooding_messages_leaves_another_tenants_messages_served(
    freezable: FreezableBroker, stack_settings: Settings, tmp_path: Path
) -> None:
    limits = {
        "keys": KEYS,
        "publish_concurrency": SLOTS,
        "tenant_write_share": 0.5,
        "publish_timeout_s": 90.0,
    }
    with served(stack_settings, tmp_path, **limits) as base:

        def start(headers: dict[str, str]) -> Callable[[], httpx.Response]:
            body = {"content": f"hello {uuid.uuid4()}"}
            return lambda: httpx.post(f"{base}/conversations", json=body, headers=headers, timeout=120)

        assert start(FLOOD)().status_code == 202 and start(QUIET)().status_code == 202  # connected
        floods, quiet = flood_while_frozen(freezable, start(FLOOD), start(QUIET))
    statuses = sorted(r.status_code for r in floods)
    assert statuses == [202] * (SLOTS // 2) + [429] * (POSTS - SLOTS // 2), [r.text for r in floods]
    refusal = next(r for r in floods if r.status_code == 429)
    assert refusal.headers["retry-after"] and "CONVDB_API__TENANT_WRITE_SHARE=0.5" in refusal.json()["detail"]
    assert "4 writes" in refusal.json()["detail"], refusal.text
    assert quiet.status_code == 202, quiet.text
    # Every write answered 202 is in the inbox; no refused one is.
    records = read_topic(stack_settings, INBOX.name(stack_settings.namespace))
    tenants = [SingleObjectCodec().decode(m.value()).tenant_id for m in records]
    assert sorted(tenants) == ["flood"] * (1 + SLOTS // 2) + ["quiet"] * 2


def test_a_tenant_flooding_webhooks_leaves_another_tenants_webhooks_served(
    freezable: FreezableBroker, stack_settings: Settings, tmp_path: Path
) -> None:
    with served(stack_settings, tmp_path, keys=KEYS, publish_timeout_s=90.0, tenant_write_share=0.5) as base:

        def post(headers: dict[str, str], conversation: str) -> Callable[[], httpx.Response]:
            url = f"{base}/openhands/webhooks/events/{conversation}"
            return lambda: httpx.post(url, content=json.dumps(SAMPLE), headers=headers, timeout=120)

        mine, theirs = uuid.uuid4().hex, uuid.uuid4().hex
        # First posts: each conversation's owner is known from then on (no more owner lookups).
        assert post(FLOOD, mine)().status_code == 200 and post(QUIET, theirs)().status_code == 200
        floods, quiet = flood_while_frozen(freezable, post(FLOOD, mine), post(QUIET, theirs))
    statuses = sorted(r.status_code for r in floods)
    assert statuses == [200] * (SLOTS // 2) + [503] * (POSTS - SLOTS // 2), [r.text for r in floods]
    detail = next(r for r in floods if r.status_code == 503).json()["detail"]
    assert "CONVDB_API__TENANT_WRITE_SHARE=0.5 of CONVDB_OPENHANDS__MAX_WAITING" in detail, detail
    assert quiet.status_code == 200, quiet.text
