"""The production-shaped run: compose.yaml's services as local processes on Apache Kafka, PostgreSQL
and a real S3, driven through the API; one user message traced across processes; every /metrics.

Docker is not needed: `Deployment` starts each convdb service's compose command with the compose
environment (the test's `.env` interpolated by docker compose's own loader), with kafka:9092,
postgres:5432, minio:9000, tracker:8080 and api:8000 rewritten to local servers.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from convdb.infra.procs import free_port
from convdb.infra.s3 import make_s3_client
from tests.conftest import BrokerInfo, S3Endpoint, wait_until
from tests.deploy.compose_run import Deployment
from tests.deploy.conftest import DEPLOY, DeployCheck
from tests.deploy.otlp import OtlpReceiver, ReceivedSpan

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.s3]

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
WORK = "Write a note and file it.\n" + "\n".join(
    [
        '!write_file {"path": "note.txt", "content": "the deploy went fine"}',
        '!read_file {"path": "note.txt"}',
        '!create_issue {"title": "Deploy note", "body": "{{last}}"}',
    ]
)
HUMAN = 'Tell the on-call team.\n!notify {"to": "on-call", "text": "deploy done"}'


@dataclass
class Run:
    """The running deployment, how to reach its API, and what was driven through it."""

    deployment: Deployment
    api: str
    key: str
    namespace: str
    s3: S3Endpoint
    traces: OtlpReceiver
    conversations: dict[str, str]
    traced_message: str

    def get(self, path: str, **params: Any) -> Any:
        """GET an API path as the test tenant; the JSON answer."""
        answer = httpx.get(f"{self.api}{path}", params=params, headers={"X-API-Key": self.key}, timeout=10)
        assert answer.status_code == 200, answer.text
        return answer.json()


def env_file(example: Path, values: dict[str, str]) -> str:
    """The example env file with these values; each key must be one the example documents."""
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example.read_text(), re.M))
    assert set(values) <= documented, f"not in .env.example: {sorted(set(values) - documented)}"
    return "".join(f"{k}='{v}'\n" for k, v in values.items())


@contextmanager
def pg_database(name: str) -> Iterator[None]:
    """The `convdb` role (compose's POSTGRES_USER) and a fresh database, dropped afterwards."""
    admin = sa.create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if not conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = 'convdb'")).scalar():
            conn.execute(sa.text("CREATE ROLE convdb LOGIN"))
        conn.execute(sa.text(f'CREATE DATABASE "{name}" OWNER convdb'))
    try:
        yield
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="module")
def run(
    deploycheck: DeployCheck,
    apache_broker: BrokerInfo,
    s3_endpoint: S3Endpoint,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Run]:
    """compose.yaml up (as processes), three conversations driven through the API."""
    root = tmp_path_factory.mktemp("compose")
    namespace, key = f"c{uuid.uuid4().hex[:10]}", secrets.token_hex(16)
    tracker, api = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with OtlpReceiver() as traces:
        (root / ".env").write_text(
            env_file(
                DEPLOY / ".env.example",
                {
                    "POSTGRES_PASSWORD": secrets.token_hex(12),
                    "S3_ACCESS_KEY_ID": s3_endpoint.access_key_id,
                    "S3_SECRET_ACCESS_KEY": s3_endpoint.secret_access_key,
                    "CONVDB_API__KEYS": f'{{"{key}": "acme"}}',
                    "TRACKER_RECEIPT_SECRET": secrets.token_hex(12),
                    "API_SESSION_SECRET": secrets.token_hex(16),
                    "CONVDB_NAMESPACE": namespace,
                    "CONVDB_PARTITIONS": "4",
                    "CONVDB_ARCHIVE__MAX_AGE_S": "1",
                    "OTEL_TRACES_EXPORTER": "otlp",
                    "OTEL_EXPORTER_OTLP_ENDPOINT": traces.endpoint,
                },
            )
        )
        project = deploycheck.compose(DEPLOY / "compose.yaml", root / ".env", "demo")
        s3_host = s3_endpoint.endpoint_url.removeprefix("http://")
        deployment = Deployment(
            project,
            rewrites={
                "@postgres:5432/convdb": f"@127.0.0.1:5432/{namespace}",
                "kafka:9092": apache_broker.bootstrap_servers,
                "minio:9000": s3_host,
                "tracker:8080": tracker,
                "api:8000": api,
            },
            root=root,
            dockerfile=DEPLOY / "Dockerfile",
            # Test speed only: export spans every 200 ms instead of every 5 s.
            extra_env={"OTEL_BSP_SCHEDULE_DELAY": "200"},
        )
        with pg_database(namespace):
            try:
                deployment.up()
                yield drive(
                    deployment, f"http://{api}", f"http://{tracker}", key, namespace, s3_endpoint, traces
                )
            finally:
                deployment.down()


