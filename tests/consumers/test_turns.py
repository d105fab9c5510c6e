"""SQLite writers take turns on a lock file beside the database (`convdb.consumers._turns`).

Real SQLite files and a real second process: the turn is held from BEGIN to COMMIT or ROLLBACK,
a writer in another process waits on it and gets in as soon as it is released, and nothing is
lost either way.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from convdb.consumers._turns import TurnConnection, turn_path
from convdb.consumers.store import open_engine

WRITER = """
import sys, time
import sqlalchemy as sa
from convdb.consumers.store import open_engine
engine = open_engine(sys.argv[1])
print("ready", flush=True)
with engine.begin() as conn:
    print("begun", flush=True)
    conn.execute(sa.text("INSERT INTO t (who) VALUES ('child')"))
print(f"committed {time.time():.6f}", flush=True)
"""


def held(database: Path) -> bool:
    """Whether some connection holds the database's turn now (probed from a descriptor of our own)."""
    fd = os.open(turn_path(str(database)), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@pytest.fixture()
def database(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    with open_engine(f"sqlite:///{path}").begin() as conn:
        conn.execute(sa.text("CREATE TABLE t (who TEXT NOT NULL)"))
    return path


def test_the_turn_is_held_from_begin_to_commit_or_rollback(database: Path) -> None:
    engine = open_engine(f"sqlite:///{database}")
    assert not held(database)
    with engine.begin() as conn:
        assert held(database)
        conn.execute(sa.text("INSERT INTO t (who) VALUES ('a')"))
    assert not held(database)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t (who) VALUES ('b')"))
        assert held(database)
        raise RuntimeError("rolled back")
    assert not held(database)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT who FROM t")).scalars().all() == ["a"]


def test_a_reader_takes_no_turn(database: Path) -> None:
    reader = open_engine(f"sqlite:///{database}", writer=False)
    with reader.connect() as conn:
        conn.execute(sa.text("SELECT count(*) FROM t")).scalar_one()
        assert not held(database)


def test_a_writer_in_another_process_waits_for_the_turn_and_gets_it_at_once(database: Path) -> None:
    engine = open_engine(f"sqlite:///{database}")
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO t (who) VALUES ('parent')"))
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, f"sqlite:///{database}"], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # the child is waiting for the turn now
        assert child.poll() is None
        released = time.time()
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0, out
    committed = float(out.split("committed ")[1])
    # SQLite's busy handler would retry every 100 ms by now; the turn wakes the child at once.
    assert committed - released < 0.5, out
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT who FROM t ORDER BY rowid")).scalars().all()
    assert rows == ["parent", "child"]


def test_a_thread_holding_the_turn_is_not_made_to_wait_for_itself(database: Path) -> None:
    first = sqlite3.connect(database, factory=TurnConnection, isolation_level=None)
    second = sqlite3.connect(database, factory=TurnConnection, isolation_level=None, timeout=0.1)
    first.use_turns(str(database))
    second.use_turns(str(database))
    first.take_turn()
    first.execute("BEGIN IMMEDIATE")
    second.take_turn()  # returns: this thread holds the turn on `first`
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        second.execute("BEGIN IMMEDIATE")  # SQLite's own lock decides, as without turns
    first.commit()
    assert not held(database)
    first.close()
    second.close()
