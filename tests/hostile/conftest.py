"""The store fixtures of the consumer tests (a SQLite file, a PostgreSQL schema), for this suite too."""

from tests.consumers.conftest import pg_url, sqlite_url, store_url  # noqa: F401 - fixtures
