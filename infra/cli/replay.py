"""`convdb replay`: rebuild one projection in a shadow store from Kafka, the archive, or both."""

from __future__ import annotations

import argparse
import functools

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from convdb.consumers import plugins
from convdb.consumers.archive.errors import ArchiveUrlError, OffsetRangeError, StoreUrlError
from convdb.consumers.archive.parallel import replay_parallel
from convdb.consumers.archive.reader import ArchiveReader
from convdb.consumers.archive.replay import open_store, plan_replay, replay
from convdb.consumers.archive.sources import Window
from convdb.consumers.archive.target import open_target
from convdb.consumers.base import Projector
from convdb.consumers.errors import PluginError
from convdb.infra.cli._common import UsageError, iso_timestamp, non_negative, positive, require_broker
from convdb.infra.connection import load_settings
from convdb.infra.settings import Settings
from convdb.schemas import make_codec

SOURCES = ("kafka", "archive", "auto")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `replay` command."""
    p = sub.add_parser(
        "replay",
        help="rebuild a projection in a shadow store from offsets or a time",
        description="Drops and rebuilds CONSUMER's tables in STORE_URL from the records in the window "
        "(offsets [from, to) of every partition; event times [from, to)). --source auto reads what the "
        "archive holds (everything below Kafka's first offset) and Kafka for the tail.",
    )
    p.add_argument(
        "consumer", metavar="CONSUMER", help="projector plugin name (views, index, titles, stats, ...)"
    )
    start = p.add_mutually_exclusive_group(required=True)
    start.add_argument(
        "--from-offset", type=non_negative, metavar="N", help="start at offset N of each partition"
    )
    start.add_argument(
        "--from-timestamp", type=iso_timestamp, metavar="ISO", help="events at or after this time"
    )
    end = p.add_mutually_exclusive_group()
    end.add_argument(
        "--to-offset", type=non_negative, metavar="N", help="stop before offset N of each partition"
    )
    end.add_argument("--to-timestamp", type=iso_timestamp, metavar="ISO", help="only events before this time")
    p.add_argument(
        "--into", required=True, metavar="STORE_URL", help="shadow store (sqlite:///file or postgresql://)"
    )
    p.add_argument("--source", choices=SOURCES, default="kafka", help="where to read (default: kafka)")
    p.add_argument(
        "--batch-size", type=positive, default=5000, metavar="N", help="records per store transaction"
    )
    p.add_argument(
        "--processes",
        type=positive,
        default=1,
        metavar="N",
        help="load with N worker processes, partitions spread over them (default 1)",
    )
    p.set_defaults(func=_replay)


def window_of(args: argparse.Namespace) -> Window:
    """The window of the arguments; raises `UsageError` when it is empty by construction."""
    window = Window(args.from_offset, args.to_offset, args.from_timestamp, args.to_timestamp)
    if (
        window.from_offset is not None
        and window.to_offset is not None
        and window.to_offset <= window.from_offset
    ):
        raise UsageError(
            f"--to-offset {window.to_offset} must be greater than --from-offset {window.from_offset}"
        )
    if window.from_time is not None and window.to_time is not None and window.to_time <= window.from_time:
        raise UsageError("--to-timestamp must be later than --from-timestamp")
    return window


def load_projector(name: str, settings: Settings) -> Projector:
    """The projector plugin called `name`; `UsageError` when there is none (or it is not a projector)."""
    try:
        projector = plugins.load(name, settings)
    except PluginError as exc:
        raise UsageError(str(exc)) from exc
    if not callable(getattr(projector, "apply", None)):
        raise UsageError(f"consumer {name!r} is not a projector (it writes no store rows): nothing to replay")
    return projector


def open_reader(settings: Settings) -> ArchiveReader:
    """A reader of the configured archive; `UsageError` when none is configured."""
    try:
        target, prefix = open_target(settings)
    except ArchiveUrlError as exc:
        raise UsageError(str(exc)) from exc
    return ArchiveReader(target, prefix)


def _replay(args: argparse.Namespace) -> int:
    window = window_of(args)
    settings = load_settings()
    if args.source != "archive":
        require_broker(settings)
    projector = load_projector(args.consumer, settings)
    try:
        engine = open_store(args.into)
    except StoreUrlError as exc:
        raise UsageError(str(exc)) from exc
    reader = open_reader(settings) if args.source != "kafka" else None
    try:
        segments = plan_replay(settings, projector, window, args.source, reader)
        total = sum(s.stop - s.start for segs in segments.values() for s in segs)
        with _progress() as bar:
            # Counted in offsets, transaction markers and skipped records included: it ends at 100%.
            task = bar.add_task(f"replay {projector.name} (offsets)", total=total)
            advance = lambda n: bar.advance(task, n)  # noqa: E731
            if args.processes > 1:
                make = functools.partial(load_projector, args.consumer, settings)
                result = replay_parallel(
                    settings, make, args.into, segments, window, args.processes, advance, args.batch_size
                )
            else:
                result = replay(
                    settings, projector, engine, segments, window, make_codec(settings.schema_registry_url),
                    reader, progress=advance, batch_size=args.batch_size,
                )  # fmt: skip
    except OffsetRangeError as exc:
        raise UsageError(str(exc)) from exc
    finally:
        if reader is not None:
            reader.close()
    sources = "+".join(sorted({s.source for s in result.segments})) or "nothing"
    flowing = (
        f"{result.rate:,.0f} events/s once records flowed, start-up excluded"
        if result.flowing_seconds
        else f"{result.rate:,.0f} events/s"
    )
    print(
        f"replayed {result.consumer}: {result.applied} events from {sources} into {args.into} in "
        f"{result.seconds:.2f}s ({flowing}); undecodable {result.undecodable}, "
        f"rejected {result.rejected}, outside window {result.outside_window}"
    )
    if result.rejected:
        print(
            f"  rejected: {result.rejected} record(s) the projection refused, as the live consumer does "
            "(a seq gap, an unknown parent, an illegal transition, another tenant's record for a "
            "conversation): left out of the store; the live consumer sends each to the DLQ with the "
            "reason (`convdb tail --topic dlq`), and the log above names each one"
        )
    return 0


class _RateColumn(ProgressColumn):
    """Offsets per second since the start."""

    def render(self, task: Task) -> Text:
        """The task's average rate."""
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} offsets/s", style="progress.data.speed")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _RateColumn(),
        TimeElapsedColumn(), console=Console(stderr=True), transient=False, refresh_per_second=4,
    )  # fmt: skip
