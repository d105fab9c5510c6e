"""Fault-suite fixtures: a 3-broker Apache Kafka cluster and the whole pipeline as `convdb` processes."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from convdb.consumers.reconciler import CHANGELOG
from convdb.infra.dev.apache import ApacheKafka
from convdb.infra.kafka import apply_topics
from convdb.infra.s3 import make_s3_client
from convdb.infra.settings import Settings
from convdb.schemas.topics import ALL_TOPICS
from tests.conftest import BrokerInfo, S3Endpoint, settings_for
from tests.reconciler.conftest import Proc, start_provider, wait_worker_ready


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """Three combined KRaft nodes: replication factor 3, min.insync.replicas 2 (needs Java)."""
    with ApacheKafka(tmp_path_factory.mktemp("cluster"), size=3) as kafka:
        yield kafka


def leader_of(kafka: ApacheKafka, topic: str, partition: int) -> int:
    """The node id leading a partition now."""
    meta = AdminClient({"bootstrap.servers": kafka.bootstrap_servers}).list_topics(topic, timeout=10)
    return int(meta.topics[topic].partitions[partition].leader)


@dataclass
class Pipeline:
    """Provider, fleet runners, read-side consumers, archive and reconciler, all as real processes."""

    settings: Settings
    root: Path
    provider_url: str
    procs: dict[str, Proc] = field(default_factory=dict)

    def convdb(self, name: str, *argv: str) -> Proc:
        """Start `convdb ARGV` as process `name` (log under root)."""
        env = {**self.settings.to_env(), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        proc = Proc([sys.executable, "-m", "convdb", *argv], self.root / f"{name}.log", env)
        self.procs[name] = proc.start()
        return proc

    def dead(self) -> list[str]:
        """Names of processes that exited (none may: every service must ride out broker faults)."""
        return [name for name, p in self.procs.items() if not p.alive]

    def show_logs(self) -> None:
        """Print the end of every process's log, with its threads' stacks (for a failure's report)."""
        for proc in self.procs.values():
            if proc.alive and proc.argv[1:3] == ["-m", "convdb"]:
                proc.dump_stacks()
        time.sleep(1.0)
        for name, proc in self.procs.items():
            state = "alive" if proc.alive else "exited"
            lines = [line for line in proc.log.read_text(errors="replace").splitlines() if line[:1] != "%"]
            body = "\n".join(lines[-150:])  # librdkafka's own lines left out: the stacks matter here
            print(f"\n--- {name} ({state}, started {proc.starts}x) ---\n{body}")

    def stop(self) -> None:
        """Stop every process."""
        for proc in reversed(list(self.procs.values())):
            proc.stop()


def pipeline_settings(kafka: ApacheKafka, root: Path, s3: S3Endpoint, provider_url: str) -> Settings:
    """Settings for the whole pipeline on the cluster: RF 3, SQLite store, S3 archive, short deadlines."""
    bucket = f"arch-f{uuid.uuid4().hex[:10]}"
    make_s3_client(s3.endpoint_url, "us-east-1", s3.access_key_id, s3.secret_access_key).create_bucket(
        Bucket=bucket
    )
    settings = settings_for(
        BrokerInfo(kafka.bootstrap_servers, embedded=False, kind="apache-local", name="cluster"),
        root / "data",
        partitions=4,
        replication_factor=3,
        store_url=f"sqlite:///{root / 'store.db'}",
        archive_url=f"s3://{bucket}/archive",
        s3=s3.section(),
        archive={"max_records": 500, "max_age_s": 2.0},
        llm={"scripted_backend": "direct"},
        runtime={"reconcile_after_s": 5.0, "tool_timeout_s": 5.0},
        reconciler={"tick_interval_s": 0.5, "resolver_urls": {"tracker": provider_url}},
    )
    apply_topics(settings, (*ALL_TOPICS, CHANGELOG))
    return settings


def start_pipeline(kafka: ApacheKafka, root: Path, s3: S3Endpoint, runners: int = 2) -> Pipeline:
    """Every service of the pipeline, started and ready."""
    provider, url = start_provider(root / "provider.log")
    pipeline = Pipeline(pipeline_settings(kafka, root, s3, url), root, url, {"provider": provider})
    workspace = root / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(runners):
            pipeline.convdb(f"runner-{i}", "runner", "--workspace", str(workspace), "--tracker-url", url)
        pipeline.convdb("consume", "consume", "all")
        pipeline.convdb("archive", "consume", "archive")
        wait_worker_ready(pipeline.convdb("reconciler", "reconcile", "--log-level", "info"))
    except BaseException:
        pipeline.stop()
        raise
    return pipeline