def drive(
    deployment: Deployment, api: str, tracker: str, key: str, ns: str, s3: S3Endpoint, traces: OtlpReceiver
) -> Run:
    """Three conversations: work with a keyed side effect, a plain question, an ambiguous notification."""
    convs = {name: f"{name}-{uuid.uuid4().hex[:8]}" for name in ("work", "plain", "human")}
    run = Run(deployment, api, key, ns, s3, traces, convs, "")

    def post(conv: str, content: str) -> str:
        answer = httpx.post(
            f"{api}/conversations/{conv}/messages",
            json={"content": content},
            headers={"X-API-Key": key},
            timeout=30,
        )
        assert answer.status_code == 202, answer.text
        return str(answer.json()["id"])

    post(convs["work"], WORK)
    run.traced_message = post(convs["plain"], "How did the deploy go?")
    for name in ("work", "plain"):
        wait_until(lambda name=name: status(run, convs[name]) == "finished", 120, f"{name} to finish")
    # The tracker now drops its next response: the notification happened, but nobody heard back.
    assert httpx.post(
        f"{tracker}/admin/fail", json={"mode": "drop_response", "count": 1}, timeout=5
    ).is_success
    post(convs["human"], HUMAN)
    wait_until(
        lambda: status(run, convs["human"]) == "waiting_for_human", 120, "the notification to need a human"
    )
    return run


def status(run: Run, conv: str) -> str | None:
    """The conversation's execution status as the API shows it (None before the read side has it)."""
    answer = httpx.get(f"{run.api}/conversations/{conv}", headers={"X-API-Key": run.key}, timeout=10)
    return answer.json().get("execution_status") if answer.status_code == 200 else None


# -- the deployment works --------------------------------------------------------------------------


def test_titles_stats_and_views_come_back_through_the_api(run: Run) -> None:
    work = run.get(f"/conversations/{run.conversations['work']}")
    assert work["title"].startswith("Write a note and file it")
    assert work["stats"]["tool_calls"] == 3 and work["view_length"] >= 8
    listed = run.get("/conversations")["conversations"]
    assert {c["conversation_id"] for c in listed} == set(run.conversations.values())


def test_the_ambiguous_notification_waits_in_the_human_queue(run: Run) -> None:
    queue = run.get("/operations", status="unknown")["operations"]
    assert [op["operation_id"].split("/")[0] for op in queue] == [run.conversations["human"]]
    assert queue[0]["intent"]["tool"] == "notify"


def test_every_topic_is_archived_in_the_bucket_init_created(run: Run) -> None:
    client = make_s3_client(run.s3.endpoint_url, "us-east-1", run.s3.access_key_id, run.s3.secret_access_key)

    def topics() -> set[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket="convdb-archive", Prefix="archive/")
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return {
            k.split("/")[1]
            for k in keys
            if k.endswith(".avro") and f"/{run.namespace}." in f"/{k.split('/')[1]}"
        }

    wanted = {f"{run.namespace}.{s}" for s in ("events", "inbox", "effects", "state")}
    wait_until(lambda: wanted <= topics(), 60, f"archive objects of {sorted(wanted)}")


def test_every_service_is_healthy(run: Run) -> None:
    for p in run.deployment.processes:
        if p.proc is not None and p.service != "tracker":
            assert p.healthz() == 200, p.service
    assert httpx.get(f"{run.api}/healthz", timeout=5).json()["status"] == "ok"


# -- metrics ---------------------------------------------------------------------------------------


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text page (which must parse), by sample name."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((s.labels, s.value))
    return found


