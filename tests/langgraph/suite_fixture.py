"""convdb's saver as a value of LangGraph's `sync_checkpointer` / `async_checkpointer` fixtures.

Copied next to LangGraph's own tests (as `convdb_suite_fixture.py`) by `test_langgraph_suite.py`,
which patches their conftest to call `convdb_saver()`. Each test gets a fresh namespace, as
LangGraph's own fixtures give each test a fresh database: thread ids such as "1" repeat across
its tests. `CONVDB_SUITE_SETTINGS` holds the Settings fields (broker) as JSON.

LangGraph's tests expect an environment without the `langchain` package: with it installed (convdb's
`langgraph` extra has it, for `create_agent` users), langchain-core adds `"langchain": <version>` to
every chat model's `metadata["lc_versions"]`, and `test_weather_subgraph` (sync and async), which
compares that metadata with `{"langchain-core": ...}`, fails on every checkpointer, the in-memory one
included. So this module hides the `langchain` version from langchain-core, as LangGraph's own CI
has it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager

import langchain_core.language_models.base as _lc_base

from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.langgraph import ConvdbSaver
from convdb.schemas.topics import GRAPH

_lc_base._get_langchain_version = lambda: None  # type: ignore[attr-defined] # see the module doc


@contextmanager
def convdb_saver() -> Iterator[ConvdbSaver]:
    """A saver on a graph topic of its own, closed after the test."""
    fields = json.loads(os.environ["CONVDB_SUITE_SETTINGS"])
    # Not uuid.uuid4: LangGraph's tests patch it to number their message ids.
    settings = Settings(_env_file=None, namespace=f"lg{os.urandom(6).hex()}", **fields)  # type: ignore[call-arg]
    apply_topics(settings, (GRAPH,))
    saver = ConvdbSaver(settings)
    saver.open()  # its partitions taken before the graph runs, as a runner owns them before it runs one
    try:
        yield saver
    finally:
        saver.close()
