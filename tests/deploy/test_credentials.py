"""Services refuse the credentials published with convdb, unless development mode is on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from convdb.infra.settings import SAMPLE_CREDENTIALS, Settings


def convdb(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`convdb ARGS` with exactly these CONVDB_* variables."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
    return subprocess.run(
        [sys.executable, "-m", "convdb", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_dev_mode_follows_the_embedded_broker_unless_set() -> None:
    production = Settings(_env_file=None, bootstrap_servers="kafka:9092")  # type: ignore[call-arg]
    embedded = production.with_broker("127.0.0.1:9092", embedded=True)
    assert not production.dev_mode and embedded.dev_mode
    assert production.model_copy(update={"dev": True}).dev_mode
    assert not embedded.model_copy(update={"dev": False}).dev_mode


def test_sample_credentials_are_named_never_shown() -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        api={"keys": {"dev-key": "t", "k-real-0123": "acme"}, "receipt_secrets": {"tracker": "change-me"}},
        s3={"secret_access_key": "sample-receipt-secret-replace-me"},
        store_url="postgresql+psycopg://convdb:change-me@db:5432/convdb",
    )
    found = settings.sample_credentials()
    assert found == [
        "CONVDB_API__KEYS ('dev-key')",
        "CONVDB_API__RECEIPT_SECRETS ('tracker')",
        "CONVDB_S3__SECRET_ACCESS_KEY",
        "the password in CONVDB_STORE_URL",
    ]
    assert not any(secret in " ".join(found) for secret in SAMPLE_CREDENTIALS - {"dev-key"})
    real = Settings(_env_file=None, api={"keys": {"k-real-0123": "acme"}})  # type: ignore[call-arg]
    assert real.sample_credentials() == []
    # The default key matters only where the API is served; a key given explicitly, everywhere.
    default = Settings(_env_file=None)  # type: ignore[call-arg]
    assert default.sample_credentials(serving_api=False) == []
    given = Settings(_env_file=None, api={"keys": {"dev-key": "x"}})  # type: ignore[call-arg]
    assert given.sample_credentials(serving_api=False) == ["CONVDB_API__KEYS ('dev-key')"]


def test_serve_refuses_the_default_key_outside_dev_mode(tmp_path: Path) -> None:
    env = {"CONVDB_BOOTSTRAP_SERVERS": "127.0.0.1:9", "CONVDB_DATA_DIR": str(tmp_path)}
    done = convdb(env, "serve", "--port", str(free_port()))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "refusing to start: CONVDB_API__KEYS ('dev-key') is a sample credential" in line
    assert "CONVDB_DEV=true" in line and "Traceback" not in done.stderr


def test_init_refuses_sample_secrets_outside_dev_mode(tmp_path: Path) -> None:
    env = {
        "CONVDB_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "CONVDB_DATA_DIR": str(tmp_path),
        "CONVDB_API__KEYS": '{"k-real-0123": "acme"}',
        "CONVDB_STORE_URL": "postgresql+psycopg://convdb:change-me@127.0.0.1:5432/convdb",
    }
    done = convdb(env, "init")
    assert done.returncode == 2 and "the password in CONVDB_STORE_URL" in done.stderr, done.stderr


def test_serve_accepts_the_default_key_in_dev_mode(tmp_path: Path) -> None:
    port = free_port()
    env = {
        "CONVDB_BOOTSTRAP_SERVERS": "127.0.0.1:9",
        "CONVDB_DATA_DIR": str(tmp_path),
        "CONVDB_DEV": "true",
    }
    log = tmp_path / "serve.log"
    proc = spawn([sys.executable, "-m", "convdb", "serve", "--port", str(port)], log, env)
    try:
        wait_for_port(proc, port, 60, "convdb serve", log)
        url = f"http://127.0.0.1:{port}/conversations"
        listed = httpx.get(url, headers={"X-API-Key": "dev-key"}, timeout=10)
        assert listed.status_code == 200 and listed.json()["conversations"] == []
    finally:
        stop_group(proc.pid)
