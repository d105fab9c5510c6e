"""The settings reference is generated and current; `convdb config` shows each effective value
with its source, secrets masked; `--version`; no abbreviated options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from convdb.infra.settings_doc import MASK, leaves, reference

ROOT = Path(__file__).resolve().parents[2]


def _convdb(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}
    return subprocess.run(
        [sys.executable, "-m", "convdb", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_the_reference_is_current_and_every_setting_is_described() -> None:
    undescribed = [leaf.variable for leaf in leaves() if not (leaf.field.description or "").strip()]
    assert undescribed == []
    written = (ROOT / "docs" / "configuration.md").read_text()
    assert written == reference(), "docs/configuration.md is stale: convdb config --reference > it"
    for leaf in leaves():
        assert f"`{leaf.variable}`" in written
    assert len(list(leaves())) > 80


def test_config_shows_sources_and_masks_secrets(tmp_path: Path) -> None:
    (tmp_path / "dev.json").write_text(
        json.dumps({"bootstrap_servers": "127.0.0.1:39092", "broker_pid": os.getpid()})
    )
    env = {
        "CONVDB_DATA_DIR": str(tmp_path),
        "CONVDB_API__SESSION_SECRET": "s3ss10n-value",
        "CONVDB_API__KEYS": json.dumps({"k-live-123": "acme", "k-live-456": "umbrella"}),
        "CONVDB_STORE_URL": "postgresql+psycopg://convdb:pg-pass-789@db:5432/convdb",
        "CONVDB_KAFKA__EXTRA": json.dumps({"sasl.password": "kafka-pass", "security.protocol": "SASL_SSL"}),
        "CONVDB_SECRETS": json.dumps({"TOKEN": "tok-value"}),
    }
    done = _convdb(env, "config", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {r["variable"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert set(rows) == {leaf.variable for leaf in leaves()}
    for secret in ("s3ss10n-value", "k-live-123", "pg-pass-789", "kafka-pass", "tok-value"):
        assert secret not in done.stdout
    assert rows["CONVDB_API__SESSION_SECRET"] == {
        "variable": "CONVDB_API__SESSION_SECRET",
        "value": MASK,
        "source": "environment",
    }
    assert json.loads(rows["CONVDB_API__KEYS"]["value"]) == {f"{MASK}1": "acme", f"{MASK}2": "umbrella"}
    assert rows["CONVDB_STORE_URL"]["value"] == f"postgresql+psycopg://convdb:{MASK}@db:5432/convdb"
    assert json.loads(rows["CONVDB_KAFKA__EXTRA"]["value"])["security.protocol"] == "SASL_SSL"
    stack = f"dev stack file {tmp_path / 'dev.json'}"
    assert rows["CONVDB_BOOTSTRAP_SERVERS"] == {
        "variable": "CONVDB_BOOTSTRAP_SERVERS",
        "value": "127.0.0.1:39092",
        "source": stack,
    }
    assert rows["CONVDB_DEV"]["source"] == stack and rows["CONVDB_DEV"]["value"] == "true"
    assert rows["CONVDB_API__PORT"] == {"variable": "CONVDB_API__PORT", "value": "8000", "source": "default"}
    text = _convdb(env, "config", cwd=tmp_path)
    assert text.returncode == 0 and "s3ss10n-value" not in text.stdout
    assert any(
        line.startswith("CONVDB_BOOTSTRAP_SERVERS ") and stack in line for line in text.stdout.splitlines()
    )


def test_version_and_no_abbreviations(tmp_path: Path) -> None:
    version = _convdb({}, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("convdb ") and version.stdout.strip()[7:]
    abbreviated = _convdb({"CONVDB_DATA_DIR": str(tmp_path)}, "demo", "--conversation", "3", cwd=tmp_path)
    assert abbreviated.returncode == 2, abbreviated.stderr
    assert "unrecognized arguments: --conversation 3" in abbreviated.stderr
