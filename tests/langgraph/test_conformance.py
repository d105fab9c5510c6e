"""LangGraph's own checkpointer conformance suite against convdb's saver, on both brokers.

`langgraph-checkpoint-conformance` runs every capability the saver implements (it implements all
eight: the five base ones and delete_for_runs, copy_thread, prune): level FULL means every one
of their 81 checks passed, none skipped as "not implemented".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from convdb.infra.settings import Settings
from convdb.langgraph import ConvdbSaver

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

CAPABILITIES = {
    "put",
    "put_writes",
    "get_tuple",
    "list",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
}


def test_the_saver_is_conformant_at_level_full_with_every_capability(settings: Settings) -> None:
    @checkpointer_test(name="convdb")
    async def convdb_saver() -> AsyncIterator[ConvdbSaver]:
        saver = ConvdbSaver(settings)
        yield saver
        saver.close()

    report = asyncio.run(validate(convdb_saver, progress=ProgressCallbacks.quiet()))
    report.print_report()
    results = report.to_dict()["results"]
    assert {name for name, r in results.items() if r["detected"]} >= CAPABILITIES
    failures = {name: r["failures"] for name, r in results.items() if r["failures"]}
    assert not failures
    assert report.conformance_level() == "FULL"
    checks = sum(r["tests_passed"] for r in results.values())
    skipped = sum(r["tests_skipped"] for r in results.values())
    assert (checks, skipped) == (81, 0)
