"""`convdb audit`: diff a live store against a replayed one; show a conversation's view as of a point."""

from __future__ import annotations

import argparse
import json
from datetime import datetime

from convdb.consumers.archive import audit
from convdb.consumers.archive.errors import StoreUrlError
from convdb.consumers.archive.replay import open_store
from convdb.infra.cli._common import MAX_INT64, UsageError, conversation_id, iso_timestamp
from convdb.infra.cli.export import trajectory
from convdb.infra.cli.replay import load_projector
from convdb.infra.connection import load_settings
from convdb.projections import view


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `audit` command with `diff` and `show`."""
    p = sub.add_parser("audit", help="prove a replay equals the live projection; show past views")
    actions = p.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    d = actions.add_parser("diff", help="conversations whose projection differs; exit 1 if any")
    d.add_argument("live", metavar="LIVE_URL", help="live store URL")
    d.add_argument("shadow", metavar="SHADOW_URL", help="shadow (replayed) store URL")
    d.add_argument(
        "--consumer",
        action="append",
        metavar="NAME",
        help="compare this projector (default: those in the shadow)",
    )
    d.set_defaults(func=_diff)
    s = actions.add_parser("show", help="the agent's view of a conversation as of a time or an offset")
    s.add_argument("conversation", type=conversation_id, metavar="CONV", help="conversation id")
    s.add_argument("--at", required=True, metavar="ISO|OFFSET", help="a time (ISO-8601) or an events offset")
    s.add_argument("--source", choices=("kafka", "archive"), default="kafka", help="where to read")
    s.add_argument("--format", choices=("pretty", "json"), default="pretty", help="output format")
    s.set_defaults(func=_show)


def _diff(args: argparse.Namespace) -> int:
    settings = load_settings()
    try:
        live, shadow = open_store(args.live), open_store(args.shadow)
        in_shadow, in_live = audit.installed(shadow), audit.installed(live)
    except StoreUrlError as exc:
        raise UsageError(str(exc)) from exc
    names = args.consumer or sorted(in_shadow)
    if not names:
        raise UsageError(
            f"the shadow store {args.shadow} holds no projection: run `convdb replay` into it first"
        )
    for name in names:
        for url, have in ((args.live, in_live), (args.shadow, in_shadow)):
            if name not in have:
                raise UsageError(f"store {url} has no {name!r} projection")
    projectors = [load_projector(n, settings) for n in names]
    found = audit.compare(live, shadow, projectors)
    differences = found.differences
    by_name = {p.name: p for p in projectors}
    for d in differences:
        where = d.what
        if where == "different":
            seq = audit.first_differing_seq(live, shadow, by_name[d.consumer], d.conversation_id)
            where += f" (first differing seq {seq})" if seq is not None else " (no per-seq row differs)"
        print(f"{d.consumer}\t{d.conversation_id}\t{where}\tlive={d.live or '-'}\tshadow={d.shadow or '-'}")
    # The verdict is the command's answer: on stdout, after the differing rows it sums up.
    missing = sum(d.what != "different" for d in differences)
    print(
        f"audit: compared {found.compared} conversation(s) across {', '.join(names)}: "
        f"{len(differences)} differ ({missing} missing on one side, {len(differences) - missing} different)"
    )
    return 1 if differences else 0


def _show(args: argparse.Namespace) -> int:
    at, offset = _point(args.at)
    found = trajectory(load_settings(), args.conversation, args.source)
    state = audit.view_at(found, at, offset)
    branch = view.active_branch(state)
    if args.format == "json":
        body = {
            "conversation_id": state.conversation_id,
            "as_of": args.at,
            "last_seq": state.last_seq,
            "active_leaf": state.active_leaf,
            "view": [e.model_dump(mode="json") for e in branch],
        }
        print(json.dumps(body, ensure_ascii=False))
        return 0
    print(f"{state.conversation_id} as of {args.at}: seq {state.last_seq}, {len(branch)} event(s) in view")
    for e in branch:
        text = getattr(e, "content", None) or getattr(e, "summary", None) or getattr(e, "tool_name", "")
        print(f"  #{e.seq} {e.kind} {e.source}: {str(text)[:120]}")
    return 0


def _point(text: str) -> tuple[datetime | None, int | None]:
    if text.isascii() and text.isdigit():
        if len(text) > 19 or int(text) > MAX_INT64:
            raise UsageError(f"--at offset {text[:30]} is beyond the largest Kafka offset")
        return None, int(text)
    try:
        return iso_timestamp(text), None
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"--at wants an ISO-8601 time or an offset, got {text!r}") from exc
