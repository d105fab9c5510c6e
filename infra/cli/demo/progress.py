"""The demo's running commentary: a line per stage as it ends and per conversation as it stops,
and while it waits, a sign of life (a spinner on a terminal, else a line every few seconds).

Nothing with `--json`: its stdout is the summary alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from convdb.producers.status import STOP_STATUSES


class Progress:
    """Prints what the demo did as it happens (`enabled=False`: prints nothing)."""

    def __init__(self, enabled: bool, console: Console | None = None, every_s: float = 10.0) -> None:
        self.enabled, self.every_s = enabled, every_s
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.started = time.monotonic()
        self._stopped: set[str] = set()

    def line(self, text: str) -> None:
        """One line, stamped with the seconds since the demo started."""
        if self.enabled:
            self.console.print(f"[dim]{time.monotonic() - self.started:5.1f}s[/dim] {text}", highlight=False)

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """While inside: a spinner saying `what` on a terminal, else a line every `every_s` seconds."""
        if not self.enabled:
            yield
            return
        if self.console.is_terminal:
            with self.console.status(f"{what} ..."):
                yield
            return
        done = threading.Event()
        since = time.monotonic()

        def tick() -> None:
            while not done.wait(self.every_s):
                self.line(f"... {what} ({time.monotonic() - since:.0f} s so far)")

        ticker = threading.Thread(target=tick, name="demo-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            done.set()
            ticker.join()

    def conversations(self, conversations: Mapping[str, Any], ids: list[str]) -> None:
        """A line for each conversation of `ids` that reached a stop status since the last call
        (`conversations`: a fleet runner's, id -> its conversation)."""
        for cid in ids:
            conv = conversations.get(cid)
            if cid in self._stopped or conv is None or conv.status not in STOP_STATUSES:
                continue
            self._stopped.add(cid)
            stats = conv.stats
            self.line(
                f"conversation {cid} {conv.status}: {len(conv.state.view.log)} events, "
                f"{stats.llm_calls} LLM calls, {stats.steps} steps ({len(self._stopped)} of {len(ids)})"
            )
