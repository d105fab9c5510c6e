"""Apache Kafka on the machine's Java: jars from Maven Central, a KRaft node or a 3-broker cluster.

The jars (`org.apache.kafka:kafka_2.13` and its runtime dependencies) are fetched once with
Maven into ``~/.cache/convdb/kafka/<version>/libs`` and reused; nothing is committed. Every node
is a combined broker+controller: one node is the fast test default, three nodes form a quorum
that survives one node being killed (replication factor 3, ``min.insync.replicas=2``).
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from convdb.infra.dev.kafka_jars import KAFKA_VERSION, cds_archive, fetch_jars, need_tool
from convdb.infra.errors import BrokerStartError, InfraError
from convdb.infra.procs import free_port, pid_alive, port_open, spawn, stop_group, tail

JVM_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")
"""Test broker: small heap, serial GC, C1 only (faster start-up, fewer threads on 2 cores)."""

THROUGHPUT_JVM_OPTS = ("-Xms512m", "-Xmx1g", "-XX:+UseG1GC")
"""Benchmark broker: Kafka's own defaults (full JIT), so figures are not the JVM's start-up mode."""

_LOG4J2 = """<Configuration status="WARN">
  <Appenders><Console name="out" target="SYSTEM_OUT">
    <PatternLayout pattern="[%d] %p %m (%c)%n"/></Console></Appenders>
  <Loggers>
    <Logger name="kafka" level="INFO"/><Logger name="org.apache.kafka" level="INFO"/>
    <Logger name="org.apache.kafka.common.config" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="INFO"/>
    <Root level="WARN"><AppenderRef ref="out"/></Root>
  </Loggers>
