"""Child processes with readiness waits (free ports, start, wait for a TCP port, stop), and a
service's own stop on SIGTERM, bounded in time."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from convdb.infra.errors import InfraError

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A free TCP port on the loopback interface (bind to port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the child gets SIGTERM when the thread that started it exits, even
    # by SIGKILL, so a crashed test run never leaves a broker behind.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


_CHILDREN: weakref.WeakSet[subprocess.Popen[bytes]] = weakref.WeakSet()
"""Children `spawn` started that die with us and are not infrastructure, for `terminate_children`."""


def spawn(
    argv: list[str],
    log_path: Path,
    env: dict[str, str] | None = None,
    *,
    detached: bool = False,
    infrastructure: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a child in its own session; it dies with us unless `detached`. `infrastructure` (a
    broker, S3) is left out of `terminate_children`: the others need it to stop cleanly."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            preexec_fn=None if detached else _die_with_parent,
        )
    if not detached and not infrastructure:
        _CHILDREN.add(proc)
    return proc


def terminate_children() -> None:
    """SIGTERM every live child `spawn` started (neither detached nor infrastructure) at once, so
    that stopping them one by one afterwards takes as long as the slowest, not the sum of all."""
    for proc in list(_CHILDREN):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def wait_for_port(
    proc: subprocess.Popen[bytes] | None, port: int, timeout: float, what: str, log: Path
) -> None:
    """Wait until `port` accepts connections; raise with the log's tail if the child dies."""
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if proc is not None and proc.poll() is not None:
            raise InfraError(f"{what} exited with code {proc.returncode}; log: {log}\n{tail(log)}")
        if time.monotonic() > deadline:
            raise InfraError(f"{what} did not open port {port} within {timeout}s; log: {log}")
        time.sleep(0.02)


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log file, or '' when it is missing."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_group(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM a process group, then SIGKILL it if it outlives `timeout`."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists and is not a zombie of ours."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def on_stop_signal(stop: Callable[[], object], service: str, grace_s: float) -> None:
    """On SIGTERM or SIGINT, call `stop` (the service finishes its batch, commits and leaves its
    group) and give it `grace_s` to end before `exit_after` ends the process."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        logger.warning("%s: signal %s, stopping (at most %.0f s)", service, signum, grace_s)
        stop()
        exit_after(grace_s, service)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


_exit_timer = threading.Lock()


def exit_after(grace_s: float, service: str) -> None:
    """End this process (status 1) `grace_s` from now unless it ended before. A clean stop waits on
    the brokers (commit, flush, leave the group), and with every broker gone a client can wait for
    ever: an orphaned service then spins on its reconnects instead of ending. The first call arms
    the timer; later ones (a second SIGTERM) leave it as it is."""
    if not _exit_timer.acquire(blocking=False):
        return

    def expire() -> None:
        time.sleep(grace_s)
        logger.error("%s: still stopping %.0f s after the signal (brokers away?): exiting", service, grace_s)
        sys.stderr.flush()
        os._exit(1)

    threading.Thread(target=expire, name="stop-deadline", daemon=True).start()
