"""SQLite writers of several processes take turns on a lock file, not on SQLite's busy handler.

SQLite lets one writer in at a time. A writer that finds the file locked is left to the busy
handler, which sleeps between tries (1, 2, 5, 10 ... up to 100 ms) whether or not the lock was
freed meanwhile: two replay workers writing one shadow store spent most of their time asleep
(measured: 2 workers no faster than 1). Here each writer connection holds an exclusive `flock`
on a file beside the database (`<database>-writer`) from its `BEGIN IMMEDIATE` to its commit or
rollback; the kernel wakes the next waiter as soon as it is released, and SQLite's own lock is
then free. Readers never take it (WAL). A process that dies releases it with its descriptors.

A thread that already holds a turn on the database and begins a second writer transaction on
another connection (it would wait for itself) is not made to wait here: SQLite's busy handler
decides, as before.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from typing import Any

_held = threading.local()
"""Per thread: the lock files whose turn it holds (its `paths` set)."""


def _held_paths() -> set[str]:
    paths: set[str] = _held.__dict__.setdefault("paths", set())
    return paths


def turn_path(database: str) -> str:
    """The lock file of a SQLite database file."""
    return f"{database}-writer"


class TurnConnection(sqlite3.Connection):
    """A writer's DBAPI connection that holds its database's turn while a transaction is open.

    `take_turn` is called just before `BEGIN IMMEDIATE`; `commit`, `rollback` and `close` give
    the turn back after SQLite has released its own lock.
    """

    _turn_fd: int | None = None
    _turn_path = ""
    _holding = False

    def use_turns(self, database: str) -> None:
        """Take turns on `database`'s lock file from now on."""
        self._turn_path = turn_path(database)
        self._turn_fd = os.open(self._turn_path, os.O_RDWR | os.O_CREAT, 0o644)

    def take_turn(self) -> None:
        """Wait for the database's turn (no wait if this thread holds it on another connection)."""
        if self._turn_fd is None or self._holding:
            return
        paths = _held_paths()
        if self._turn_path in paths:
            return
        fcntl.flock(self._turn_fd, fcntl.LOCK_EX)  # releases the GIL while it waits
        self._holding = True
        paths.add(self._turn_path)

    def _give_turn(self) -> None:
        if self._holding and self._turn_fd is not None:
            self._holding = False
            _held_paths().discard(self._turn_path)
            fcntl.flock(self._turn_fd, fcntl.LOCK_UN)

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self._give_turn()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self._give_turn()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._give_turn()
            if self._turn_fd is not None:
                os.close(self._turn_fd)
                self._turn_fd = None


def takes_turns(database: str) -> bool:
    """Whether writers of this SQLite database take turns (a file, not an in-memory database)."""
    return bool(database) and database != ":memory:" and not database.startswith("file:")


def begin_in_turn(dbapi_connection: Any) -> None:
    """Take the turn of a `TurnConnection` (any other connection: nothing)."""
    if isinstance(dbapi_connection, TurnConnection):
        dbapi_connection.take_turn()
