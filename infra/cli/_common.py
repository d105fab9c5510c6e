"""Shared CLI plumbing: settings, usage errors, argument parsers."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from infra import devstack
from infra.errors import NoBrokerError
from infra.settings import Settings
from schemas.errors import ConvdbError


class UsageError(ConvdbError):
    """A command was given bad arguments; the CLI prints the message and exits 2."""


def load_settings() -> Settings:
    """Settings from the environment, pointed at the dev stack when no broker is configured."""
    return devstack.resolve(Settings())


def require_broker(settings: Settings) -> Settings:
    """The settings, or a clear error when neither a broker nor a dev stack is there."""
    if not settings.bootstrap_servers:
        raise NoBrokerError(
            "no broker: set CONVDB_BOOTSTRAP_SERVERS, or start the embedded one with `convdb dev up`"
        )
    return settings


def refuse_sample_credentials(settings: Settings, *, serving_api: bool = True) -> None:
    """Stop a service that would accept a credential published with convdb, unless in dev mode."""
    found = settings.sample_credentials(serving_api=serving_api)
    if found and not settings.dev_mode:
        raise UsageError(
            f"refusing to start: {', '.join(found)} is a sample credential published with convdb; "
            "set your own (see infra/deploy/.env.example), or CONVDB_DEV=true for development"
        )


def iso_timestamp(text: str) -> datetime:
    """argparse type: an ISO-8601 time; naive times are UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def non_negative(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value
