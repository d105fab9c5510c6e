"""Secrets: registered values and recognisable patterns, replaced by placeholders before anything is written.

Two kinds (DESIGN §6, §11):
- registered values (`CONVDB_SECRETS`, `--secrets-file`): replaced by `<secret:NAME>`; a tool's
  arguments get them back (`reveal`) when it is called, so the agent can use a secret it never sees;
- values that look like credentials (`convdb.infra.secret_patterns`: private keys, cloud and provider
  API keys, tokens, URLs with a password, `password=...` assignments): replaced by
  `<secret:detected.KIND>`, for good (nothing can reveal them).

Applied by the conversation writer to every record it publishes, by the API to what it accepts
(messages, receipts, notes, webhook payloads), and by the log formatters to every line.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, TypeVar

import re2  # type: ignore[import-untyped]
from pydantic import BaseModel

from convdb.infra.errors import InfraError
from convdb.infra.secret_patterns import RULES, Rule, parts
from convdb.schemas.validation import ID_FIELDS, OPERATION_FIELDS, clean_text

M = TypeVar("M", bound=BaseModel)

_PLACEHOLDER = re.compile(r"<secret:([A-Za-z0-9_.-]+)>")


class _Detector:
    """Every rule of `RULES`, with one RE2 pass over a text to tell which rules can match in it."""

    def __init__(self) -> None:
        self.patterns = [re.compile(rule.pattern) for rule in RULES]
        self.triggers = re2.Set.SearchSet(re2.Options())
        self.rule_of: dict[int, int] = {}
        for index, rule in enumerate(RULES):
            for trigger in rule.triggers:
                self.rule_of[self.triggers.Add(f"(?i){trigger}")] = index
        self.triggers.Compile()

    def triggered(self, text: str) -> list[int]:
        """The rules (indexes in `RULES`) whose triggers `text` holds, in order."""
        # RE2 runs in linear time whatever the text: one pass finds every trigger. It reads UTF-8, and
        # a text may hold lone surrogates (a tool's output decoded with surrogateescape).
        found = self.triggers.Match(text.encode("utf-8", "surrogatepass")) or ()
        return sorted({self.rule_of[trigger] for trigger in found})

    def redact(self, text: str) -> str:
        for index in self.triggered(text):
            text = self.patterns[index].sub(functools.partial(_placeholder, RULES[index]), text)
        return text


def _placeholder(rule: Rule, match: re.Match[str]) -> str:
    if rule.check is not None and not rule.check(match):
        return match.group(0)
    return f"{parts(match)[0]}<secret:detected.{rule.kind}>"


_DETECTOR = _Detector()


def triggered_rules(text: str) -> tuple[Rule, ...]:
    """The rules `redact_patterns` runs on `text` (those whose triggers it holds; most texts: none)."""
    return tuple(RULES[index] for index in _DETECTOR.triggered(text))


def redact_patterns(text: str) -> str:
    """`text` with every value that looks like a credential replaced by `<secret:detected.KIND>`."""
    if len(text) < 8:
        return text  # no rule matches fewer characters
    return _DETECTOR.redact(text)


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
