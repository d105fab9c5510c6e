"""Every CLI and settings error: one clear line, exit 2 for bad input, 1 for infrastructure, no traceback.

Real subprocesses; the infrastructure cases point at a port nobody listens on.
"""

from __future__ import annotations

import pytest

from convdb.infra.procs import free_port
from tests.infra.test_cli import convdb

BAD_INPUT = [
    ({"CONVDB_PARTITIONS": "abc"}, ["topics", "list"], "CONVDB_PARTITIONS"),
    ({"CONVDB_API__KEYS": "not json"}, ["topics", "list"], "CONVDB_API__"),
    ({"CONVDB_API__KEYS": '{"k": 1}'}, ["topics", "list"], "CONVDB_API__KEYS"),
    ({"CONVDB_API__KEYS": "[1, 2"}, ["serve"], "CONVDB_API__"),
    ({"CONVDB_KAFKA__EXTRA": "{"}, ["topics", "list"], "CONVDB_KAFKA__"),
    ({"CONVDB_OPS__PORT": "-1x"}, ["topics", "list"], "CONVDB_OPS__PORT"),
    ({}, ["serve", "--port", "99999"], "--port"),
    ({}, ["serve", "--port", "0"], "--port"),
    ({}, ["consume", "all", "--metrics-port", "70000"], "--metrics-port"),
    ({}, ["tail", "--from-offset", "9" * 40], "--from-offset"),
    ({}, ["tail", "--from-offset", "-5"], "--from-offset"),
    ({}, ["tail", "--limit", "1e9"], "--limit"),
    ({}, ["tail", "--from-timestamp", "1960-01-01T00:00:00"], "before 1970"),
    ({}, ["tail", "--from-timestamp", "yesterday"], "ISO-8601"),
    ({}, ["replay", "views", "--from-offset", "9" * 40, "--into", "sqlite:///x.db"], "--from-offset"),
    ({}, ["replay", "views", "--from-timestamp", "1969-12-31", "--into", "sqlite:///x.db"], "1970"),
    ({}, ["tail", "--conversation", "x" * 300], "at most 200"),
    ({}, ["run", "--tenant", "a\x01b", "task"], "control"),
    ({}, ["run", "--conversation", "a/b", "task"], "'/'"),
    ({}, ["export", "\x1b[31mred"], "control"),
    ({}, ["export", "demo-0a1b2c", "--format", "openhands", "out"], "OpenHands conversation ids are UUIDs"),
    ({}, ["audit", "show", "c1", "--at", "9" * 30], "--at"),
    ({}, ["demo", "--conversations", "99999999"], "--conversations"),
    ({}, ["no-such-command"], "invalid choice"),
]


@pytest.mark.parametrize(("env", "args", "named"), BAD_INPUT, ids=[" ".join(a)[:40] for _, a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(env: dict[str, str], args: list[str], named: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = convdb({"CONVDB_DATA_DIR": str(tmp_path), **env}, *args, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert named in lines[0] and len(lines[0]) < 600, lines[0]


def test_an_unreachable_broker_is_one_line_and_exit_1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    env = {
        "CONVDB_DATA_DIR": str(tmp_path),
        "CONVDB_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "CONVDB_KAFKA__DELIVERY_TIMEOUT_S": "3",
    }
    done = convdb(env, "tail", "--from-timestamp", "2020-01-01T00:00:00", timeout=120, cwd=tmp_path)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    mine = [line for line in done.stderr.splitlines() if line.startswith("convdb")]
    assert len(mine) == 1, done.stderr[-2000:]
