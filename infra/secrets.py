"""Secrets: registered values and recognisable patterns, replaced by placeholders before anything is written.

Two kinds (DESIGN §6, §11):
- registered values (`CONVDB_SECRETS`, `--secrets-file`): replaced by `<secret:NAME>`; a tool's
  arguments get them back (`reveal`) when it is called, so the agent can use a secret it never sees;
- values that look like credentials (`PATTERNS`: private keys, cloud and provider API keys,
  tokens, `password=...` assignments): replaced by `<secret:detected.KIND>`, for good (nothing
  can reveal them).

Applied by the conversation writer to every record it publishes, by the API to what it accepts
(messages, receipts, notes, webhook payloads), and by the log formatters to every line.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from infra.errors import InfraError
from schemas.validation import ID_FIELDS, OPERATION_FIELDS, clean_text

M = TypeVar("M", bound=BaseModel)

_PLACEHOLDER = re.compile(r"<secret:([A-Za-z0-9_.-]+)>")

PATTERNS: dict[str, str] = {
    "private_key": r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----[\s\S]{16,20000}?"
    r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----",
    "aws_access_key_id": r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
    "aws_secret_access_key": r"(?P<p_aws_secret_access_key>(?i:aws_secret_access_key)[\"']?\s*[:=]\s*[\"']?)"
    r"[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    "gitlab_token": r"\bglpat-[A-Za-z0-9_-]{20,}",
    "llm_api_key": r"\bsk-(?:ant-|proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_-]{20,}",
    "stripe_key": r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9-]{10,}",
    "google_api_key": r"\bAIza[0-9A-Za-z_-]{35}",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    "bearer_token": r"(?P<p_bearer_token>(?i:bearer)\s+)(?!<secret:)[A-Za-z0-9._~+/-]{20,}=*",
    "assigned_secret": r"(?P<p_assigned_secret>(?<!<)(?i:password|passwd|secret|api_key|apikey|api-key|"
    r"token|access_key)\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!<secret:)[^\s\"',;<>\\]{12,}",
}
"""Credential shapes detected in any text: kind -> regular expression. What a `p_KIND` group
matched (the key name of an assignment) is kept; the rest of the match is hidden."""

TRIGGERS: dict[str, tuple[str, ...]] = {
    "private_key": ("-----begin",),
    "aws_access_key_id": ("akia", "asia", "agpa", "aida", "aroa", "anpa", "anva", "aipa"),
    "aws_secret_access_key": ("aws_secret",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab_token": ("glpat-",),
    "llm_api_key": ("sk-",),
    "stripe_key": ("sk_", "rk_", "pk_"),
    "slack_token": ("xox",),
    "google_api_key": ("aiza",),
    "jwt": ("eyj",),
    "bearer_token": ("bearer",),
    "assigned_secret": ("passw", "secret", "api_key", "apikey", "api-key", "token", "access_key"),
}
"""Lower-case text each pattern's match contains: a literal search on the lowered text is far
cheaper than a pattern, so a text runs only the patterns whose triggers it holds (most: none)."""


@functools.lru_cache(maxsize=256)
def _detector(kinds: tuple[str, ...]) -> re.Pattern[str]:
    """The patterns of `kinds` as one alternation, in `PATTERNS` order (the first one wins)."""
    return re.compile("|".join(f"(?P<{kind}>{PATTERNS[kind]})" for kind in kinds))


def redact_patterns(text: str) -> str:
    """`text` with every value that looks like a credential replaced by `<secret:detected.KIND>`."""
    if len(text) < 16:
        return text  # no pattern matches fewer characters
    lowered = text.lower()
    kinds = tuple(kind for kind, triggers in TRIGGERS.items() if any(t in lowered for t in triggers))
    return _detector(kinds).sub(_placeholder, text) if kinds else text


def _placeholder(match: re.Match[str]) -> str:
    kind = match.lastgroup or "secret"
    kept = match.groupdict().get(f"p_{kind}") or ""
    return f"{kept}<secret:detected.{kind}>"


class SecretsRegistry:
    """Named secret values; `redact` hides them (and detected credentials), `reveal` puts values back."""

    def __init__(self, secrets: dict[str, str] | None = None) -> None:
        self._values: dict[str, str] = {}
        for name, value in (secrets or {}).items():
            self.register(name, value)

    def register(self, name: str, value: str) -> None:
        """Add a secret; empty values are refused because they would match everywhere."""
        if not value:
            raise ValueError(f"secret {name!r} has an empty value")
        if not _PLACEHOLDER.fullmatch(f"<secret:{name}>"):
            raise ValueError(f"secret name {name!r} must match [A-Za-z0-9_.-]+")
        self._values[name] = value

    @property
    def names(self) -> tuple[str, ...]:
        """Registered names (never values), for snapshots."""
        return tuple(sorted(self._values))

    def redact(self, text: str) -> str:
        """Replace every registered value by its placeholder (longest first), then detected credentials."""
        for name, value in sorted(self._values.items(), key=lambda kv: -len(kv[1])):
            if value in text:
                text = text.replace(value, f"<secret:{name}>")
        return redact_patterns(text)

    def reveal(self, text: str) -> str:
        """Replace placeholders of registered secrets by their values (tool input only)."""
        return _PLACEHOLDER.sub(lambda m: self._values.get(m.group(1), m.group(0)), text)

    def redact_record(self, record: M) -> M:
        """A copy of a record fit to be written: every text field (and tuple of texts) redacted and
        made valid (`clean_text`: a tool that read a binary file returns NUL characters); ids are kept.
        """
        update: dict[str, Any] = {}
        for field, value in record.__dict__.items():
            if field in ID_FIELDS or field in OPERATION_FIELDS:
                continue
            if isinstance(value, str):
                clean: Any = clean_text(self.redact(value))
            elif isinstance(value, tuple) and all(isinstance(v, str) for v in value):
                clean = tuple(clean_text(self.redact(v)) for v in value)
            else:
                continue
            if clean != value:
                update[field] = clean
        return record.model_copy(update=update) if update else record


def load_secrets_file(path: Path) -> dict[str, str]:
    """Secrets from a file: a JSON object of name -> value, or `NAME=VALUE` lines (# comments).

    Raises:
        SecretsFileError: the file cannot be read or is not in either form.
    """
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretsFileError(f"cannot read secrets file {path}: {exc}") from exc
    if text.lstrip().startswith("{"):
        try:
            found = json.loads(text)
        except ValueError as exc:
            raise SecretsFileError(f"secrets file {path} is not valid JSON: {exc}") from exc
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
            raise SecretsFileError(f"secrets file {path}: every value must be a string")
        return dict(found)
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip() or not value:
            raise SecretsFileError(f"secrets file {path}, line {number}: expected NAME=VALUE")
        values[name.strip()] = value
    return values


def registry_for(configured: dict[str, str], path: Path | None = None) -> SecretsRegistry:
    """The registry of a process: configured secrets (`CONVDB_SECRETS`) plus a secrets file's.

    Raises:
        SecretsFileError: the file is unreadable, or a name or value is not acceptable.
    """
    values = {**configured, **(load_secrets_file(path) if path is not None else {})}
    try:
        return SecretsRegistry(values)
    except ValueError as exc:
        raise SecretsFileError(str(exc)) from exc


class SecretsFileError(InfraError):
    """A secrets file (or `CONVDB_SECRETS`) cannot be used: unreadable, malformed, or a bad name."""
