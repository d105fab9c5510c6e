"""The Apache Kafka broker's classpath: jars fetched once from Maven Central, cached outside the repo.

``~/.cache/convdb/kafka/<version>/`` holds a throw-away pom.xml, the jars (`libs/`, from
`mvn dependency:copy-dependencies -DincludeScope=runtime`) and a class-data-sharing archive
written by the first broker that exits cleanly.
"""

from __future__ import annotations

import fcntl
import logging
import shutil
import subprocess
from pathlib import Path

from convdb.infra.errors import BrokerStartError

logger = logging.getLogger(__name__)

KAFKA_VERSION = "4.4.0"
"""Newest release served by Maven Central here that librdkafka, aiokafka and faust all talk to."""

LOG4J_VERSION = "2.25.5"
"""The slf4j-1.x binding of the log4j-core Kafka ships with (without it the broker logs nothing)."""

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>convdb</groupId><artifactId>kafka-broker-classpath</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version></dependency>
  </dependencies>
</project>
"""


def cache_root() -> Path:
    """Where fetched jars live: outside any repository, shared by every checkout."""
    return Path.home() / ".cache" / "convdb" / "kafka"


def need_tool(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise BrokerStartError(
            f"`{tool}` not found: Apache Kafka needs Java 17+ and Maven "
            "(Debian: apt-get install openjdk-17-jre-headless maven); the embedded broker needs neither"
        )
    return path


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """The broker's classpath directory, fetched with Maven on first use (locked against races)."""
    root = cache_root() / version
    libs = root / "libs"
    done = root / ".complete"
    if done.exists():
        return libs
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return libs
        (root / "pom.xml").write_text(_POM.format(kafka=version, log4j=LOG4J_VERSION))
        shutil.rmtree(libs, ignore_errors=True)
        argv = [need_tool("mvn"), "-q", "-B", "dependency:copy-dependencies", "-DincludeScope=runtime"]
        logger.info("fetching Apache Kafka %s jars with Maven into %s", version, libs)
        run = subprocess.run(
            [*argv, f"-DoutputDirectory={libs}"], cwd=root, capture_output=True, text=True, check=False
        )
        if run.returncode != 0 or not any(libs.glob(f"kafka_2.13-{version}.jar")):
            raise BrokerStartError(f"Maven could not fetch Kafka {version}:\n{run.stdout[-2000:]}")
        done.write_text(version)
    return libs


def cds_archive(libs: Path) -> Path:
    """Where the class-data-sharing archive of these jars lives (JDK 13+ dynamic archive)."""
    return libs.parent / "kafka.jsa"
