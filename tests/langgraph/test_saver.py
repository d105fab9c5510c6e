"""convdb's LangGraph saver on a real broker: restore from the log, fencing, forks, sync methods."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from convdb.infra.errors import FencedError, InfraError
from convdb.infra.settings import Settings
from convdb.langgraph import ConvdbSaver
from convdb.producers.errors import RecordTooLargeError
from tests.langgraph.graphs import counter_graph

pytestmark = [pytest.mark.kafka, pytest.mark.brokers, pytest.mark.slow_on("apache")]


def config(thread: str) -> dict[str, dict[str, str]]:
    return {"configurable": {"thread_id": thread}}


def test_a_new_saver_reads_the_thread_back_from_the_log(settings: Settings) -> None:
    first = ConvdbSaver(settings)
    assert counter_graph(first).invoke({"count": 1, "steps": []}, config("t1")) == {
        "count": 4,
        "steps": ["add", "double"],
    }
    history = [s.config for s in counter_graph(first).get_state_history(config("t1"))]

    second = ConvdbSaver(settings)  # another process would do the same: it reads the partition
    graph = counter_graph(second)
    assert graph.get_state(config("t1")).values == {"count": 4, "steps": ["add", "double"]}
    assert [s.config for s in graph.get_state_history(config("t1"))] == history
    assert graph.invoke({"count": 4, "steps": []}, config("t1"))["count"] == 10


def test_a_second_saver_fences_the_first_whose_writes_then_fail_loudly(settings: Settings) -> None:
    first = ConvdbSaver(settings)
    counter_graph(first).invoke({"count": 1, "steps": []}, config("t1"))
    second = ConvdbSaver(settings)
    counter_graph(second).invoke({"count": 10, "steps": []}, config("t1"))  # takes the partition

    with pytest.raises(FencedError, match="fenced"):
        counter_graph(first).invoke({"count": 100, "steps": []}, config("t1"))
    with pytest.raises(FencedError):  # and on every later call on that partition, reads included
        first.get_tuple(config("t1"))

    third = ConvdbSaver(settings)  # what the log holds: the first's run, then the second's; no zombie write
    state = counter_graph(third).get_state(config("t1"))
    assert state.values == {"count": 22, "steps": ["add", "double", "add", "double"]}
    assert len(list(third.list(config("t1")))) == 8


def test_a_fork_from_an_old_checkpoint_keeps_both_branches_values(settings: Settings) -> None:
    saver = ConvdbSaver(settings)
    graph = counter_graph(saver)
    graph.invoke({"count": 1, "steps": []}, config("t1"))
    after_add = next(s for s in graph.get_state_history(config("t1")) if s.next == ("double",))
    forked = graph.update_state(after_add.config, {"count": 50})
    assert graph.invoke(None, forked)["count"] == 100
    # The old branch still reads its own values: the fork's channel versions never reused its ones.
    old_leaf = [s for s in graph.get_state_history(config("t1")) if s.values.get("count") == 4]
    assert len(old_leaf) == 1 and old_leaf[0].values["steps"] == ["add", "double"]
    restored = counter_graph(ConvdbSaver(settings))
    assert restored.get_state(old_leaf[0].config).values == old_leaf[0].values
    assert restored.get_state(config("t1")).values["count"] == 100


def test_sync_deletion_prune_and_copy(settings: Settings) -> None:
    saver = ConvdbSaver(settings)
    graph = counter_graph(saver)
    graph.invoke({"count": 1, "steps": []}, config("a"))
    saver.copy_thread("a", "b")
    assert graph.get_state(config("b")).values == graph.get_state(config("a")).values
    saver.prune(["a"])
    assert len(list(saver.list(config("a")))) == 1
    saver.delete_thread("b")
    assert saver.get_tuple(config("b")) is None
    fresh = ConvdbSaver(settings)  # the tombstones are in the log too
    assert fresh.get_tuple(config("b")) is None
    assert len(list(fresh.list(config("a")))) == 1
    assert counter_graph(fresh).get_state(config("a")).values["count"] == 4


def test_a_thread_id_that_is_not_a_conversation_id_is_refused(settings: Settings) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        ConvdbSaver(settings).get_tuple(config("a/b"))


def test_a_namespace_without_the_graph_topic_is_named_in_the_error(
    make_settings: Callable[..., Settings],
) -> None:
    with pytest.raises(InfraError, match=r"graph\[\d\].*convdb topics apply"):
        ConvdbSaver(make_settings()).get_tuple(config("t1"))  # no topic was created


def test_a_value_above_the_record_size_limit_is_refused_with_the_limit_named(settings: Settings) -> None:
    small = settings.model_copy(
        update={"runtime": settings.runtime.model_copy(update={"max_record_bytes": 100_000})}
    )
    saver = ConvdbSaver(small)
    graph = counter_graph(saver)
    with pytest.raises(RecordTooLargeError) as refused:
        graph.invoke({"count": 1, "steps": ["x" * 200_000]}, config("big"))
    message = str(refused.value)
    assert "limit of 100000 bytes (CONVDB_RUNTIME__MAX_RECORD_BYTES" in message
    assert "largest values: channel '__start__' 2000" in message  # the input, refused first
    assert saver.get_tuple(config("big")) is None  # nothing was written, and the saver goes on:
    assert graph.invoke({"count": 1, "steps": ["small"]}, config("big"))["count"] == 4
    assert ConvdbSaver(small).get_tuple(config("big")) is not None
