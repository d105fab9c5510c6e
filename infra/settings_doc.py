"""The settings as a user sees them: every `CONVDB_*` variable with its default and description
(the reference in docs/configuration.md is generated from the settings classes, never by hand),
and the effective value of each with where it came from (`convdb config`).
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from convdb.infra.settings import Settings

MASK = "********"
"""What a secret shows as."""
SECRET_KEY = re.compile(r"password|secret|token|credential|private|sasl\.oauthbearer", re.IGNORECASE)
"""Keys of free-form maps (`CONVDB_KAFKA__EXTRA`) whose values are secrets."""


@dataclass(frozen=True)
class Leaf:
    """One setting: its path in Settings, its variable and its declaration."""

    path: tuple[str, ...]
    field: FieldInfo

    @property
    def variable(self) -> str:
        """The environment variable that sets it."""
        return "CONVDB_" + "__".join(self.path).upper()

    @property
    def section(self) -> str:
        """The section it belongs to ('' for the top level)."""
        return self.path[0] if len(self.path) > 1 else ""


def leaves(model: type[BaseModel] = Settings, prefix: tuple[str, ...] = ()) -> Iterator[Leaf]:
    """Every setting, sections flattened, in declaration order (top-level values first)."""
    sections: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            sections.append((name, annotation))
        else:
            yield Leaf((*prefix, name), field)
    for name, section in sections:
        yield from leaves(section, (*prefix, name))


def default_of(field: FieldInfo) -> Any:
    """The declared default (a factory's product)."""
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return field.default


def type_name(annotation: Any) -> str:
    """A type as a user reads it: `int`, `str | None`, `dict[str, str]`, `'text' | 'json'`."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(annotation))
    if origin is not None and getattr(origin, "__name__", "") == "Literal":
        return " | ".join(repr(a) for a in get_args(annotation))
    if str(origin) == "typing.Literal":
        return " | ".join(repr(a) for a in get_args(annotation))
    if origin is not None:
        args = ", ".join("..." if a is Ellipsis else type_name(a) for a in get_args(annotation))
        return f"{origin.__name__}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def shown(value: Any, *, secret_keys: bool = False) -> str:
    """A value as text, secrets masked: SecretStr values, passwords in URLs, secret-looking keys
    of free-form maps, and (`secret_keys`) the keys of a map that are credentials themselves."""
    if value is None:
        return "unset"
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, dict):
        masked = {
            (f"{MASK}{i}" if secret_keys else str(k)): (
                MASK if isinstance(v, SecretStr) or SECRET_KEY.search(str(k)) else _plain(v)
            )
            for i, (k, v) in enumerate(value.items(), 1)
        }
        return json.dumps(masked, ensure_ascii=False)
    if isinstance(value, tuple | list):
        return json.dumps([_plain(v) for v in value], ensure_ascii=False)
    if isinstance(value, str) and "://" in value:
        return _masked_url(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _plain(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def _masked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:{MASK}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


CREDENTIAL_MAPS = {("api", "keys")}
"""Maps whose keys are the credentials (API key -> tenant)."""


def reference() -> str:
    """docs/configuration.md: every setting with its variable, type, default and description."""
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from the settings classes (infra/settings.py) by `convdb config --reference`; "
        "tests/infra/test_config.py fails when it is out of date. Do not edit by hand. -->",
        "",
        "Every setting is an environment variable `CONVDB_*`; a section's fields are "
        "`CONVDB_<SECTION>__<FIELD>` (or the whole section as one JSON object in `CONVDB_<SECTION>`). "
        "Maps and lists are JSON. When `CONVDB_BOOTSTRAP_SERVERS` is unset, commands use the dev stack "
        "that `convdb dev up` recorded in `<data dir>/dev.json` (its broker, and its S3 as the archive). "
        "`convdb config` prints the effective value of each and where it came from.",
    ]
    section = None
    for leaf in leaves():
        if leaf.section != section:
            section = leaf.section
            title = "Top level" if not section else f"`{section}`"
            doc = Settings.__doc__ if not section else Settings.model_fields[section].annotation.__doc__
            out += ["", f"## {title}", "", (doc or "").strip().splitlines()[0], ""]
            out += ["| Variable | Type | Default | Description |", "|---|---|---|---|"]
        default = default_of(leaf.field)
        cells = [
            f"`{leaf.variable}`",
            f"`{type_name(leaf.field.annotation)}`",
            f"`{shown(default)}`",
            leaf.field.description or "",
        ]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Effective:
    """One setting's effective value (masked) and where it came from."""

    variable: str
    value: str
    source: str


def _value(settings: BaseModel, path: tuple[str, ...]) -> Any:
    value: Any = settings
    for name in path:
        value = getattr(value, name)
    return value


def _from_env(env: Settings, path: tuple[str, ...]) -> bool:
    node: BaseModel = env
    for name in path:
        if name not in node.model_fields_set:
            return False
        child = getattr(node, name)
        if not isinstance(child, BaseModel):
            return True
        node = child
    return True


def effective(env: Settings, resolved: Settings, stack_file: Path) -> list[Effective]:
    """Each setting's value in `resolved` (what commands use) and its source: the environment
    (`env`, the settings read from it), the dev stack file (what `resolved` took from it), or
    the default."""
    found = []
    for leaf in leaves():
        value = _value(resolved, leaf.path)
        if _value(env, leaf.path) != value:
            source = f"dev stack file {stack_file}"
        elif _from_env(env, leaf.path):
            source = "environment"
        else:
            source = "default"
        found.append(Effective(leaf.variable, shown(value, secret_keys=leaf.path in CREDENTIAL_MAPS), source))
    return found
