"""One projector/store contract suite, run against SQLite and PostgreSQL (STYLE §8 contract suites).

The PostgreSQL subclass needs a server at CONVDB_TEST_PG_URL (default
postgresql://postgres@127.0.0.1:5432/test): without one it fails under CI and is skipped,
with the reason, elsewhere.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from sqlalchemy.engine import Engine

from convdb.consumers import plugins
from convdb.consumers.base import ConsumedRecord, TableProjector
from convdb.consumers.index import search
from convdb.consumers.stats import StatsConsumer, load_states
from convdb.consumers.store import (
    ensure_projections,
    event_payloads,
    lock_offsets,
    offsets,
    open_engine,
    store_offsets,
)
from convdb.consumers.titles.tables import load_states as load_titles
from convdb.consumers.views import ViewsConsumer, load_state
from convdb.consumers.views.queries import branch_events, branch_head
from convdb.consumers.views.tables import conversations as views_table
from convdb.projections import stats, titles, view
from convdb.projections.index import SearchQuery, index_row
from convdb.schemas.events import ActiveLeafChangedEvent, Event, TitleEvent
from convdb.schemas.topics import EVENTS
from tests.consumers.builders import conversation
from tests.consumers.conftest import drop_pg_schema, make_pg_schema, require_pg
from tests.strategies import batch_splits, interleaved_conversations, split, with_redeliveries


def records_of(events: Sequence[Event], start: int = 0) -> list[ConsumedRecord]:
    """Events as consumed records of partition 0, offsets from `start`."""
    return [ConsumedRecord("ev", 0, start + i, 0, e.conversation_id, e) for i, e in enumerate(events)]


def store_projectors() -> list[type[TableProjector]]:
    """Every installed `convdb.consumers` plugin that folds the events topic into store tables.

    Found through the entry points, as `convdb consume` finds them, so that a new projector is
    under the contract the day it is registered. The archive copies records to object storage:
    it has no tables, and is not a `TableProjector`.
    """
    found = [entry.load() for entry in plugins.available().values()]
    return [
        cls
        for cls in found
        if isinstance(cls, type) and issubclass(cls, TableProjector) and EVENTS in cls.topics
    ]


def projectors(views_cache: int = 50_000) -> list[TableProjector]:
    """A fresh instance of every store projector (the views' cache of full states: `views_cache` events)."""
    return [cls(cache_events=views_cache) if cls is ViewsConsumer else cls() for cls in store_projectors()]


def test_the_contract_covers_every_projector_of_the_read_side() -> None:
    """What `convdb consume all` runs is found (an empty discovery would make the suite vacuous)."""
    assert {cls.name for cls in store_projectors()} >= set(plugins.DEFAULT_GROUP)


def apply_batches(
    engine: Engine, batches: Sequence[Sequence[ConsumedRecord]], views_cache: int = 50_000
) -> dict[str, dict[str, str]]:
    """Apply batches (one transaction each) with fresh projectors; returns every projector's digests."""
    procs = projectors(views_cache)
    ensure_projections(engine, procs)
    for batch in batches:
        with engine.begin() as conn:
            for p in procs:
                p.apply(conn, batch)
    with engine.connect() as conn:
        return {p.name: p.digests(conn) for p in procs}


class StoreContract:
    """What every store backend must do; subclasses provide `fresh_store`."""

    @contextmanager
    def fresh_store(self) -> Iterator[Engine]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    )
    @given(
        data=interleaved_conversations(max_conversations=3, max_size=20).flatmap(
            lambda evs: with_redeliveries(evs).flatmap(
                lambda full: batch_splits(len(full)).map(lambda c: (full, c))
            )
        )
    )
    def test_any_batch_split_equals_one_batch_and_the_pure_folds(
        self, data: tuple[list[Event], list[int]]
    ) -> None:
        events, cuts = data
        records = records_of(events)
        with self.fresh_store() as one, self.fresh_store() as many:
            whole = apply_batches(one, [records])
            parts = apply_batches(
                many,
                [
                    records_of(b, start=sum(len(x) for x in split(events, cuts)[:i]))
                    for i, b in enumerate(split(events, cuts))
                ],
            )
            assert whole == parts
            self.assert_equals_pure_folds(many, events)

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    )
    @given(
        data=interleaved_conversations(max_conversations=3, max_size=20).flatmap(
            lambda evs: with_redeliveries(evs).flatmap(
                lambda full: batch_splits(len(full)).map(lambda c: (full, c))
            )
        )
    )
    def test_views_without_a_cache_rebuild_from_the_store_to_the_same_result(
        self, data: tuple[list[Event], list[int]]
    ) -> None:
        """Every full fold then reloads its state from `views_events`: same rows as with the cache."""
        events, cuts = data
        starts = [sum(len(x) for x in split(events, cuts)[:i]) for i in range(len(split(events, cuts)))]
        batches = [records_of(b, start=s) for b, s in zip(split(events, cuts), starts, strict=True)]
        with self.fresh_store() as cached, self.fresh_store() as uncached:
            assert apply_batches(cached, batches) == apply_batches(uncached, batches, views_cache=0)
            self.assert_equals_pure_folds(uncached, events)

    @settings(
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
    )
    @given(
        data=interleaved_conversations(max_conversations=3, max_size=20).flatmap(
            lambda evs: with_redeliveries(evs).flatmap(
                lambda full: batch_splits(len(full)).map(lambda c: (full, c))
            )
        )
    )
    def test_answers_show_each_event_from_its_one_stored_payload(
        self, data: tuple[list[Event], list[int]]
    ) -> None:
        """Search and the views' branch window answer with the events themselves, as the pure folds
        say, however the log was split and redelivered; each event's payload is stored once,
        whichever projectors show it (redeliveries, at other offsets, are stored by none)."""
        events, cuts = data
        parts = split(events, cuts)
        starts = [sum(len(x) for x in parts[:i]) for i in range(len(parts))]
        with self.fresh_store() as engine:
            apply_batches(engine, [records_of(b, start=s) for b, s in zip(parts, starts, strict=True)])
            with engine.connect() as conn:
                for conv in sorted({e.conversation_id for e in events}):
                    self.assert_answers_as_pure_folds(conn, [e for e in events if e.conversation_id == conv])
                stored = conn.execute(sa.select(sa.func.count()).select_from(event_payloads)).scalar()
            assert stored == len({e.id for e in events})

    @staticmethod
    def assert_answers_as_pure_folds(conn: sa.Connection, mine: list[Event]) -> None:
        conv, tenant = mine[0].conversation_id, mine[0].tenant_id
        pure_view = view.fold_all(view.initial(conv), mine)
        head = branch_head(conn, tenant, conv)
        assert head is not None
        shown = [json.loads(e.model_dump_json()) for e in view.active_branch(pure_view)]
        assert branch_events(conn, conv, head.segments) == shown
        once = list({e.id: e for e in reversed(mine)}.values())  # the first delivery of each id
        once.sort(key=lambda e: (e.timestamp, e.conversation_id, e.seq, e.id))
        page = search(conn, SearchQuery(tenant_id=tenant, conversation_id=conv, limit=500))
        rows = [index_row(e) for e in once]
        assert [json.loads(r["payload"]) for r in page.rows] == [r.payload for r in rows]
        assert [r["text"] for r in page.rows] == [r.text for r in rows]

    @pytest.mark.parametrize("views_cache", [50_000, 0])
    def test_an_annotation_redelivered_in_a_later_batch_is_shown_and_stored_once(
        self, views_cache: int
    ) -> None:
        """A title's id is deterministic, so a redelivery at another offset repeats it: the views'
        short way (tail appends) must not log it again, with or without a cached full view (a
        generated history found it storing the payload twice and showing a shorter branch)."""
        events = conversation("a", 5)
        title = TitleEvent(
            id="a:title-1",
            conversation_id="a",
            tenant_id=events[0].tenant_id,
            seq=0,
            timestamp=events[2].timestamp,
            source="hook",
            title="Notes",
            origin="first_message",
        )
        log = [*events[:3], title, events[3], title, events[4]]
        batches = [records_of(log[:4]), records_of(log[4:], start=4)]
        with self.fresh_store() as engine:
            apply_batches(engine, batches, views_cache=views_cache)
            with engine.connect() as conn:
                self.assert_answers_as_pure_folds(conn, log)
                stored = conn.execute(sa.select(sa.func.count()).select_from(event_payloads)).scalar()
            assert stored == len({e.id for e in log}) == 6

    def test_a_retried_event_with_the_leafs_id_is_folded_as_the_pure_fold_does(self) -> None:
        """The leaf's id again on the next seq: the tip sees it, the full fold ignores it."""
        events = conversation("r", 4)
        retried = events[3].model_copy(update={"id": events[2].id})
        log = [*events[:3], retried, events[3].model_copy(update={"seq": 5, "parent_id": events[2].id})]
        with self.fresh_store() as engine:
            ensure_projections(engine, [ViewsConsumer()])
            with engine.begin() as conn:
                ViewsConsumer().apply(conn, records_of(log[:3]))
            with engine.begin() as conn:
                rejected = ViewsConsumer().apply(conn, records_of(log[3:], start=3))
            assert [r.record.offset for r in rejected] == [4]  # after the ignored one: a gap
            self.assert_equals_pure_folds_of_views(engine, log[:4])

    def test_an_older_reused_id_makes_later_full_folds_refuse_not_crash(self) -> None:
        """The tip cannot see an older id reused (a producer bug): the log no longer folds back to
        the row, and what needs the full view is refused with the reason instead."""
        events = conversation("o", 5)
        reused = events[3].model_copy(update={"id": events[1].id})
        switch = ActiveLeafChangedEvent(
            id="switch", conversation_id="o", tenant_id="t1", seq=5, timestamp=events[4].timestamp,
            source="user", parent_id=reused.id, leaf_event_id=events[0].id,
        )  # fmt: skip
        with self.fresh_store() as engine:
            ensure_projections(engine, [ViewsConsumer()])
            for batch in (records_of(events[:3]), records_of([reused], start=3)):
                with engine.begin() as conn:
                    assert ViewsConsumer().apply(conn, batch) == []
            with engine.begin() as conn:
                rejected = ViewsConsumer().apply(conn, records_of([switch], start=4))
            assert [type(r.error).__name__ for r in rejected] == ["StoredViewError"]
            assert "reused an earlier event's id" in str(rejected[0].error)

    def assert_equals_pure_folds_of_views(self, engine: Engine, events: list[Event]) -> None:
        conv = events[0].conversation_id
        pure_view = view.fold_all(view.initial(conv), events)
        with engine.connect() as conn:
            assert load_state(conn, conv) == pure_view
            assert ViewsConsumer().digests(conn)[conv] == view.digest(pure_view)
            assert self.live_branch_ids(conn, conv) == [e.id for e in view.active_branch(pure_view)]

    def assert_equals_pure_folds(self, engine: Engine, events: list[Event]) -> None:
        convs = sorted({e.conversation_id for e in events})
        with engine.connect() as conn:
            stored_stats = load_states(conn, convs)
            stored_titles = load_titles(conn, convs)
            for conv in convs:
                mine = [e for e in events if e.conversation_id == conv]
                pure_view = view.fold_all(view.initial(conv), mine)
                assert load_state(conn, conv).visible == pure_view.visible
                digest = ViewsConsumer().digests(conn)[conv]
                assert digest == view.digest(pure_view)
                assert self.live_branch_ids(conn, conv) == [e.id for e in view.active_branch(pure_view)]
                assert stored_stats[conv] == stats.fold_all(stats.initial(conv), mine)
                assert stored_titles[conv][1] == titles.fold_all(titles.initial(conv), mine)

    @staticmethod
    def live_branch_ids(conn: sa.Connection, conv: str) -> list[str]:
        from convdb.consumers.views.tables import events as log

        branch = json.loads(
            conn.execute(
                sa.select(views_table.c.branch).where(views_table.c.conversation_id == conv)
            ).scalar()
        )
        ids = dict(
            conn.execute(sa.select(log.c.position, log.c.event_id).where(log.c.conversation_id == conv)).all()
        )
        return [ids[p] for first, last in branch for p in range(first, last + 1)]

    def test_a_gap_is_rejected_with_its_records_and_none_of_them_is_written(self) -> None:
        events = conversation("g", 5)
        records = records_of(events[:2] + events[3:])
        with self.fresh_store() as engine:
            ensure_projections(engine, [StatsConsumer()])
            with engine.begin() as conn:
                rejected = StatsConsumer().apply(conn, records)
            assert [r.record.value.seq for r in rejected] == [4, 5]  # type: ignore[attr-defined]
            with engine.connect() as conn:
                assert load_states(conn, ["g"]) == {"g": stats.fold_all(stats.initial("g"), events[:2])}

    def test_version_change_drops_tables_and_forgets_offsets(self) -> None:
        with self.fresh_store() as engine:
            assert ensure_projections(engine, [StatsConsumer()]) == []
            with engine.begin() as conn:
                StatsConsumer().apply(conn, records_of(conversation("v", 3)))
                store_offsets(conn, {("stats", "ev", 0): 3})
            bumped = StatsConsumer()
            bumped.version = StatsConsumer.version + 1
            assert ensure_projections(engine, [bumped]) == ["stats"]
            with engine.connect() as conn:
                assert load_states(conn, ["v"]) == {}
                assert conn.execute(sa.select(offsets).where(offsets.c.consumer == "stats")).all() == []
            assert ensure_projections(engine, [bumped]) == []

    def test_offsets_are_locked_created_and_advanced(self) -> None:
        with self.fresh_store() as engine:
            ensure_projections(engine, [])
            keys = [("views", "ev", 0), ("views", "ev", 1)]
            with engine.begin() as conn:
                assert lock_offsets(conn, keys) == {k: -1 for k in keys}
                store_offsets(conn, {keys[0]: 10})
            with engine.begin() as conn:
                assert lock_offsets(conn, keys) == {keys[0]: 10, keys[1]: -1}


class TestSQLiteStore(StoreContract):
    """The contract on a SQLite file."""

    @contextmanager
    def fresh_store(self) -> Iterator[Engine]:
        with tempfile.TemporaryDirectory() as tmp:
            engine = open_engine(f"sqlite:///{Path(tmp) / 'store.db'}")
            try:
                yield engine
            finally:
                engine.dispose()


@pytest.mark.postgres
class TestPostgresStore(StoreContract):
    """The contract on PostgreSQL, one schema per store."""

    @pytest.fixture(autouse=True)
    def _server(self) -> None:
        require_pg()

    @contextmanager
    def fresh_store(self) -> Iterator[Engine]:
        url, schema = make_pg_schema()
        engine = open_engine(url)
        try:
            yield engine
        finally:
            engine.dispose()
            drop_pg_schema(schema)
