"""Shared CLI plumbing: settings, usage errors, argument parsers."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import SecretStr

from convdb.infra.connection import broker_source
from convdb.infra.errors import NoBrokerError
from convdb.infra.kafka import probe_broker
from convdb.infra.secrets import SecretsFileError, load_secrets_file, registry_for
from convdb.infra.settings import Settings
from convdb.schemas.errors import ConvdbError, InvalidValueError
from convdb.schemas.validation import check_conversation_id, check_id, shown

AGENT_HELP = (
    "agent to run: a name from the 'convdb.agents' entry points, or module:attr naming an Agent or a "
    "factory make(settings) -> Agent (default: the built-in agent; see docs/own-agent.md)"
)

GRAPH_HELP = (
    "LangGraph graph to host instead of an agent: a name from the 'convdb.graphs' entry points, or "
    "module:attr naming a compiled graph, a StateGraph, or a factory make(settings) of one (needs "
    "the langgraph extra; see docs/langgraph.md)"
)


class UsageError(ConvdbError):
    """A command was given bad arguments; the CLI prints the message and exits 2."""


def require_broker(settings: Settings) -> Settings:
    """The settings, or a clear error when neither a broker nor a dev stack is there."""
    if not settings.bootstrap_servers:
        raise NoBrokerError(
            "no broker: set CONVDB_BOOTSTRAP_SERVERS, or start the embedded one with `convdb dev up`"
        )
    return settings


def reachable_broker(settings: Settings) -> Settings:
    """The settings, once a broker answered at their address (within `PROBE_TIMEOUT_S`).

    Raises:
        NoBrokerError: no broker configured and no dev stack running.
        BrokerUnreachableError: nothing answered; the message names the address and its source.
    """
    require_broker(settings)
    probe_broker(settings, broker_source(settings))
    return settings


def refuse_sample_credentials(settings: Settings, *, serving_api: bool = True) -> None:
    """Stop a service that would accept a credential published with convdb, unless in dev mode."""
    found = settings.sample_credentials(serving_api=serving_api)
    if found and not settings.dev_mode:
        # What is missing first: without a broker nothing is in development mode by itself.
        missing = (
            "no broker: CONVDB_BOOTSTRAP_SERVERS is unset and no dev stack runs (start one with "
            "`convdb dev up`, which is development mode); "
            if not settings.bootstrap_servers
            else ""
        )
        raise UsageError(
            f"refusing to start: {missing}{', '.join(found)} is a sample credential published with convdb; "
            "set your own (see infra/deploy/.env.example), or CONVDB_DEV=true for development"
        )


SECRETS_FILE_HELP = (
    "register secrets (a JSON object of name -> value, or NAME=VALUE lines): replaced by <secret:NAME> "
    "before anything is written; CONVDB_SECRETS registers them too"
)


def with_secrets_file(settings: Settings, path: Path | None) -> Settings:
    """The settings with the secrets of `--secrets-file` registered too (they reach child processes).

    Raises:
        UsageError: the file is unreadable or malformed, or a name is not acceptable.
    """
    if path is None:
        return settings
    try:
        values = {**settings.secret_values(), **load_secrets_file(path)}
        registry_for(values)  # names and values checked here, with the file named
    except SecretsFileError as exc:
        raise UsageError(str(exc)) from exc
    return settings.model_copy(update={"secrets": {k: SecretStr(v) for k, v in values.items()}})


MAX_INT64 = 2**63 - 1
"""Largest offset or count a command takes (Kafka offsets are signed 64-bit)."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_timestamp(text: str) -> datetime:
    """argparse type: an ISO-8601 time from 1970 on (Kafka timestamps start there); naive times are UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {shown(text)}") from exc
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    if value < EPOCH:
        raise argparse.ArgumentTypeError(f"{shown(text)} is before 1970-01-01, where Kafka time starts")
    return value


def bounded(low: int, high: int = MAX_INT64) -> Callable[[str], int]:
    """argparse type: an integer from `low` to `high`."""

    def parse(text: str) -> int:
        stripped = text.strip()
        if not (stripped.lstrip("-").isascii() and stripped.lstrip("-").isdigit()) or len(stripped) > 25:
            raise argparse.ArgumentTypeError(f"not an integer: {shown(text)}")
        value = int(stripped)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {shown(text)}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


non_negative = bounded(0)
"""argparse type: an integer from 0 to 2**63-1 (an offset)."""
positive = bounded(1)
"""argparse type: an integer from 1 to 2**63-1."""
port = bounded(1, 65535)
"""argparse type: a TCP port."""
port_or_zero = bounded(0, 65535)
"""argparse type: a TCP port, 0 meaning any free one."""


def identifier(text: str) -> str:
    """argparse type: an identifier (tenant, sender; `convdb.schemas.validation`)."""
    try:
        return check_id(text, "the id")
    except InvalidValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def conversation_id(text: str) -> str:
    """argparse type: a conversation id (`convdb.schemas.validation`)."""
    try:
        return check_conversation_id(text)
    except InvalidValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
