"""Store fixtures: a SQLite file per test, and a PostgreSQL schema per test when a server answers."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def pg_base_url() -> str:
    """The PostgreSQL server tests use: CONVDB_TEST_PG_URL, else the local one."""
    return os.environ.get("CONVDB_TEST_PG_URL", PG_DEFAULT)


def pg_unreachable_reason() -> str | None:
    """None when PostgreSQL answers, else why not."""
    import psycopg

    url = pg_base_url().replace("postgresql+psycopg://", "postgresql://")
    try:
        with psycopg.connect(url, connect_timeout=3):
            return None
    except psycopg.Error as exc:
        return f"PostgreSQL at {url} is not reachable ({exc}); set CONVDB_TEST_PG_URL or start it"


def require_pg() -> None:
    """Fail (under CI) or skip (elsewhere, with the reason) when no PostgreSQL server answers.

    CI starts PostgreSQL itself, so a missing server there is a broken run, never a green one.
    """
    reason = pg_unreachable_reason()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set: the PostgreSQL suites must run)", pytrace=False)
    pytest.skip(reason)


def make_pg_schema() -> tuple[str, str]:
    """A fresh schema; returns (store URL with search_path set to it, schema name)."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    url = pg_base_url()
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}", schema


def drop_pg_schema(schema: str) -> None:
    """Drop a test schema and everything in it."""
    import psycopg

    with psycopg.connect(
        pg_base_url().replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite store file of this test."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL store isolated in its own schema; see `require_pg` when no server answers."""
    require_pg()
    url, schema = make_pg_schema()
    try:
        yield url
    finally:
        drop_pg_schema(schema)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each store backend in turn."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))