</Configuration>
"""


def _promote_cds(node: Node) -> None:
    dump, node.cds_dump = node.cds_dump, None
    if dump is None or not dump.exists():
        return
    final = dump.with_name("kafka.jsa")
    if final.exists():
        dump.unlink(missing_ok=True)
    else:
        os.replace(dump, final)


def _reap(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _cluster_id() -> str:
    # As Kafka's Uuid.randomUuid: never starting with '-', which its argument parser takes for an option.
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


@dataclass
class Node:
    """One combined broker+controller JVM."""

    node_id: int
    port: int
    controller_port: int
    root: Path
    pid: int | None = None
    starts: int = 0
    cds_dump: Path | None = None

    @property
    def config(self) -> Path:
        """Its server.properties."""
        return self.root / "server.properties"

    @property
    def log(self) -> Path:
        """Where its stdout (the log4j console) goes."""
        return self.root / "server.log"

    @property
    def alive(self) -> bool:
        """True while its JVM runs."""
        return self.pid is not None and pid_alive(self.pid)


def broker_properties(replicas: int) -> dict[str, str]:
    """Broker settings that make a small test cluster fast (internal topics sized to it)."""
    min_isr = str(min(2, replicas))
    return {
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": min_isr,
        "default.replication.factor": str(replicas),
        "min.insync.replicas": min_isr,
        # A test group must not wait 3 s for more members before its first assignment.
        "group.initial.rebalance.delay.ms": "0",
        # KIP-848 groups may set the session and heartbeat of the classic ones (6 s and 500 ms at
        # least, as group.min.session.timeout.ms allows there): `kafka.apply_group_timeouts`.
        "group.consumer.min.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "500",
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        # The cleaner wakes every second, so compaction is observable within a test.
        "log.cleaner.backoff.ms": "1000",
        "num.io.threads": "4",
        "num.network.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
    }


@dataclass
class ApacheKafka:
    """A KRaft cluster of `size` combined nodes on 127.0.0.1, data and logs under `root`."""

    root: Path
    size: int = 1
    version: str = KAFKA_VERSION
    overrides: dict[str, str] = field(default_factory=dict)
    jvm_opts: tuple[str, ...] = JVM_OPTS
    nodes: list[Node] = field(default_factory=list)

    @property
    def bootstrap_servers(self) -> str:
        """The bootstrap address clients use (every node)."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self, timeout: float = 90.0, *, detached: bool = False) -> ApacheKafka:
        """Fetch the jars, format fresh storage for every node, start them and wait until all serve."""
        libs = fetch_jars(self.version)
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log4j2.xml").write_text(_LOG4J2)
        self.nodes = [
            Node(i, free_port(), free_port(), self.root / f"node-{i}") for i in range(1, self.size + 1)
        ]
        cluster = _cluster_id()
        for node in self.nodes:
            self._write_config(node)
            self._format(libs, node, cluster)
        for node in self.nodes:
            self._spawn(libs, node, detached=detached)
        try:
            self.wait_ready(timeout)
        except InfraError:
            self.stop()
            raise
        return self

    def _write_config(self, node: Node) -> None:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.root / "data"),
            **broker_properties(self.size if self.size < 3 else 3),
            **self.overrides,
        }
        node.root.mkdir(parents=True, exist_ok=True)
        node.config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _java(self, libs: Path, main: str, *args: str, cds: tuple[str, ...] = ()) -> list[str]:
        log4j = f"-Dlog4j2.configurationFile={self.root / 'log4j2.xml'}"
        return [need_tool("java"), *self.jvm_opts, *cds, log4j, "-cp", f"{libs}/*", main, *args]

    def _format(self, libs: Path, node: Node, cluster: str) -> None:
        archive = cds_archive(libs)
        cds = (f"-XX:SharedArchiveFile={archive}",) if archive.exists() else ()
        argv = self._java(
            libs,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster}",
            "-c",
            str(node.config),
            cds=cds,
        )
        run = subprocess.run(argv, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise BrokerStartError(
                f"kafka storage format failed for node {node.node_id}:\n{run.stdout}{run.stderr}"
            )

    def _spawn(self, libs: Path, node: Node, *, detached: bool = False) -> None:
        archive = cds_archive(libs)
        cds = ""
        if archive.exists():
            cds = f"-XX:SharedArchiveFile={archive}"
        elif not detached:  # a detached node outlives us: nobody would promote its archive
            # The first clean exit writes the loaded classes to an archive that later starts map.
            node.cds_dump = archive.with_name(f"{archive.name}.{uuid.uuid4().hex[:8]}.tmp")
            cds = f"-XX:ArchiveClassesAtExit={node.cds_dump}"
        node.pid = spawn(
            self._java(libs, "kafka.Kafka", str(node.config), cds=(cds,) if cds else ()),
            node.log,
            detached=detached,
            infrastructure=True,
        ).pid
        node.starts += 1

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until every live node is registered and answers Metadata."""
        from confluent_kafka.admin import AdminClient

        want = {n.node_id for n in self.nodes if n.alive}
        deadline = time.monotonic() + timeout
        # librdkafka logs every refused connection: ask it only once every listener is open.
        while not all(port_open(n.port) for n in self.nodes if n.node_id in want):
            self._check_alive(deadline, timeout, want)
            time.sleep(0.05)
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        while True:
            self._check_alive(deadline, timeout, want)
            try:
                if want <= set(admin.list_topics(timeout=2).brokers):
                    return
            except Exception:  # noqa: BLE001 - KafkaException until the listener is up
                pass
            time.sleep(0.1)

    def _check_alive(self, deadline: float, timeout: float, want: set[int]) -> None:
        for node in self.nodes:
            if node.pid is not None and not node.alive:
                raise BrokerStartError(f"kafka node {node.node_id} exited; log {node.log}\n{tail(node.log)}")
        if time.monotonic() > deadline:
            raise BrokerStartError(f"kafka nodes {sorted(want)} not serving within {timeout}s: {self.root}")

    def node(self, node_id: int) -> Node:
        """The node with this id."""
        return next(n for n in self.nodes if n.node_id == node_id)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: no controlled shutdown)."""
        node = self.node(node_id)
        if node.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)
            _reap(node.pid, 10.0)
            node.pid = None

    def restart(self, node_id: int, timeout: float = 90.0) -> None:
        """Start a stopped node again on its old ports and storage."""
        self._spawn(fetch_jars(self.version), self.node(node_id))
        self.wait_ready(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every node: SIGTERM (controlled shutdown) to all at once, then SIGKILL stragglers."""
        pids = [n.pid for n in self.nodes if n.pid is not None]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for pid in pids:
            _reap(pid, max(0.0, deadline - time.monotonic()))
            stop_group(pid, timeout=0.0)  # a node that outlived the deadline (the last of a quorum)
        for node in self.nodes:
            node.pid = None
            _promote_cds(node)

    def __enter__(self) -> ApacheKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
