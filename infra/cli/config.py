"""`convdb config`: the effective settings and where each came from; `--reference` prints the
settings reference (docs/configuration.md)."""

from __future__ import annotations

import argparse
import json

from convdb.infra.connection import resolve, stack_file
from convdb.infra.settings import Settings
from convdb.infra.settings_doc import effective, reference


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `config` command."""
    p = sub.add_parser(
        "config", help="print the effective settings and where each came from (secrets masked)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per setting")
    p.add_argument(
        "--reference", action="store_true", help="print docs/configuration.md (every setting, generated)"
    )
    p.set_defaults(func=_config)


def _config(args: argparse.Namespace) -> int:
    if args.reference:
        print(reference(), end="")
        return 0
    env = Settings()
    rows = effective(env, resolve(env), stack_file(env))
    width = max(len(r.variable) for r in rows)
    for row in rows:
        if args.json:
            print(json.dumps({"variable": row.variable, "value": row.value, "source": row.source}))
        else:
            print(f"{row.variable:<{width}}  {row.value}  ({row.source})")
    return 0