def total(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """Sum of a metric's samples whose labels include `labels`; fails when the series is missing."""
    assert name in found, f"{name} missing; have {sorted(found)}"
    return sum(v for lab, v in found[name] if all(lab.get(k) == want for k, want in labels.items()))


EXPECTED = {
    "runner": ("convdb_runner_steps_total", "convdb_runner_step_seconds_count",
               "convdb_runner_llm_tokens_total", "convdb_runner_llm_cost_usd_total",
               "convdb_runner_operations_total"),
    "read-side": ("convdb_consumer_events_total", "convdb_consumer_lag", "convdb_consumer_events_per_second",
                  "convdb_consumer_dlq_total"),
    "archive": ("convdb_archive_objects_total", "convdb_archive_bytes_total", "convdb_archive_lag"),
    "reconciler": ("convdb_reconciler_operations", "convdb_reconciler_resolved_total"),
    "api": ("convdb_api_requests_total", "convdb_api_request_seconds_count"),
}  # fmt: skip
"""What each service's /metrics shows after the workload (the series of the dashboard)."""


def scrape(run: Run, service: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The samples of every replica of a service, merged."""
    merged: dict[str, list[tuple[dict[str, str], float]]] = {}
    for p in run.deployment.of(service):
        for name, values in samples(p.metrics()).items():
            merged.setdefault(name, []).extend(values)
    return merged


def test_each_service_shows_its_series_after_the_workload(run: Run) -> None:
    for service, names in EXPECTED.items():
        found = scrape(run, service)
        for name in names:
            total(found, name)
    runner, consumer, api = scrape(run, "runner"), scrape(run, "read-side"), scrape(run, "api")
    assert total(runner, "convdb_runner_steps_total") >= 5
    assert total(runner, "convdb_runner_llm_tokens_total") > 0
    assert total(runner, "convdb_runner_operations_total", state="confirmed") >= 1
    assert total(runner, "convdb_runner_operations_total", state="unknown") == 1
    assert total(consumer, "convdb_consumer_events_total") > 0
    lag = consumer["convdb_consumer_lag"]  # per topic-partition the consumer has fetched from
    assert lag and {lab["topic"] for lab, _ in lag} >= {f"{run.namespace}.events"}
    caught_up = lambda: total(scrape(run, "read-side"), "convdb_consumer_lag") == 0  # noqa: E731
    wait_until(caught_up, 30, "the read side to catch up")
    route = "/conversations/{conversation_id}/messages"
    assert total(api, "convdb_api_requests_total", route=route, status="202") == 3
    wait_until(
        lambda: total(scrape(run, "archive"), "convdb_archive_objects_total") > 0, 30, "archive objects"
    )
    wait_until(
        lambda: total(scrape(run, "reconciler"), "convdb_reconciler_operations", status="unknown") == 1,
        30,
        "the reconciler's table to hold the unknown notification",
    )


def test_the_dashboard_plots_only_series_the_services_export(run: Run) -> None:
    exported = {name for service in EXPECTED for name in scrape(run, service)}
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\b(convdb_[a-z_]+)", e)}
    assert used and used <= exported, sorted(used - exported)


# -- one trace -------------------------------------------------------------------------------------


def one_trace(run: Run) -> list[ReceivedSpan]:
    """The spans of the trace that the plain conversation's message started at the API."""
    spans = run.traces.received()
    roots = [
        s for s in spans
        if s.service == "convdb-api" and s.name == "api POST /conversations/{conversation_id}/messages"
        and any(c.attributes.get("convdb.conversation_id") == run.conversations["plain"] for c in spans
                if c.trace_id == s.trace_id)
    ]  # fmt: skip
    return [s for s in spans if roots and s.trace_id == roots[0].trace_id]


def test_one_user_message_is_one_trace_across_processes(run: Run) -> None:
    def complete() -> list[ReceivedSpan]:
        spans = one_trace(run)
        services = {s.service for s in spans}
        needed = {"convdb-api", "convdb-runner", "convdb-consumer", "convdb-archive", "convdb-reconciler"}
        return spans if needed <= services else []

    try:
        spans: list[ReceivedSpan] = wait_until(complete, 60, "the trace's spans from every service")  # type: ignore[assignment]
    except AssertionError:
        found = sorted({(s.service, s.name) for s in one_trace(run)})
        pytest.fail(f"the message's trace holds only {found}")
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_id]
    root = ("convdb-api", "api POST /conversations/{conversation_id}/messages")
    assert [(r.service, r.name) for r in roots] == [root], sorted((s.service, s.name) for s in spans)
    orphans = [(s.service, s.name) for s in spans if s.parent_id and s.parent_id not in ids]
    assert orphans == [], "parent links broken across Kafka"
    names = {s.name for s in spans}
    assert {"agent.step", "llm.completion", "litellm_request"} <= names, sorted(names)  # litellm joins
    by_id = {s.span_id: s for s in spans}
    consumer = next(s for s in spans if s.service == "convdb-consumer")
    chain = [consumer.service]
    while by_id.get(consumer.parent_id) is not None:
        consumer = by_id[consumer.parent_id]
        chain.append(consumer.service)
    assert chain[-1] == "convdb-api" and "convdb-runner" in chain, chain
