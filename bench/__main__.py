"""`python -m bench`: run the benchmarks, print the table, write bench/RESULTS.md.

Starts the embedded broker (`--broker embedded`, the default), an Apache Kafka node
(`--broker apache`, needs Java) or both (`--broker both`: every benchmark on the embedded broker,
and the broker-bound ones, publish, sink, e2e and ingest, on Apache Kafka too, side by side in the report;
the fleet, on a 3-broker cluster, in a section of its own per broker); `CONVDB_BOOTSTRAP_SERVERS`
overrides them. Exit 1 with a message if any benchmark fails: a
missing figure is never reported as a measured one.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common import BenchContext, Figures
from bench.report import OWN_SECTIONS, markdown, side_by_side, table, with_section

BENCHMARKS: tuple[str, ...] = (
    "publish",
    "codec",
    "search",
    "fulltext",
    "sink",
    "scaleout",
    "memory",
    "e2e",
    "replay",
    "resume",
    "step",
    "console",
    "ingest",
    "langgraph",
    "fleet",
    "capacity",
)
"""Registered benchmarks: each is a module `bench.<name>` with `FIGURES` and `run(ctx) -> Figures`."""

OWN_SECTION: tuple[str, ...] = OWN_SECTIONS
"""Benchmarks run only when named (`--only`): minutes of runner fleets each. Each writes a section
of RESULTS.md of its own, so running one never replaces the main table."""

CLUSTER: tuple[str, ...] = ("fleet",)
"""Benchmarks that run on a 3-broker Apache Kafka cluster (`--broker apache`), not on one node."""

BROKER_BOUND: tuple[str, ...] = ("publish", "sink", "e2e", "ingest", "fleet")
"""Benchmarks whose figures depend on the broker: `--broker both` runs them on each."""

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
logger = logging.getLogger("bench")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument(
        "--size",
        choices=("small", "large", "both"),
        default="small",
        help="default: small; both: small, then large (1M events), each written to its section",
    )
    parser.add_argument("--json", action="store_true", help="also print every figure as one JSON object")
    parser.add_argument(
        "--only",
        choices=BENCHMARKS,
        action="append",
        help="run only these (repeatable); " + ", ".join(OWN_SECTION) + " run only when named here",
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per figure (default 3 small, 5 large)"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write bench/RESULTS.md")
    parser.add_argument(
        "--broker",
        choices=("embedded", "apache", "both"),
        default="embedded",
        help="broker to measure on (default: embedded; apache needs Java; both: side by side)",
    )
    return parser.parse_args(argv)


def start_broker(stack: ExitStack, workdir: Path, kind: str = "embedded", nodes: int = 1) -> tuple[str, bool]:
    """The broker to measure against: CONVDB_BOOTSTRAP_SERVERS, else a fresh one of this kind
    (Apache Kafka: `nodes` brokers)."""
    external = os.environ.get("CONVDB_BOOTSTRAP_SERVERS")
    if external:
        return external, False
    if kind == "apache":
        from convdb.infra.dev.apache import THROUGHPUT_JVM_OPTS, ApacheKafka

        kafka = ApacheKafka(workdir / "kafka", size=nodes, jvm_opts=THROUGHPUT_JVM_OPTS)
        return stack.enter_context(kafka).bootstrap_servers, False
    from convdb.infra.dev.broker import EmbeddedBroker

    broker = stack.enter_context(EmbeddedBroker(workdir / "tansu.log"))
    return broker.bootstrap_servers, True


def measure(
    kind: str, names: tuple[str, ...], size: str, repeats: int, workdir: Path
) -> tuple[Figures, dict[str, Any], list[str]]:
    """Run benchmarks on a fresh broker of this kind (stopped afterwards)."""
    from convdb.infra.settings import Settings

    nodes = 3 if any(n in CLUSTER for n in names) else 1
    with ExitStack() as stack:
        bootstrap, embedded = start_broker(stack, workdir / kind, kind, nodes)
        settings = Settings(_env_file=None).with_broker(bootstrap, embedded=embedded)  # type: ignore[call-arg]
        return run_all(BenchContext(settings, size, repeats, workdir / kind), names)


def run_all(ctx: BenchContext, names: tuple[str, ...]) -> tuple[Figures, dict[str, Any], list[str]]:
    """Run benchmarks in order; returns figures, their descriptions, and notes."""
    figures: Figures = {}
    meta: dict[str, Any] = {}
    notes = ctx.notes
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        started = time.monotonic()
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        result = module.run(ctx)
        figures.update(result)
        meta.update(module.FIGURES)
        print(f"bench: {name} done in {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
    return figures, meta, notes


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parse(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sizes = ("small", "large") if args.size == "both" else (args.size,)
    for size in sizes:
        code = run_size(args, size)
        if code:
            return code
    return 0


def run_size(args: argparse.Namespace, size: str) -> int:
    """Run the benchmarks at one size: the main table, then each benchmark with a section of its own."""
    names = tuple(args.only) if args.only else tuple(n for n in BENCHMARKS if n not in OWN_SECTION)
    groups = [tuple(n for n in names if n not in OWN_SECTION)] + [(n,) for n in names if n in OWN_SECTION]
    for group in groups:
        if group:
            code = run_group(args, size, group)
            if code:
                return code
    return 0


def run_group(args: argparse.Namespace, size: str, names: tuple[str, ...]) -> int:
    """Run benchmarks at one size, print them and write their section of RESULTS.md.

    A benchmark with a section of its own writes one per broker: with `--broker both` it runs on
    each in turn (the fleet on a 3-broker cluster, not beside one node), each in its section.
    """
    own = names[0] if names[0] in OWN_SECTION else None
    if own is not None and args.broker == "both" and own in BROKER_BOUND:
        for kind in ("embedded", "apache"):
            code = run_group(argparse.Namespace(**{**vars(args), "broker": kind}), size, names)
            if code:
                return code
        return 0
    repeats = args.repeats or (5 if size == "large" else 3)
    started = time.monotonic()
    first = "apache" if args.broker == "apache" else "embedded"
    compared: dict[str, Figures] = {}
    with tempfile.TemporaryDirectory(prefix="convdb-bench-") as tmp:
        try:
            figures, meta, notes = measure(first, names, size, repeats, Path(tmp))
            bound = tuple(n for n in names if n in BROKER_BOUND)
            if args.broker == "both" and bound:
                apache, _, apache_notes = measure("apache", bound, size, repeats, Path(tmp))
                compared = {"embedded": figures, "apache": apache}
                notes += [f"apache: {n}" for n in apache_notes]
        except Exception as exc:  # noqa: BLE001 - any failure is a failed bench run, reported as such
            logger.debug("bench failed", exc_info=True)
            print(f"bench: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    notes.append(f"total wall time {time.monotonic() - started:.0f} s")
    print(table(figures, meta))
    if compared:
        print(side_by_side(compared, meta))
    for note in notes:
        print(f"bench: note: {note}", file=sys.stderr)
    if not args.no_write:
        existing = RESULTS.read_text() if RESULTS.exists() else ""
        text = markdown(figures, meta, size, repeats, notes, first, compared, only=own)
        key = (f"{own}:{size}" + (":apache" if first == "apache" else "")) if own else size
        RESULTS.write_text(with_section(existing, key, text))
        print(f"bench: wrote the {key} section of {RESULTS}", file=sys.stderr)
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
