"""Bounded takeover: a new owner restores only the conversations that may have work; the quiet
rest is restored when first needed, to the same state, and the snapshots written meanwhile keep
every conversation restorable."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from convdb.infra.partitioner import partition_for
from convdb.infra.settings import Settings
from convdb.producers.conversation import Conversation
from convdb.producers.fleet.owner import FleetContext, PartitionOwner
from convdb.producers.fleet.service import build_context
from tests.fleet._support import fleet_settings
from tests.producers._support import events

# The logic is the runner's, not the broker's: the default run uses one broker.
pytestmark = [pytest.mark.kafka, pytest.mark.brokers, pytest.mark.slow_on("apache")]

QUIET = 6


def ids_in(partition: int, partitions: int, n: int) -> list[str]:
    """`n` fresh conversation ids that map to `partition`."""
    found: list[str] = []
    while len(found) < n:
        cid = f"lazy-{uuid.uuid4().hex[:8]}"
        if partition_for(cid, partitions) == partition:
            found.append(cid)
    return found


def state_of(conv: Conversation) -> tuple[object, ...]:
    """What a restore must give back: seq, status, active leaf and the visible branch."""
    view = conv.state.view
    return view.last_seq, conv.status, view.active_leaf, [e.id for e in view.visible]


def new_machine(settings: Settings, tmp_path: Path, name: str) -> FleetContext:
    """A runner context with an empty data dir: it restores from the state topic."""
    return build_context(fleet_settings(settings, tmp_path / name), tmp_path / "ws", None, None)


def test_quiet_conversations_are_restored_when_first_needed(settings: Settings, tmp_path: Path) -> None:
    ctx = new_machine(settings, tmp_path, "writer")
    writer = PartitionOwner(ctx, 0, None)
    writer.restore()
    *quiet, busy = ids_in(0, settings.partitions, QUIET + 1)
    for cid in quiet:
        conv = writer.create(cid, "t1")
        conv.send_message("hello")
        assert conv.run() == "finished"
    writer.create(busy, "t1").send_message("a question the crash left unanswered")
    expected = {cid: state_of(c) for cid, c in writer.conversations.items()}

    taker = PartitionOwner(new_machine(settings, tmp_path, "taker"), 0, None)  # fences the writer
    report = taker.restore()
    assert (report["conversations"], report["restored_now"], report["pending"]) == (QUIET + 1, 1, QUIET)
    assert [c.conversation_id for c in taker.interrupted()] == [busy]
    assert all(cid in taker.conversations for cid in quiet)  # pending ones exist: never created anew

    # A lookup restores a pending conversation, as it was.
    first = taker.conversations.get(quiet[0])
    assert first is not None and state_of(first) == expected[quiet[0]]
    assert quiet[0] not in taker.conversations.pending
    # It carries on while the others are still pending: gap-free, and its snapshot keeps them.
    assert first.send_message("one more thing") and first.run() == "finished"
    expected[quiet[0]] = state_of(first)
    assert taker.conversations.pending
    assert taker.interrupted()[0].run() == "finished"
    expected[busy] = state_of(taker.conversations[busy])
    # The rest in slices (at least one each), all to the states written.
    left = [taker.restore_pending(0.0) for _ in quiet[1:]]
    assert left == list(range(QUIET - 2, -1, -1))
    assert {cid: state_of(c) for cid, c in taker.conversations.items()} == expected

    # A third machine restores every one of them from what the taker wrote.
    third = PartitionOwner(new_machine(settings, tmp_path, "third"), 0, None)
    third.restore()
    assert third.restore_pending(60.0) == 0
    assert {cid: state_of(c) for cid, c in third.conversations.items()} == expected
    for cid in (quiet[0], busy):
        seqs = [e.seq for e in events(settings, cid)]
        assert seqs == list(range(1, len(seqs) + 1))
    for owner in (writer, taker, third):
        owner.close()
