"""Finding the records a store refuses, and telling a record's error from the store's."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy.exc as sa_exc
from hypothesis import given
from hypothesis import strategies as st

from convdb.consumers._isolate import culprits, is_infrastructure, refusal, refused, without
from convdb.infra.errors import PublishError


def attempts(log: list[int], limit: int, poison: set[int]):  # type: ignore[no-untyped-def]
    """A store that refuses a part holding a poison record, or whose running sum passes `limit`."""

    def attempt(part: Sequence[int]) -> BaseException | None:
        log.append(len(part))
        total = 0
        for value in part:
            total += value
            if value in poison or total > limit:
                return OverflowError(f"at {value}")
        return None

    return attempt


@given(st.lists(st.integers(1, 50), min_size=1, max_size=60, unique=True), st.data())
def test_every_record_that_fails_alone_is_found(values: list[int], data: st.DataObject) -> None:
    poison = set(data.draw(st.lists(st.sampled_from(values), max_size=4)))
    found = refused(values, attempts([], 10**9, poison))
    assert [v for v, _ in found] == [v for v in values if v in poison]
    assert all(isinstance(e, OverflowError) for _, e in found)


@given(st.lists(st.integers(1, 50), min_size=2, max_size=60))
def test_a_sum_over_several_records_names_the_record_that_passes_the_bound(values: list[int]) -> None:
    limit = max(max(values), sum(values) // 2)  # no record fails alone; some prefix does
    found = refused(values, attempts([], limit, set()))
    sums = [sum(values[: i + 1]) for i in range(len(values))]
    first_over = next((i for i, s in enumerate(sums) if s > limit), None)
    if first_over is None:
        assert found == []
    else:
        ((value, error),) = found
        assert value == values[first_over] and f"at {value}" in str(error)
        # applied without it, the rest passes or fails again further on: progress either way


def test_nothing_is_refused_when_the_batch_applies_again() -> None:
    log: list[int] = []
    assert refused([1, 2, 3], attempts(log, 100, set())) == []
    assert log == [3, 3]  # the whole batch, tried by halves and by prefix: both apply


def test_the_errors_of_the_infrastructure_are_not_a_records() -> None:
    def dbapi(cls: type[sa_exc.DBAPIError], invalidated: bool = False) -> sa_exc.DBAPIError:
        return cls("INSERT", {}, Exception("x"), connection_invalidated=invalidated)

    for error in (
        dbapi(sa_exc.OperationalError),  # refused connection, locked database, full disk
        dbapi(sa_exc.ProgrammingError),  # a missing table: every record would fail
        dbapi(sa_exc.InternalError),
        dbapi(sa_exc.DataError, invalidated=True),
        PublishError("dlq not acknowledged"),
        OSError("disk I/O error"),
    ):
        assert is_infrastructure(error), error
    for error in (
        dbapi(sa_exc.DataError),  # bigint out of range, NUL, a value too long
        dbapi(sa_exc.IntegrityError),  # NOT NULL (SQLite stores a NaN as NULL)
        OverflowError("Python int too large to convert to SQLite INTEGER"),
        ValueError("x"),
        RecursionError("deep"),
    ):
        assert not is_infrastructure(error), error


def test_the_culprits_of_an_infrastructure_error_are_none_and_no_part_is_tried() -> None:
    log: list[int] = []
    outage = sa_exc.OperationalError("INSERT", {}, Exception("connection refused"))
    assert culprits(outage, [1, 2, 3], attempts(log, 100, {2})) == []
    assert log == []
    ((value, error),) = culprits(OverflowError("at 2"), [1, 2, 3], attempts(log, 100, {2}))
    assert value == 2 and str(error) == "at 2"


def test_the_batch_without_its_culprits_keeps_the_others_in_order() -> None:
    records = [[1], [2], [1]]  # equal but distinct records: identity decides
    assert without(records, [(records[0], ValueError("x"))]) == [[2], [1]]
    assert without(records, [(records[0], ValueError("x"))])[1] is records[2]


def test_a_refusal_names_the_stores_error_by_its_first_line_and_keeps_it_as_cause() -> None:
    error = sa_exc.DataError("INSERT INTO t VALUES (?)", {}, Exception("integer out of range"))
    refused_by = refusal(error)
    expected = "the store refuses it: DataError: (builtins.Exception) integer out of range"
    assert str(refused_by) == expected and refused_by.__cause__ is error
