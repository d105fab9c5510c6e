"""The pure fold of a LangGraph thread: LangGraph's rules for writes, latest, tombstones, blobs."""

from __future__ import annotations

from datetime import UTC, datetime

from convdb.projections import graph
from convdb.schemas.graph import GraphCheckpoint, GraphDeleted, GraphWrites

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def checkpoint(cid: str, ns: str = "", parent: str | None = None, **blobs: bytes) -> GraphCheckpoint:
    return GraphCheckpoint(
        id=f"r-{ns}-{cid}",
        conversation_id="t",
        tenant_id="x",
        timestamp=T0,
        checkpoint_ns=ns,
        checkpoint_id=cid,
        parent_checkpoint_id=parent,
        checkpoint_type="msgpack",
        checkpoint=b"",
        metadata_type="msgpack",
        metadata=b"",
        blob_channels=tuple(blobs),
        blob_versions=tuple(f"v-{cid}" for _ in blobs),
        blob_types=tuple("msgpack" for _ in blobs),
        blob_values=tuple(blobs.values()),
    )


def writes(cid: str, task: str, *rows: tuple[int, str, bytes], path: str = "") -> GraphWrites:
    return GraphWrites(
        id=f"w-{cid}-{task}-{rows[0][0]}",
        conversation_id="t",
        tenant_id="x",
        timestamp=T0,
        checkpoint_id=cid,
        task_id=task,
        task_path=path,
        write_indexes=tuple(r[0] for r in rows),
        channels=tuple(r[1] for r in rows),
        value_types=tuple("msgpack" for _ in rows),
        values=tuple(r[2] for r in rows),
    )


def fold(*records: GraphCheckpoint | GraphWrites | GraphDeleted) -> graph.ThreadGraph:
    state = graph.EMPTY
    for record in records:
        state = graph.fold(state, record)
    return state


def test_latest_is_the_greatest_id_of_its_namespace_and_history_is_newest_first() -> None:
    state = fold(
        checkpoint("1"), checkpoint("3", parent="1"), checkpoint("2", parent="1"), checkpoint("9", ns="s")
    )
    assert graph.latest(state, "").checkpoint_id == "3"  # type: ignore[union-attr]
    assert [r.checkpoint_id for r in graph.history(state, "")] == ["3", "2", "1"]
    assert graph.namespaces(state) == ["", "s"] and graph.latest(state, "none") is None


def test_a_regular_write_is_kept_once_and_a_special_write_overwrites() -> None:
    state = fold(
        writes("1", "task", (0, "a", b"first"), (-1, "__error__", b"e1")),
        writes("1", "task", (0, "a", b"again"), (-1, "__error__", b"e2")),
    )
    got = {(w.index, w.channel): w.value for w in graph.pending_writes(state, ("", "1"))}
    assert got == {(0, "a"): b"first", (-1, "__error__"): b"e2"}
    assert graph.kept_indexes(state, ("", "1"), "task", [0, 1, -3]) == [False, True, True]


def test_pending_writes_read_back_in_task_path_task_id_index_order() -> None:
    state = fold(
        writes("1", "b", (1, "x", b"b1"), (0, "x", b"b0"), path="~p, 1"),
        writes("1", "z", (0, "x", b"z0"), path="~p, 0"),
        writes("1", "a", (0, "x", b"a0"), path="~p, 1"),
    )
    assert [w.value for w in graph.pending_writes(state, ("", "1"))] == [b"z0", b"a0", b"b0", b"b1"]


def test_blobs_of_two_branches_never_overwrite_each_other() -> None:
    state = fold(checkpoint("1", chan=b"root"), checkpoint("2", parent="1", chan=b"left"))
    state = graph.fold(state, checkpoint("3", parent="1", chan=b"right"))
    assert graph.blob(state, "", "chan", "v-2") == ("msgpack", b"left")
    assert graph.blob(state, "", "chan", "v-3") == ("msgpack", b"right")


def test_tombstones_hide_checkpoints_and_their_writes() -> None:
    state = fold(checkpoint("1", chan=b"v"), checkpoint("2", parent="1"), writes("1", "t", (0, "a", b"x")))
    pruned = graph.fold(
        state,
        GraphDeleted(
            id="d",
            conversation_id="t",
            tenant_id="x",
            timestamp=T0,
            reason="prune",
            checkpoint_namespaces=("",),
            checkpoint_ids=("1",),
        ),
    )
    assert [r.checkpoint_id for r in graph.history(pruned, "")] == ["2"]
    assert graph.pending_writes(pruned, ("", "1")) == []
    assert graph.blob(pruned, "", "chan", "v-1") is not None  # a kept checkpoint may still read it
    gone = graph.fold(
        state,
        GraphDeleted(id="e", conversation_id="t", tenant_id="x", timestamp=T0, reason="x", whole_thread=True),
    )
    assert gone.empty and graph.latest(gone, "") is None


def test_ancestors_walk_the_parent_chain_of_a_branch_only() -> None:
    state = fold(
        checkpoint("1"), checkpoint("2", parent="1"), checkpoint("3", parent="2"), checkpoint("4", parent="2")
    )
    assert [r.checkpoint_id for r in graph.ancestors(state, "", "3")] == ["2", "1"]
    assert [r.checkpoint_id for r in graph.ancestors(state, "", None)] == ["2", "1"]  # the latest is "4"
    assert graph.ancestors(state, "", "missing") == [] and graph.ancestors(state, "", "1") == []


def test_a_fork_is_a_root_checkpoint_that_does_not_extend_the_latest_one() -> None:
    state = fold(checkpoint("1"), checkpoint("2", parent="1"), checkpoint("3", parent="2"))
    assert not graph.is_fork(graph.EMPTY, checkpoint("1"))  # a thread's first checkpoint
    assert not graph.is_fork(state, checkpoint("4", parent="3"))  # extends the latest
    assert not graph.is_fork(state, checkpoint("3", parent="2"))  # the latest, put again
    assert graph.is_fork(state, checkpoint("4", parent="1"))  # update_state / __copy__ of an old one
    assert graph.is_fork(state, checkpoint("4"))  # a copy of the first checkpoint: no parent
    assert not graph.is_fork(state, checkpoint("4", ns="sub", parent="1"))  # subgraphs are no branch
