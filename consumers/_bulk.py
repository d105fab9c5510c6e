"""Bulk writes of positional rows, straight to the driver: the sink's hot path.

SQLite gets multi-row INSERT statements; PostgreSQL gets COPY, several times faster than
`executemany` there. Re-exported by `convdb.consumers.store`.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

__all__ = ["bulk_insert", "plain_columns", "sqlite_insert_returning", "sqlite_upsert"]

_SQL_CACHE: dict[tuple[str, tuple[str, ...], tuple[str, ...], bool, int, str | None], str] = {}


def bulk_insert(
    conn: Connection,
    table: sa.Table,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    ignore_conflicts_on: Sequence[str] | None = None,
) -> None:
    """Positional rows straight to the driver: the hot path (no per-row ORM work).

    With `ignore_conflicts_on`, rows whose key already exists are skipped. PostgreSQL gets
    COPY; SQLite gets multi-row INSERTs of as many rows as its variable limit allows: one
    statement step per few thousand rows instead of one per row, measured 10-15% less CPU,
    and the driver releases the GIL once per statement instead of once per row, so the
    runner's decoding thread is not stalled row by row.
    """
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        _copy_insert(conn, table, columns, rows, ignore_conflicts_on)
        return
    _sqlite_insert(conn, table, tuple(columns), rows, tuple(ignore_conflicts_on or ()), replace=False)


def sqlite_upsert(
    conn: Connection,
    table: sa.Table,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    keys: Sequence[str],
) -> None:
    """Positional rows straight to SQLite, replacing the other columns of rows whose `keys` exist.

    For tables of plain column types only (`plain_columns`): the driver gets the values as they are.
    """
    if rows:
        _sqlite_insert(conn, table, tuple(columns), rows, tuple(keys), replace=True)


def sqlite_insert_returning(
    conn: Connection,
    table: sa.Table,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    ignore_conflicts_on: Sequence[str],
    returning: str,
) -> list[Any]:
    """`bulk_insert` on SQLite, skipping rows whose key exists; returns the `returning` column of
    the rows it inserted (in no particular order)."""
    if not rows:
        return []
    return _sqlite_insert(
        conn, table, tuple(columns), rows, tuple(ignore_conflicts_on), replace=False, returning=returning
    )


def plain_columns(table: sa.Table, columns: Sequence[str]) -> bool:
    """Whether SQLAlchemy would hand these columns' values to SQLite unchanged (no bind processing)."""
    return all(
        isinstance(table.c[c].type, _PLAIN) and not isinstance(table.c[c].type, sa.Enum) for c in columns
    )


_PLAIN = (sa.Integer, sa.Float, sa.String, sa.LargeBinary)


