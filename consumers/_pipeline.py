"""The runner's store side in a thread of its own: batch N commits while batch N+1 is decoded.

The store drivers release the GIL while SQLite or PostgreSQL does the work (statements, the
commit, its I/O), so the next batch is consumed and decoded on the other core meanwhile. At
most one batch waits and one is written: memory stays bounded, and `drain` lets a rebalance
or a shutdown see every submitted batch committed first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class StorePipeline(Generic[T, R]):
    """Runs `work` on submitted items, in order, in one thread; its first error stops it."""

    def __init__(self, work: Callable[[T], R], name: str, after: Callable[[], None] | None = None) -> None:
        self._work = work
        self._after = after
        """Called between items, once the last one is released (to collect garbage then)."""
        self._cond = threading.Condition()
        self._pending: list[T] = []
        self._busy = False
        self._done: list[R] = []
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> None:
        """Queue an item; waits while one is already waiting. Raises the worker's error, if any."""
        with self._cond:
            self._cond.wait_for(lambda: not self._pending or self._error is not None)
            self._raise()
            self._pending.append(item)
            self._cond.notify_all()

    def finished(self) -> list[R]:
        """Results of the items done since the last call. Raises the worker's error, if any."""
        with self._cond:
            self._raise()
            done, self._done = self._done, []
            return done

    def drain(self) -> list[R]:
        """Wait until every submitted item is done; their results, as `finished`."""
        with self._cond:
            self._cond.wait_for(lambda: (not self._pending and not self._busy) or self._error is not None)
        return self.finished()

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing being worked on."""
        with self._cond:
            return not self._pending and not self._busy

    def close(self) -> None:
        """Stop the thread after the items already submitted (their errors are not raised here)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if not self._pending or self._error is not None:
                    return
                item = self._pending.pop(0)
                self._busy = True
            try:
                result = self._work(item)
                del item
                if self._after is not None:
                    self._after()
            except BaseException as exc:  # noqa: BLE001 - handed to the submitting thread
                with self._cond:
                    self._error, self._busy = exc, False
                    self._cond.notify_all()
                return
            with self._cond:
                self._done.append(result)
                self._busy = False
                self._cond.notify_all()
