"""The fleet runner: one member of the `<namespace>.runner` group over the inbox topic.

It owns the conversations of its assigned inbox partitions (the events/effects/state partitions
with the same number: every topic is keyed by conversation_id and co-partitioned). On assignment
it fences the partition's previous writer, restores, and resumes interrupted runs; a fenced
writer drops the partition and never writes for it again.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from typing import Any, TextIO

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as MetricCounter

from convdb.infra.kafka import group_timeouts_ms, is_incremental
from convdb.infra.liveness import AssignmentWatch
from convdb.infra.logs import log_context
from convdb.infra.ops import Health
from convdb.infra.records import coordinates
from convdb.producers.conversation import Conversation
from convdb.producers.crashpoints import CrashPoints
from convdb.producers.errors import (
    FencedError,
    PublishError,
)
from convdb.producers.fleet.intake import Intake
from convdb.producers.fleet.membership import prepare_group, runner_config
from convdb.producers.fleet.owner import FleetContext, PartitionOwner
from convdb.producers.fleet.trouble import PartitionTrouble
from convdb.schemas.topics import INBOX

logger = logging.getLogger(__name__)

DEADLINE_CHECK_S = 0.5
"""How often a runner looks for delegation deadlines that passed."""
RESTORE_THREADS = 4
"""Partitions a runner restores at once when it is given several (`FleetRunner._restore`)."""
RESTORE_SLICE_S = 0.01
"""How long a runner restores pending (quiet) conversations between two records it handles
(`_restore_slice`); a pending conversation is restored at once by its first inbox record anyway."""


class StopPoints(CrashPoints):
    """Crash points that send a configurable signal, once (SIGSTOP makes a zombie for fencing tests)."""

    def __init__(self, point: str | None = None, tool: str | None = None, signame: str = "SIGKILL") -> None:
        super().__init__(point, tool)
        self.signum = signal.Signals[signame]
        self.fired = False

    def hit(self, point: str, tool: str | None = None) -> None:
        """Signal ourselves the first time the armed point is reached."""
        if self.signum == signal.SIGKILL:
            super().hit(point, tool)
            return
        if self.fired or self.point != point or (self.tool is not None and tool != self.tool):
            return
        self.fired = True
        logger.warning("crash point %s reached (tool %s): %s", point, tool, self.signum.name)
        os.kill(os.getpid(), self.signum)


class FleetRunner:
    """Consumes the inbox, owns partitions, and writes each through its fenced transactional id."""

    def __init__(self, ctx: FleetContext, out: TextIO | None = None) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.out = out or sys.stdout
        self.inbox = INBOX.name(self.settings.namespace)
        conf = runner_config(self.settings)
        self.incremental = is_incremental(conf)
        """True when rebalances move only the partitions that change hands (callbacks get deltas)."""
        prepare_group(self.settings)
        self.consumer: Consumer = Consumer(conf)
        self.owners: dict[int, PartitionOwner] = {}
        self._revoked: dict[int, PartitionOwner] = {}
        self._takeover: list[int] = []
        self._unsynced: set[int] = set()
        """Rebuilt partitions whose inbox position is not yet back at the committed offset."""
        self._paused: set[int] = set()
        """Partitions paused until `_resync` resets them (a pause may outlive a rebalance)."""
        self._assigned: set[int] = set()
        """The partitions the group gave this runner, as of the last rebalance callback."""
        self._broken: dict[int, tuple[int, float]] = {}
        """Partitions whose writer was dropped after a failed or fenced write: rebuilt after poll
        number N, not before time T (`_rebuild_broken`), if the group still gives them to us."""
        self._polls = 0
        self._unfetched: set[int] = set()
        """Partitions assigned whose first inbox record since has not come (`first_record` line)."""
        self._epochs: dict[int, int] = {}
        """Partition -> rebalance callbacks that named it: a record fetched under an older epoch of
        its partition is stale (its position was reset, or it is another runner's now)."""
        self._pending: deque[tuple[int, Message]] = deque()
        """Fetched inbox records not handled yet, each with its partition's epoch when fetched."""
        self.restores: dict[int, int] = {}
        """Partition -> times this runner built its owner (restored its conversations): a
        partition kept through a rebalance is never restored again."""
        self.registry = CollectorRegistry()
        self._restores_metric = MetricCounter(
            "convdb_runner_partition_restores",
            "Partitions whose conversations this runner restored (assigned, or rebuilt after a failed write)",
            ["partition"],
            registry=self.registry,
        )
        self.health = Health(self.settings.ops.stall_after_s)
        self.trouble = PartitionTrouble(self.health, ctx.metrics)
        # Served with the runner's own metrics (steps, LLM use, operations); a conversation's
        # steps are progress too, so a long run keeps /healthz at 200.
        ctx.metrics.register(self.registry)
        ctx.metrics.progress = self.health.beat
        self.assignment = AssignmentWatch(
            f"runner {os.getpid()}", self.settings.ops.unassigned_after_s, self.registry, self.health.problem
        )
        self.last_activity: float | None = None
        """When the runner last did work (an assignment, a takeover, an inbox record); None
        before its first assignment (joining the group can take a session timeout)."""
        self.at_exit: dict[str, Conversation] = {}
        """The conversations it owned when `serve` returned (their objects stay readable)."""
        self.intake = Intake(ctx, self.owners, self.emit, self._touch)
        self._next_deadline_check = 0.0

    def _touch(self) -> None:
        self.last_activity = time.monotonic()

    @property
    def handled(self) -> int:
        """Inbox records handled (appended, run, or dead-lettered in a batch)."""
        return self.intake.handled

    @property
    def refused(self) -> int:
        """Inbox records dead-lettered."""
        return self.intake.refused

    def emit(self, event: str, **fields: Any) -> None:
        """One JSON status line on stdout (what tests and operators watch)."""
        print(
            json.dumps({"event": event, "at": time.time(), "pid": os.getpid(), **fields}),
            file=self.out,
            flush=True,
        )

    # -- rebalance callbacks -------------------------------------------------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Own the partitions given (all of them after an eager rebalance, the new ones after an
        incremental one): a partition this runner kept is never restored again."""
        began = time.time()
        wanted = sorted(tp.partition for tp in partitions)
        self._bump(wanted)
        # (positions start at the committed offsets; a partition paused by `_rebuild` is resumed)
        self._unsynced |= self._paused.intersection(wanted)
        self._assigned |= set(wanted)
        self._unfetched |= set(wanted)
        self.intake.forget(self._assigned)
        for p in [p for p in self.trouble.failing if p not in self._assigned]:
            self.trouble.forget(p)
        for p in wanted:
            self._broken.pop(p, None)  # it gets a new writer below: the group's word is the latest
        for p in [p for p in self._revoked if p not in wanted]:
            self._revoked.pop(p).close()
        kept = {p: owner for p in wanted if (owner := self.owners.get(p) or self._revoked.pop(p, None))}
        built, reports = self._restore([p for p in wanted if p not in kept], consumer)
        for p in wanted:
            self.owners[p] = kept.get(p) or built[p]
            self._takeover.append(p)
        self.last_activity = time.monotonic()
        self.assignment.assign((self.inbox, p) for p in wanted)
        self.ctx.metrics.partitions.set(len(self.owners))
        self.emit(
            "assigned",
            began=began,
            partitions=sorted(self._assigned),
            added=wanted,
            restored=reports,
            restores=self.restores,
        )

    def _restore(
        self, partitions: list[int], consumer: Consumer
    ) -> tuple[dict[int, PartitionOwner], list[dict[str, object]]]:
        """New owners of `partitions`, each fencing the previous writer and restoring its
        conversations, in parallel: their reads and fencing overlap, so a runner given several
        partitions at once takes them over in about the time of the largest, not of their sum."""
        if not partitions:
            return {}, []
        with ThreadPoolExecutor(min(RESTORE_THREADS, len(partitions)), "convdb-restore") as pool:
            futures = {p: pool.submit(self._build, p, consumer) for p in partitions}
        failed = [error for f in futures.values() if (error := f.exception()) is not None]
        if failed:
            for f in futures.values():
                if f.exception() is None:
                    f.result()[0].close()
            raise failed[0]
        built = {p: f.result() for p, f in futures.items()}
        for p in partitions:
            self._count_restore(p)
        return {p: owner for p, (owner, _) in built.items()}, [report for _, report in built.values()]

    def _build(self, partition: int, consumer: Consumer) -> tuple[PartitionOwner, dict[str, object]]:
        owner = PartitionOwner(self.ctx, partition, consumer)
        try:
            return owner, owner.restore()
        except BaseException:
            owner.close()
            raise

    def _count_restore(self, partition: int) -> None:
        self.restores[partition] = self.restores.get(partition, 0) + 1
        self._restores_metric.labels(str(partition)).inc()

    def _on_revoke(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Give partitions up. The run in hand is committed by now: callbacks are served between
        runs. Eagerly revoked writers are kept (nobody else can own the partitions before our next
        assignment, which may give them back); incrementally revoked ones go to another runner
        now, so they are closed."""
        gone = sorted(tp.partition for tp in partitions)
        self._bump(gone)
        self._unfetched.difference_update(gone)
        self._unsynced.difference_update(gone)
        self._assigned.difference_update(gone)
        for p in gone:
            owner = self.owners.pop(p, None)
            if owner is None:
                continue
            if self.incremental:
                self.trouble.forget(p)
                owner.close()
            else:
                self._revoked[p] = owner
        self.assignment.revoke((self.inbox, p) for p in gone)
        self.ctx.metrics.partitions.set(len(self.owners))
        self.emit("revoked", partitions=gone)

    def _on_lost(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._bump(tp.partition for tp in partitions)
        self._unfetched.difference_update(tp.partition for tp in partitions)
        self._unsynced.difference_update(tp.partition for tp in partitions)
        self._assigned.difference_update(tp.partition for tp in partitions)
        for tp in partitions:
            self.trouble.forget(tp.partition)
            owner = self.owners.pop(tp.partition, None)
            if owner is not None:
                owner.close()
        self.assignment.revoke((self.inbox, tp.partition) for tp in partitions)
        self.ctx.metrics.partitions.set(len(self.owners))
        self.emit("lost", partitions=sorted(tp.partition for tp in partitions))

    def _bump(self, partitions: Iterable[int]) -> None:
        """A rebalance named these partitions: what was fetched of them before is stale."""
        for p in partitions:
            self._epochs[p] = self._epochs.get(p, 0) + 1

    # -- the loop ------------------------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """True when no takeover, no fetched record and no conversation restore is pending (work
        the loop does before it waits in its next poll)."""
        return not self._takeover and not self._pending and not self._restoring

    @property
    def _restoring(self) -> bool:
        """True while a partition taken over has quiet conversations not restored yet."""
        return any(owner.conversations.pending for owner in self.owners.values())

    def serve(self, stop: Callable[[FleetRunner], bool], poll_timeout: float = 0.2) -> None:
        """Run until `stop(self)` is true (checked between records, once pending takeovers are done)."""
        self.consumer.subscribe(
            [self.inbox], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        try:
            while True:
                if self._broken:
                    self._rebuild_broken()
                if self._unsynced:
                    self._resync()
                self._take_over()
                self._deadlines()
                if stop(self):
                    break
                self.health.beat()
                unassigned = self.assignment.check()
                if unassigned:
                    self.emit("unassigned", detail=unassigned)
                self._fetch(0 if self._pending or self._restoring else poll_timeout)
                self._handle_next()
                self._restore_slice()
        finally:
            self.health.stopped = True
            self.at_exit = self.conversations()
            self.consumer.close()
            for owner in [*self.owners.values(), *self._revoked.values()]:
                owner.close()

    def conversations(self) -> dict[str, Conversation]:
        """The conversations of the partitions this runner owns, by id."""
        return {cid: c for owner in self.owners.values() for cid, c in owner.conversations.items()}

    def _take_over(self) -> None:
        while self._takeover:
            p = self._takeover.pop(0)
            owner = self.owners.get(p)
            if owner is None:
                continue
            convs = owner.interrupted()
            self.emit("takeover", partition=p, conversations=[c.conversation_id for c in convs])
            for conv in convs:
                work = conv.resume if conv.unobserved_actions() else conv.run
                with log_context(conversation_id=conv.conversation_id, tenant_id=conv.tenant_id):
                    if self._guarded(p, work) is False or not self._between(p):
                        break
            self.last_activity = time.monotonic()

    def _restore_slice(self) -> None:
        """Restore some pending conversations of a partition taken over (`lazy`) between the
        records handled: a takeover serves its first conversations before the quiet rest is
        restored, and the rest is restored while the runner has nothing else to do."""
        for p, owner in list(self.owners.items()):
            if owner.conversations.pending:
                if not owner.restore_pending(RESTORE_SLICE_S):
                    self.emit("restored_all", partition=p, conversations=len(owner.conversations))
                return

    def _deadlines(self) -> None:
        """Parents whose delegation deadline passed observe what their children reported by then.

        Checked twice a second; a pending deadline counts as work (the runner is not idle).
        """
        now = time.monotonic()
        if now < self._next_deadline_check:
            return
        self._next_deadline_check = now + DEADLINE_CHECK_S
        wall = datetime.now(UTC)
        for p, owner in list(self.owners.items()):
            for conv in list(owner.conversations.values()):
                if conv.status != "running":
                    continue
                delegations = conv.effects.delegations
                deadlines = [d for a in delegations.waiting() if (d := delegations.deadline(a)) is not None]
                if not deadlines:
                    continue
                self._touch()
                if min(deadlines) > wall:
                    continue
                with log_context(conversation_id=conv.conversation_id, tenant_id=conv.tenant_id):
                    if self._guarded(p, conv.resume) is False:
                        break

    def _guarded(self, partition: int, work: Callable[[], object]) -> bool:
        """Run work for a partition; on a fenced or failed write, set the partition aside.

        Every failure but a fence is retried from the log after a wait that grows while the
        partition commits nothing (`PartitionTrouble`, which also reports it as stalled). A
        failure that is a record's own fault was recorded by the inbox handling first, so the
        retry dead-letters that record instead of failing again.
        """
        owner = self.owners.get(partition)
        if owner is None:
            return False
        commits = owner.sink.commits
        try:
            work()
        except FencedError as exc:
            logger.error(
                "FENCED: partition %d (transactional.id %s) was taken by another writer; dropping its "
                "%d conversation(s) and writing nothing more for it unless the group still gives it to "
                "this runner a session timeout from now: %s",
                partition,
                owner.transactional_id,
                len(owner.conversations),
                exc,
            )
            self.emit("fenced", partition=partition, transactional_id=owner.transactional_id)
            self._set_aside(partition, group_timeouts_ms(self.settings)[0] / 1000)
            return False
        except Exception as exc:  # noqa: BLE001 - a write or a record failed: rebuilt from the log
            failure: Exception | None = exc
        else:
            failure = None
        if owner.sink.commits > commits:
            self.trouble.progressed(partition)
        if failure is None:
            return True
        wait = self.trouble.failed(partition, failure)
        logger.error(
            "partition %d: write failed, restoring it from the log in %.1fs: %s",
            partition,
            wait,
            failure,
            exc_info=None if isinstance(failure, PublishError) else failure,  # a bug: its traceback
        )
        self.emit(
            "write_failed", partition=partition, error=f"{type(failure).__name__}: {str(failure)[:300]}"
        )
        self._set_aside(partition, wait)
        return False

    def _set_aside(self, partition: int, wait_s: float) -> None:
        """Drop a partition's writer and pause it; it is rebuilt after the next poll, `wait_s` on.

        The poll in between delivers a rebalance that happened meanwhile (a write blocked past
        our session, or a fence by the partition's new owner), so a runner that lost the
        partition does not rebuild it and fence its new owner. A fenced writer waits a whole
        session: if the group still gives us the partition then, the fence came from a zombie.
        """
        owner = self.owners.pop(partition, None)
        if owner is not None:
            owner.close()
        self._broken[partition] = (self._polls, time.monotonic() + wait_s)
        self._paused.add(partition)
        try:
            self.consumer.pause([TopicPartition(self.inbox, partition)])
        except KafkaException:
            pass  # not assigned any more: the next assignment starts at the committed offset

    def _rebuild_broken(self) -> None:
        """Rebuild the set-aside partitions that are due and still ours (see `_set_aside`)."""
        now = time.monotonic()
        for partition, (polls, not_before) in sorted(self._broken.items()):
            if partition not in self._assigned:
                del self._broken[partition]
                continue
            if self._polls <= polls or now < not_before:
                continue
            try:
                self._rebuild(partition)
            except Exception as exc:  # noqa: BLE001 - e.g. init_transactions timed out: tried again
                wait = max(self.trouble.failed(partition, exc), 1.0)
                logger.error("partition %d: not rebuilt yet (next try in %.1fs): %s", partition, wait, exc)
                self._broken[partition] = (self._polls, time.monotonic() + wait)
                continue
            del self._broken[partition]

    def _rebuild(self, partition: int) -> None:
        """A new writer for the partition (fencing the old one), its conversations restored from
        the log, its inbox read again from the committed offset (`_resync`)."""
        owner = PartitionOwner(self.ctx, partition, self.consumer)
        try:
            report = owner.restore()
        except BaseException:
            owner.close()
            raise
        self.emit("restored", **report)
        self._count_restore(partition)
        self.owners[partition] = owner
        self._takeover.append(partition)
        self._unsynced.add(partition)

    def _resync(self) -> None:
        """Seek rebuilt partitions back to their committed offsets, and resume them; one whose
        offset cannot be read now (the group coordinator died) stays paused until a later turn."""
        for partition in sorted(self._unsynced):
            tp = TopicPartition(self.inbox, partition)
            try:
                committed = self.consumer.committed([tp], timeout=10)
                self.consumer.seek(TopicPartition(self.inbox, partition, max(committed[0].offset, 0)))
                self.consumer.resume([tp])
            except KafkaException as exc:
                logger.warning("partition %d: inbox position not reset yet: %s", partition, exc.args[0])
                continue
            self._unsynced.discard(partition)
            self._paused.discard(partition)

    def _fetch(self, timeout: float) -> None:
        """Poll once (rebalance callbacks are served here), and queue what came with what the
        consumer already holds, up to `inbox_batch` records pending."""
        msg = self.consumer.poll(timeout)
        self._polls += 1
        if msg is None:
            return
        room = self.settings.runtime.inbox_batch - len(self._pending) - 1
        self._queue([msg, *(self.consumer.consume(room, 0) if room > 0 else [])])

    def _queue(self, msgs: list[Message]) -> None:
        for msg in msgs:
            err = msg.error()
            if err is not None:
                self._transport_error(err)
                continue
            partition = coordinates(msg)[1]
            if partition in self._unfetched:
                self._first_record(partition, msg)
            self._pending.append((self._epochs.get(partition, 0), msg))

    def _first_record(self, partition: int, msg: Message) -> None:
        """Say when a partition's first inbox record since its assignment came, and when it was
        written: how long a takeover kept records waiting is told apart from how long none came."""
        self._unfetched.discard(partition)
        kind, written_ms = msg.timestamp()
        self.emit(
            "first_record",
            partition=partition,
            offset=coordinates(msg)[2],
            written=written_ms / 1000 if kind != TIMESTAMP_NOT_AVAILABLE else None,
        )

    def _between(self, partition: int) -> bool:
        """Serve rebalance callbacks between two conversations' work (`_fetch` without waiting);
        True when `partition` is still ours as it was (a rebalance that moved it ends its work:
        its next owner reads on from the committed offset)."""
        epoch = self._epochs.get(partition, 0)
        self._fetch(0)
        return self._epochs.get(partition, 0) == epoch and partition in self.owners

    def _handle_next(self) -> None:
        """Handle the pending records of the first pending record's partition, in inbox order, as
        one batch (`InboxBatch`); stale records (fetched before a rebalance moved or reset their
        partition) are dropped, the consumer reads them again from the committed offset.

        Partitions take turns: after a run, when other partitions' records wait, the rest of this
        partition's go behind theirs (`_requeue`), so a backlog (a partition taken over, with
        records queued while it had no runner) delays each other partition by one run, not by
        all of its own."""
        if not self._pending:
            return
        partition = coordinates(self._pending[0][1])[1]
        mine = [(e, m) for e, m in self._pending if coordinates(m)[1] == partition]
        self._pending = deque((e, m) for e, m in self._pending if coordinates(m)[1] != partition)
        epoch = self._epochs.get(partition, 0)
        records = [m for e, m in mine if e == epoch]
        if not records or partition not in self.owners:
            return
        left: list[Message] = []

        def work() -> None:
            between = partial(self._between, partition)
            others = partial(self._others_wait, partition)
            left.extend(self.intake.handle_partition(partition, records, between, others))

        if self._guarded(partition, work) and left:
            self._requeue(partition, epoch, left)

    def _others_wait(self, partition: int) -> bool:
        """True when records of another partition than `partition` are pending."""
        return any(coordinates(m)[1] != partition for _, m in self._pending)

    def _requeue(self, partition: int, epoch: int, records: list[Message]) -> None:
        """Put a partition's unhandled records back: behind the other partitions' records, ahead
        of its own fetched meanwhile (a partition's records are handled in inbox order)."""
        if self._epochs.get(partition, 0) != epoch:
            return  # moved or reset meanwhile: read again from the committed offset
        queue = list(self._pending)
        at = next((i for i, (_, m) in enumerate(queue) if coordinates(m)[1] == partition), len(queue))
        queue[at:at] = [(epoch, m) for m in records]
        self._pending = deque(queue)

    def _transport_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF or err.retriable():
            return
        logger.error("inbox consumer error: %s", err.str())


def serve_until(
    ctx: FleetContext, done: Callable[[FleetRunner], bool], timeout: float, out: TextIO | None = None
) -> FleetRunner:
    """A runner in this process (`convdb run`, `convdb demo`, tests) until `done(runner)`, or until
    `timeout` seconds have passed; the caller reads what it needs from `runner.at_exit`."""
    runner = FleetRunner(ctx, out=out or io.StringIO())
    deadline = time.monotonic() + timeout
    runner.serve(lambda r: done(r) or time.monotonic() > deadline)
    return runner