def _sqlite_insert(
    conn: Connection,
    table: sa.Table,
    columns: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    keys: tuple[str, ...],
    replace: bool,
    returning: str | None = None,
) -> list[Any]:
    driver = conn.connection.driver_connection
    per_statement = max(1, driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // len(columns))  # type: ignore[union-attr]
    cursor = driver.cursor()  # type: ignore[union-attr]
    returned: list[Any] = []
    try:
        start = 0
        for size in chunk_sizes(len(rows), per_statement):
            chunk = rows[start : start + size]
            start += size
            sql = _sqlite_sql(conn, table, columns, keys, replace, size, returning)
            with _as_sqlalchemy_error(sql, sqlite3.Error):
                cursor.execute(sql, list(itertools.chain.from_iterable(chunk)))
                if returning is not None:
                    returned.extend(value for (value,) in cursor.fetchall())
    finally:
        cursor.close()
    return returned


MAX_ROWS_PER_STATEMENT = 4096


def chunk_sizes(count: int, limit: int) -> list[int]:
    """Rows per statement for `count` rows: powers of two, at most `limit` (the driver's variable
    limit) and `MAX_ROWS_PER_STATEMENT`, largest first.

    The driver caches prepared statements by their text, and a statement of thousands of rows
    takes long to prepare: with sizes from a fixed set, every shape is prepared once per
    connection, whatever the batches' sizes (one statement per batch size was prepared anew for
    nearly every batch).
    """
    top = 1 << (min(limit, MAX_ROWS_PER_STATEMENT).bit_length() - 1)
    sizes = [top] * (count // top)
    rest = count % top
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes


@contextmanager
def _as_sqlalchemy_error(
    statement: str, base: type[Exception], keep: tuple[type[Exception], ...] = ()
) -> Iterator[None]:
    """Driver errors raised past SQLAlchemy (but `keep`), as the `DBAPIError` subclass SQLAlchemy
    would raise: the runner retries an outage (`OperationalError`) and dead-letters a refused
    value (`DataError`), whichever path wrote the rows."""
    try:
        yield
    except keep:
        raise
    except base as exc:
        raise sa.exc.DBAPIError.instance(statement, None, exc, base) from exc


def _sqlite_sql(
    conn: Connection,
    table: sa.Table,
    columns: tuple[str, ...],
    keys: tuple[str, ...],
    replace: bool,
    count: int,
    returning: str | None = None,
) -> str:
    cache_key = (table.name, columns, keys, replace, count, returning)
    sql = _SQL_CACHE.get(cache_key)
    if sql is None:
        quote = conn.dialect.identifier_preparer.quote
        names = ", ".join(quote(c) for c in columns)
        marks = "(" + ", ".join(["?"] * len(columns)) + ")"
        sql = f"INSERT INTO {quote(table.name)} ({names}) VALUES " + ", ".join([marks] * count)
        updated = [f"{quote(c)} = excluded.{quote(c)}" for c in columns if c not in keys] if replace else []
        if keys:
            action = f"UPDATE SET {', '.join(updated)}" if updated else "NOTHING"
            sql += f" ON CONFLICT ({', '.join(quote(k) for k in keys)}) DO {action}"
        if returning is not None:
            sql += f" RETURNING {quote(returning)}"
        if len(_SQL_CACHE) > 256:  # a few sizes per table (`chunk_sizes`); bounded all the same
            _SQL_CACHE.clear()
        _SQL_CACHE[cache_key] = sql
    return sql


def _copy_insert(
    conn: Connection,
    table: sa.Table,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    ignore_conflicts_on: Sequence[str] | None,
) -> None:
    # COPY is several times faster than executemany on PostgreSQL. With a conflict key, the rows
    # are first COPYed straight into the table under a savepoint (a re-delivered row is rare);
    # only when that hits the key are they staged and inserted with ON CONFLICT DO NOTHING.
    if not ignore_conflicts_on:
        _copy(conn, table, table.name, columns, rows)
        return
    from psycopg.errors import UniqueViolation

    savepoint = conn.begin_nested()
    try:
        _copy(conn, table, table.name, columns, rows)
    except UniqueViolation:
        savepoint.rollback()
        _staged_insert(conn, table, columns, rows, ignore_conflicts_on)
    else:
        savepoint.commit()


def _copy(
    conn: Connection, table: sa.Table, name: str, columns: Sequence[str], rows: Sequence[tuple[Any, ...]]
) -> None:
    # Binary COPY: no text escaping of values (bytea payloads as hex) on either side; measured
    # 0.9 instead of 2.5 us per row in the client and 8 instead of 11 in the server.
    quote = conn.dialect.identifier_preparer.quote
    names = ", ".join(quote(c) for c in columns)
    import psycopg
    from psycopg.errors import UniqueViolation

    sql = f"COPY {quote(name)} ({names}) FROM STDIN (FORMAT BINARY)"
    cursor = conn.connection.cursor()
    try:
        # A unique violation stays the driver's: `_copy_insert` stages those rows instead.
        with _as_sqlalchemy_error(sql, psycopg.Error, (UniqueViolation,)), cursor.copy(sql) as copy:
            copy.set_types([_copy_type(table.c[c].type) for c in columns])
            for row in rows:
                copy.write_row(row)
    finally:
        cursor.close()


def _copy_type(column_type: sa.types.TypeEngine[Any]) -> str:
    """The PostgreSQL type name a binary COPY writes a column's values as."""
    for python_type, name in _COPY_TYPES:
        if isinstance(column_type, python_type):
            return name
    raise TypeError(f"no binary COPY type for a {column_type!r} column")


_COPY_TYPES: tuple[tuple[type[sa.types.TypeEngine[Any]], str], ...] = (
    (sa.BigInteger, "int8"),
    (sa.Integer, "int4"),
    (sa.Float, "float8"),
    (sa.Boolean, "bool"),
    (sa.LargeBinary, "bytea"),
    (sa.String, "text"),
)


def _staged_insert(
    conn: Connection,
    table: sa.Table,
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    keys: Sequence[str],
) -> None:
    # Through a per-session staging table, then one INSERT ... SELECT ... ON CONFLICT.
    quote = conn.dialect.identifier_preparer.quote
    names = ", ".join(quote(c) for c in columns)
    target, stage = quote(table.name), f"stage_{table.name}"
    conn.exec_driver_sql(
        f"CREATE TEMP TABLE IF NOT EXISTS {quote(stage)} ON COMMIT DELETE ROWS AS "
        f"SELECT {names} FROM {target} WITH NO DATA"
    )
    _copy(conn, table, stage, columns, rows)
    conflict = ", ".join(quote(k) for k in keys)
    conn.exec_driver_sql(
        f"INSERT INTO {target} ({names}) SELECT {names} FROM {quote(stage)} "
        f"ON CONFLICT ({conflict}) DO NOTHING"
    )
    conn.exec_driver_sql(f"DELETE FROM {quote(stage)}")
