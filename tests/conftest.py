"""Shared fixtures: one real broker per run (DESIGN §10), isolated namespaces per test."""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from convdb.infra.capabilities import BrokerCapabilities, capabilities_of
from convdb.infra.dev.apache import ApacheKafka
from convdb.infra.dev.broker import EmbeddedBroker
from convdb.infra.kafka import apply_topics
from convdb.infra.procs import tail
from convdb.infra.settings import S3Settings, Settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

T = TypeVar("T")

# Generation speed and per-example time depend on machine load (2 shared cores, brokers and
# child processes running): those are not properties under test, so they must not fail a run.
hypothesis_settings.register_profile(
    "convdb", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
hypothesis_settings.load_profile("convdb")


def pytest_addoption(parser: pytest.Parser) -> None:
    """--chaos-long: the reconciler chaos test with 200 conversations; --chaos-seed: replay one run;
    --console-artifacts: the console browser tests' screenshot folder."""
    parser.addoption(
        "--chaos-long", action="store_true", default=False, help="long chaos run (200 conversations)"
    )
    parser.addoption(
        "--chaos-seed", type=int, default=None, help="seed of the chaos test (default: a new one, printed)"
    )
    parser.addoption(
        "--console-artifacts",
        default=None,
        metavar="DIR",
        help="where the console browser tests write their screenshots (default: under pytest's tmp dir)",
    )


@dataclass(frozen=True)
class BrokerInfo:
    """The broker a test talks to; `name` is the broker kind its test id shows."""

    bootstrap_servers: str
    embedded: bool
    kind: str
    name: str = ""

    @property
    def capabilities(self) -> BrokerCapabilities:
        """What this broker supports (the capability record, checked in tests/brokers)."""
        return capabilities_of(embedded=self.embedded)


@functools.cache
def _docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=1.0).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine"
        return False


@pytest.fixture(scope="session")
def embedded_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """The embedded Tansu broker (pip-only), started once per run when a test asks for it."""
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log) as embedded:
        yield BrokerInfo(embedded.bootstrap_servers, embedded=True, kind="embedded", name="embedded")


@pytest.fixture(scope="session")
def apache_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerInfo]:
    """Apache Kafka: CONVDB_TEST_BOOTSTRAP, else testcontainers with Docker, else a local KRaft node.

    The local node needs Java and Maven; without them every test that asks for it fails (never skips).
    """
    external = os.environ.get("CONVDB_TEST_BOOTSTRAP")
    if external:
        yield BrokerInfo(external, embedded=False, kind="external", name="apache")
        return
    if _docker_available():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer().with_kraft() as kafka:
            yield BrokerInfo(kafka.get_bootstrap_server(), False, kind="testcontainers", name="apache")
        return
    with ApacheKafka(tmp_path_factory.mktemp("kafka"), size=1) as kafka:
        yield BrokerInfo(kafka.bootstrap_servers, embedded=False, kind="apache-local", name="apache")


LONG_FIRST = ("tests/langgraph/test_langgraph_suite.py",)
"""Files whose default run takes minutes (LangGraph's whole suite: 8 to 9): collected first, so
`pytest -n 2 --dist loadfile` starts them at once and overlaps them with the rest of the run
instead of ending the run with them."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `LONG_FIRST` files' tests first, the rest in collection order (the sort is stable)."""
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in LONG_FIRST)


