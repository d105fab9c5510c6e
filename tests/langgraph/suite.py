"""LangGraph's own graph tests, from the sdist of the installed langgraph, with convdb's saver added.

Nothing is vendored: `pip download` fetches the sdist of exactly the installed version at test
time; its `tests/conftest.py` gets one more value, "convdb", in the `sync_checkpointer` and
`async_checkpointer` fixtures (the patch fails loudly if the conftest no longer has the expected
shape), and `-k convdb` selects exactly the tests that run on a checkpointer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

FIXTURE = Path(__file__).with_name("suite_fixture.py")

SYNC_PARAMS = """    params=[
        "memory",
        "sqlite",
        "sqlite_aes",
    ]
    if NO_DOCKER"""
ASYNC_PARAMS = """    params=[
        "memory",
        "sqlite_aio",
    ]
    if NO_DOCKER"""
FIRST_BRANCH = """    checkpointer_name = request.param
    if checkpointer_name == "memory":"""
CONVDB_BRANCH = """    checkpointer_name = request.param
    if checkpointer_name == "convdb":
        with convdb_saver() as checkpointer:
            yield checkpointer
    elif checkpointer_name == "memory":"""


def fetch_tests(workdir: Path) -> Path:
    """The `tests/` of the installed langgraph's sdist, unpacked under `workdir`; returns the sdist root."""
    wanted = version("langgraph")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        + [f"langgraph=={wanted}", "-d", str(workdir)],
        check=True,
        timeout=300,
    )
    archive = workdir / f"langgraph-{wanted}.tar.gz"
    with tarfile.open(archive) as tar:
        tar.extractall(workdir, filter="data")
    return workdir / f"langgraph-{wanted}"


def _replace_once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise AssertionError(f"LangGraph's conftest changed shape: {old.splitlines()[0]!r}... not found once")
    return text.replace(old, new)


def add_convdb_fixture(root: Path) -> None:
    """Make "convdb" the first value of both checkpointer fixtures."""
    conftest = root / "tests" / "conftest.py"
    text = conftest.read_text()
    text = _replace_once(text, SYNC_PARAMS, SYNC_PARAMS.replace("params=[", 'params=[\n        "convdb",'))
    text = _replace_once(text, ASYNC_PARAMS, ASYNC_PARAMS.replace("params=[", 'params=[\n        "convdb",'))
    if text.count(FIRST_BRANCH) != 2:
        raise AssertionError("LangGraph's conftest changed shape: two checkpointer fixtures expected")
    text = text.replace(FIRST_BRANCH, CONVDB_BRANCH)
    text = "from convdb_suite_fixture import convdb_saver\n" + text
    conftest.write_text(text)
    shutil.copy(FIXTURE, root / "convdb_suite_fixture.py")


@dataclass
class SuiteRun:
    """What pytest said about LangGraph's tests on convdb's saver."""

    returncode: int
    summary: str
    failures: list[str]
    output: str


def run_suite(
    root: Path,
    settings_fields: dict[str, object],
    files: list[str],
    timeout: float,
    select: str = "",
    args: Sequence[str] = (),
) -> SuiteRun:
    """Run `files` of LangGraph's tests (all of `tests/` when empty) that take convdb's saver, in a
    subprocess: `-k convdb`, and `select` (a `-k` expression) when given; `args` are more pytest
    arguments."""
    env = {
        **os.environ,
        "NO_DOCKER": "true",
        "PYTHONPATH": str(root),
        "CONVDB_SUITE_SETTINGS": json.dumps(settings_fields),
    }
    command = [sys.executable, "-m", "pytest", *(files or ["tests"]), "-q", "-p", "no:cacheprovider"]
    command += [
        "-k",
        f"convdb and ({select})" if select else "convdb",
        "-o",
        "addopts=",
        "-p",
        "no:randomly",
        "-rfE",
        "--timeout=120",
        *args,
    ]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.splitlines()
    failures = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    summary = next(
        (line for line in reversed(lines) if " in " in line and ("passed" in line or "failed" in line)), ""
    )
    return SuiteRun(
        done.returncode, summary.strip("= "), failures, done.stdout[-20000:] + done.stderr[-5000:]
    )
