"""`python -m bench`: run the benchmarks, print the table, write bench/RESULTS.md.

Starts the embedded broker unless `CONVDB_BOOTSTRAP_SERVERS` is set. Exit 1 with a message if
any benchmark fails: a missing figure is never reported as a measured one.
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
from bench.report import markdown, table

BENCHMARKS: tuple[str, ...] = (
    "publish",
    "codec",
    "search",
    "sink",
    "e2e",
    "replay",
    "resume",
    "step",
    "console",
)
"""Registered benchmarks: each is a module `bench.<name>` with `FIGURES` and `run(ctx) -> Figures`."""

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
logger = logging.getLogger("bench")


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("small", "large"), default="small", help="default: small")
    parser.add_argument("--json", action="store_true", help="also print every figure as one JSON object")
    parser.add_argument("--only", choices=BENCHMARKS, action="append", help="run only these (repeatable)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per figure (default 3 small, 5 large)"
    )
    parser.add_argument("--no-write", action="store_true", help="do not write bench/RESULTS.md")
    return parser.parse_args(argv)


def start_broker(stack: ExitStack, workdir: Path) -> tuple[str, bool]:
    """The broker to measure against: CONVDB_BOOTSTRAP_SERVERS, else a fresh embedded one."""
    external = os.environ.get("CONVDB_BOOTSTRAP_SERVERS")
    if external:
        return external, False
    from infra.broker import EmbeddedBroker

    broker = stack.enter_context(EmbeddedBroker(workdir / "tansu.log"))
    return broker.bootstrap_servers, True


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
    from infra.settings import Settings

    names = tuple(args.only) if args.only else BENCHMARKS
    repeats = args.repeats or (5 if args.size == "large" else 3)
    started = time.monotonic()
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="convdb-bench-") as tmp:
        workdir = Path(tmp)
        try:
            bootstrap, embedded = start_broker(stack, workdir)
            settings = Settings(_env_file=None).with_broker(bootstrap, embedded=embedded)  # type: ignore[call-arg]
            ctx = BenchContext(settings, args.size, repeats, workdir)
            figures, meta, notes = run_all(ctx, names)
        except Exception as exc:  # noqa: BLE001 - any failure is a failed bench run, reported as such
            logger.debug("bench failed", exc_info=True)
            print(f"bench: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
    notes.append(f"total wall time {time.monotonic() - started:.0f} s")
    print(table(figures, meta))
    for note in notes:
        print(f"bench: note: {note}", file=sys.stderr)
    if not args.no_write:
        RESULTS.write_text(markdown(figures, meta, args.size, repeats, notes))
        print(f"bench: wrote {RESULTS}", file=sys.stderr)
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