BROKER_KINDS = ("embedded", "apache")
"""Broker kinds a `@pytest.mark.brokers` test runs on, in this order; the test id names the kind."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test marked `brokers` once per broker kind (`test_x[embedded]`, `test_x[apache]`);
    `@pytest.mark.slow_on("apache")` keeps that kind's run for `-m slow` (a test whose subject
    does not depend on the broker, already run on the other kind by default)."""
    if "broker" in metafunc.fixturenames and metafunc.definition.get_closest_marker("brokers"):
        slow_on = metafunc.definition.get_closest_marker("slow_on")
        slow_kinds = set(slow_on.args) if slow_on else set()
        assert slow_kinds <= set(BROKER_KINDS) and slow_kinds != set(BROKER_KINDS), slow_kinds
        kinds = [pytest.param(k, marks=pytest.mark.slow) if k in slow_kinds else k for k in BROKER_KINDS]
        metafunc.parametrize("broker", kinds, indirect=True, scope="module")


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest) -> BrokerInfo:
    """The broker of this test: its `brokers` parameter, else the run's default (DESIGN §10 order:
    CONVDB_TEST_BOOTSTRAP, Docker, then the embedded broker)."""
    kind = getattr(request, "param", None)
    if kind is None:
        external = os.environ.get("CONVDB_TEST_BOOTSTRAP")
        kind = "apache" if external or _docker_available() else "embedded"
    return request.getfixturevalue(f"{kind}_broker")


def settings_for(broker: BrokerInfo | None = None, data_dir: Path | None = None, **fields: Any) -> Settings:
    """The one way a test builds Settings: never from a `.env` file, and on a broker always under a
    fresh namespace, so that tests sharing the run's broker never see each other's topics or groups.

    `broker` sets the bootstrap servers and `kafka.embedded` (the embedded broker's short group
    timeouts); `fields` are Settings fields, nested sections as dicts (a `kafka` dict is merged
    over the broker's kind). Without a broker: the defaults plus `fields`, for a core that never
    connects.
    """
    base: dict[str, Any] = {}
    if broker is not None:
        base["namespace"] = f"t{uuid.uuid4().hex[:10]}"
        base["bootstrap_servers"] = broker.bootstrap_servers
        fields["kafka"] = {"embedded": broker.embedded, **fields.get("kafka", {})}
    if data_dir is not None:
        base["data_dir"] = data_dir
    return Settings(_env_file=None, **{**base, **fields})  # type: ignore[call-arg]


@pytest.fixture(scope="module")
def make_settings(broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Settings]:
    """`settings_for` on this module's broker: each call a fresh namespace and a fresh data dir.

    Module-scoped, so that module-scoped fixtures (a world built once per module) use it too."""

    def build(**fields: Any) -> Settings:
        return settings_for(broker, tmp_path_factory.mktemp("data"), **fields)

    return build


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    """Settings for this test, with every topic created."""
    s = make_settings()
    apply_topics(s)
    return s


LOG_LINES = 40
"""How much of each log a timed-out `wait_until` shows."""


def wait_until(
    condition: Callable[[], T],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    logs: Iterable[Path] = (),
    interval: float = 0.05,
) -> T:
    """Call `condition` every `interval` seconds until it returns something truthy, and return that.

    On timeout fail (AssertionError) naming `what`, with the end of each of `logs`: the processes
    the test waited on say there why the condition never came. A condition may itself fail the
    test at once (a process it waits on died).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {log}\n{tail(log, LOG_LINES)}" for log in logs)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{tails}")
        time.sleep(interval)


@dataclass(frozen=True)
class S3Endpoint:
    """The S3 endpoint the test run talks to."""

    endpoint_url: str
    access_key_id: str
    secret_access_key: str
    kind: str

    def section(self) -> S3Settings:
        """The `s3` section of Settings pointed at this endpoint."""
        return S3Settings(
            endpoint_url=self.endpoint_url,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """CONVDB_TEST_S3_ENDPOINT (external, keys from CONVDB_TEST_S3_KEY/SECRET), else a SeaweedFS server."""
    external = os.environ.get("CONVDB_TEST_S3_ENDPOINT")
    if external:
        key = os.environ.get("CONVDB_TEST_S3_KEY", "test")
        yield S3Endpoint(external, key, os.environ.get("CONVDB_TEST_S3_SECRET", key), "external")
        return
    from convdb.infra.dev.s3server import EmbeddedS3

    with EmbeddedS3(tmp_path_factory.mktemp("s3") / "weed") as server:
        yield S3Endpoint(server.endpoint_url, "convdb", "convdb", "seaweedfs")
