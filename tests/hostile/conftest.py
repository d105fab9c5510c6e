"""Fixtures of other suites this one reuses: the stores (a SQLite file, a PostgreSQL schema) and S3."""

from tests.archive.conftest import s3_settings  # noqa: F401 - fixture
from tests.consumers.conftest import pg_url, sqlite_url, store_url  # noqa: F401 - fixtures
