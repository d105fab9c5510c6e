"""Which broker the dev stack and the demo start: Apache Kafka where it can run (Java 17+, and its
jars cached or Maven there to fetch them), else the embedded Tansu; and what the embedded one lacks,
from the capability record."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, fields

from convdb.infra.capabilities import APACHE, EMBEDDED
from convdb.infra.dev.kafka_jars import KAFKA_VERSION, cache_root

BROKER_CHOICES = ("auto", "apache", "embedded")
"""`--broker` of `dev up` and `demo`: auto picks Apache Kafka when `apache_missing()` is None."""
MIN_JAVA = 17


@dataclass(frozen=True)
class BrokerChoice:
    """The broker kind to start ('apache' or 'embedded') and why, in words."""

    kind: str
    why: str


def java_major() -> int | None:
    """The major version of the `java` on PATH, or None when there is none (or it does not say)."""
    java = shutil.which("java")
    if java is None:
        return None
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8" is Java 8


def apache_missing() -> str | None:
    """What Apache Kafka lacks to run here, or None when it can run."""
    major = java_major()
    if major is None or major < MIN_JAVA:
        return f"no Java {MIN_JAVA}+ on PATH" + (f" (found Java {major})" if major else "")
    cached = (cache_root() / KAFKA_VERSION / ".complete").exists()
    if not cached and shutil.which("mvn") is None:
        return (
            f"the Apache Kafka {KAFKA_VERSION} jars are not cached and Maven (mvn) is not there to fetch them"
        )
    return None


def choose(requested: str) -> BrokerChoice:
    """The broker for `--broker requested` ('auto', 'apache' or 'embedded')."""
    if requested == "embedded":
        return BrokerChoice("embedded", "asked for with --broker embedded")
    if requested == "apache":
        return BrokerChoice("apache", "asked for with --broker apache")
    missing = apache_missing()
    if missing is None:
        return BrokerChoice("apache", f"Java {MIN_JAVA}+ is here; --broker embedded starts the embedded one")
    return BrokerChoice("embedded", f"{missing}, so not Apache Kafka")


def embedded_lacks() -> str:
    """One line: the guarantees of Apache Kafka the embedded broker lacks (the capability record)."""
    lacking = [
        f.name.replace("_", " ")
        for f in fields(EMBEDDED)
        if isinstance(getattr(APACHE, f.name), bool)
        and getattr(APACHE, f.name)
        and not getattr(EMBEDDED, f.name)
    ]
    return "the embedded broker lacks: " + "; ".join(lacking) + " (infra/capabilities.py)"


def describe(choice: BrokerChoice) -> str:
    """The line a command prints about the broker it starts."""
    if choice.kind == "apache":
        return f"broker: Apache Kafka {KAFKA_VERSION} ({choice.why})"
    return f"broker: the embedded Tansu ({choice.why}); {embedded_lacks()}"
