"""Secret redaction: registered values and detected credentials, in texts, records, files and log lines."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from convdb.infra.logs import JsonFormatter, TextFormatter
from convdb.infra.secret_patterns import RULES
from convdb.infra.secrets import (
    SecretsFileError,
    SecretsRegistry,
    load_secrets_file,
    redact_patterns,
    registry_for,
)
from convdb.schemas import MessageEvent
from tests.helpers import now

PLANTED = {
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "github_token": "ghp_" + "a1B2" * 9,
    "llm_api_key": "sk-proj-Abcdefghijklmnopqrstuvwx0123456789",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "slack_token": "xoxb-123456789012-abcdefABCDEF",
    "google_api_key": "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    "-----END OPENSSH PRIVATE KEY-----",
    "bearer_token": "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123",
    "assigned_secret": 'export DB_PASSWORD="correct-horse-battery"',
    "url_password": "postgresql://app:Xk9m2Qv7@db.internal:5432/app",
}
SECRET_PARTS = {
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key": "wJalrXUtnFEMI",
    "github_token": "a1B2a1B2",
    "llm_api_key": "Abcdefghijkl",
    "stripe_key": "4eC39HqLyjWD",
    "slack_token": "123456789012-abcdef",
    "google_api_key": "SyA-1234567890",
    "jwt": "dozjgNryP4J3",
    "private_key": "b3BlbnNzaC1",
    "bearer_token": "abcdefghijklmnop",
    "assigned_secret": "correct-horse",
    "url_password": "Xk9m2Qv7",
}


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_each_credential_shape_is_detected_in_text_and_in_json(kind: str) -> None:
    text = f"here it is: {PLANTED[kind]} (keep it safe)"
    for where in (text, json.dumps({"output": text})):
        clean = redact_patterns(where)
        assert SECRET_PARTS[kind] not in clean, clean
        assert f"<secret:detected.{kind}>" in clean or "<secret:detected." in clean, clean


def test_ordinary_text_ids_and_placeholders_are_left_alone() -> None:
    ordinary = [
        "The build took 42 tokens per second and 3 seconds; see 123e4567-e89b-12d3-a456-426614174000.",
        "def token_count(text): return len(text.split())  # simple",
        "token: <secret:GITHUB_TOKEN> stays a placeholder",
        "sk-short and AKIA123 are too short to be keys",
        "Asia and the secret garden: a novel",
    ]
    for text in ordinary:
        assert redact_patterns(text) == text


def test_registered_values_then_patterns_and_ids_kept() -> None:
    registry = SecretsRegistry({"DB": "hunter2-long-value"})
    event = MessageEvent(
        id="e1", conversation_id="c1", tenant_id="t", seq=1, timestamp=now(), source="user", role="user",
        content=f"db hunter2-long-value and {PLANTED['github_token']}",
    )  # fmt: skip
    clean = registry.redact_record(event)
    assert clean.content == "db <secret:DB> and <secret:detected.github_token>"
    assert (clean.id, clean.conversation_id) == ("e1", "c1")
    assert registry.reveal("use <secret:DB> <secret:detected.github_token>") == (
        "use hunter2-long-value <secret:detected.github_token>"
    )


def test_secrets_files_json_or_lines_and_clear_errors(tmp_path: Path) -> None:
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"A": "value-a"}))
    lines = tmp_path / "s.env"
    lines.write_text("# comment\nB=value=b\n\nC= spaced\n")
    assert load_secrets_file(as_json) == {"A": "value-a"}
    assert load_secrets_file(lines) == {"B": "value=b", "C": " spaced"}
    assert registry_for({"D": "value-d"}, lines).names == ("B", "C", "D")
    bad = tmp_path / "bad.env"
    bad.write_text("no equals sign here\n")
    for path, message in ((bad, "line 1"), (tmp_path / "missing", "cannot read")):
        with pytest.raises(SecretsFileError, match=message):
            load_secrets_file(path)
    with pytest.raises(SecretsFileError, match="must match"):
        registry_for({"bad name": "x"})


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_log_lines_never_carry_a_detected_credential(formatter: logging.Formatter) -> None:
    record = logging.LogRecord(
        "t", logging.ERROR, __file__, 1, "failed with key %s", (PLANTED["llm_api_key"],), None
    )
    line = formatter.format(record)
    assert SECRET_PARTS["llm_api_key"] not in line and "<secret:detected.llm_api_key>" in line


def test_records_are_made_writable_before_they_are_written() -> None:
    event = MessageEvent(
        id="e1", conversation_id="c1", tenant_id="t", seq=1, timestamp=now(), source="environment",
        role="user", content="binary \x00 file \udc80 read",
    )  # fmt: skip
    assert SecretsRegistry().redact_record(event).content == "binary \ufffd file \ufffd read"


def test_every_rule_has_triggers_and_compiles() -> None:
    """A rule runs only on text holding one of its triggers: a rule without any never would."""
    assert all(rule.triggers and re.compile(rule.pattern) for rule in RULES)
