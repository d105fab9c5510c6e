"""A broker address with nobody behind it, as a new user meets it: every command fails within
about 5 s with one line naming the address and where it came from (exit 1), `convdb serve`
says so on /healthz and on writes (503), and librdkafka never prints its raw `%3|` lines."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from convdb.infra.kafka import OncePerProblem, problem_key
from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port

BOUND_S = 12.0
"""The probe waits 4 s; the rest is interpreter start-up on a loaded machine (measured ~5 s idle)."""


def _start(env: dict[str, str], cwd: Path, *args: str) -> tuple[subprocess.Popen[str], float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "convdb", *args],
        env={**clean, **env},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, time.monotonic()


def test_commands_fail_fast_naming_the_address_and_its_source(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    from_env = {"CONVDB_DATA_DIR": str(tmp_path / "env"), "CONVDB_BOOTSTRAP_SERVERS": address}
    # A dev stack file whose broker process is alive (this test) but whose address is dead.
    stack_dir = tmp_path / "stack"
    stack_dir.mkdir()
    (stack_dir / "dev.json").write_text(json.dumps({"bootstrap_servers": address, "broker_pid": os.getpid()}))
    from_file = {"CONVDB_DATA_DIR": str(stack_dir)}
    runs = {
        "tail": (from_env, ("tail",)),
        "run": (from_env, ("run", "hello")),
        "topics list": (from_env, ("topics", "list")),
        "tail (dev stack)": (from_file, ("tail", "--follow")),
    }
    # All at once: each is timed on its own, the test waits for the slowest only.
    started = {name: _start(env, tmp_path, *args) for name, (env, args) in runs.items()}
    for name, (proc, t0) in started.items():
        out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - t0
        source = "CONVDB_BOOTSTRAP_SERVERS" if runs[name][0] is from_env else f"dev stack file {stack_dir}"
        assert proc.returncode == 1, (name, proc.returncode, err)
        assert elapsed < BOUND_S, (name, elapsed)
        assert "%3|" not in out + err, (name, err)
        (line,) = err.strip().splitlines()
        assert f"no Kafka broker answered at {address} (from " in line, (name, line)
        assert source in line.replace("/dev.json", ""), (name, line)


def test_serve_without_a_broker_says_so(tmp_path: Path) -> None:
    env = {"CONVDB_DATA_DIR": str(tmp_path / "data"), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
    # Outside dev mode the refusal says first what is missing: a broker (`convdb dev up`).
    refused = subprocess.run(
        [sys.executable, "-m", "convdb", "serve", "--port", str(free_port())],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("convdb: error: refusing to start: no broker:") and "convdb dev up" in line, line
    # In dev mode it serves reads, and says on /healthz and on every write that no broker is there.
    port = free_port()
    log = tmp_path / "serve.log"
    proc = spawn(
        [sys.executable, "-m", "convdb", "serve", "--port", str(port)],
        log,
        {**env, "CONVDB_DEV": "true", "CONVDB_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}"},
    )
    try:
        wait_for_port(proc, port, 60, "convdb serve", log)
        url, key = f"http://127.0.0.1:{port}", {"X-API-Key": "dev-key"}
        health = httpx.get(f"{url}/healthz", timeout=10)
        assert health.status_code == 503 and "no broker configured" in health.json()["problems"]["broker"]
        for path in ("/conversations", "/conversations/c1/messages"):
            started = time.monotonic()
            write = httpx.post(f"{url}{path}", json={"content": "hi"}, headers=key, timeout=30)
            assert write.status_code == 503, (path, write.text)
            assert "no broker configured" in write.json()["detail"] and time.monotonic() - started < 5
        assert httpx.get(f"{url}/conversations", headers=key, timeout=10).status_code == 200
    finally:
        stop_group(proc.pid, timeout=15)
        proc.wait()
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


def test_serve_names_a_dead_broker_on_writes(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    port = free_port()
    log = tmp_path / "serve.log"
    env = {
        "CONVDB_DATA_DIR": str(tmp_path / "data"),
        "CONVDB_BOOTSTRAP_SERVERS": address,
        "CONVDB_DEV": "true",
        "CONVDB_API__PUBLISH_TIMEOUT_S": "3",
        "CONVDB_STORE_URL": f"sqlite:///{tmp_path / 'store.db'}",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    proc = spawn([sys.executable, "-m", "convdb", "serve", "--port", str(port)], log, env)
    try:
        wait_for_port(proc, port, 60, "convdb serve", log)
        started = time.monotonic()
        write = httpx.post(
            f"http://127.0.0.1:{port}/conversations",
            json={"content": "hi"},
            headers={"X-API-Key": "dev-key"},
            timeout=30,
        )
        assert time.monotonic() - started < BOUND_S
        assert write.status_code == 503, write.text
        assert f"{address} (from CONVDB_BOOTSTRAP_SERVERS)" in write.json()["detail"], write.text
    finally:
        stop_group(proc.pid, timeout=15)
        proc.wait()
    assert "%3|" not in log.read_text()


def _record(message: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("convdb.librdkafka", level, "", 0, message, None, None)


def test_librdkafka_lines_pass_once_per_problem_and_window() -> None:
    refused = "FAIL [rdkafka#consumer-{n}] [thrd:127.0.0.1:1/bootstrap]: Connect failed (after {n}ms)"
    gate = OncePerProblem(window_s=0.2)
    passed = [gate.filter(_record(refused.format(n=n))) for n in range(5)]
    assert passed == [True, False, False, False, False]
    assert gate.filter(_record("SASL authentication failed"))  # another problem passes
    assert not gate.filter(_record("a notice", logging.INFO))  # below WARNING never
    time.sleep(0.25)
    again = _record(refused.format(n=9))
    assert gate.filter(again) and "(repeated 4 times before)" in again.getMessage()
    assert problem_key(refused.format(n=1)) == problem_key(refused.format(n=22))
