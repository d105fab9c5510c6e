"""`convdb topics apply|list`: provision and show the topics of the namespace."""

from __future__ import annotations

import argparse

from convdb.infra.cli._common import reachable_broker
from convdb.infra.connection import load_settings
from convdb.infra.kafka import apply_topics, list_topics


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `topics` command."""
    topics = sub.add_parser("topics", help="create or list the namespace's topics")
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("apply", help="create missing topics (idempotent)").set_defaults(func=_apply)
    actions.add_parser("list", help="list topics and partitions").set_defaults(func=_list)


def _apply(_: argparse.Namespace) -> int:
    settings = reachable_broker(load_settings())
    for name, state in apply_topics(settings).items():
        print(f"{name}\t{state}")
    return 0


def _list(_: argparse.Namespace) -> int:
    settings = reachable_broker(load_settings())
    for name, partitions in list_topics(settings).items():
        print(f"{name}\t{partitions} partitions")
    return 0
