"""The demo's story for a new user: what each conversation did, how its side effects were
confirmed, and a runner killed in the middle of a side effect whose conversation resumes in
another runner without doing it twice (the provider's own count shown).

Everything is read back through the query API the console serves, as a user would see it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Effect:
    """One tool call of a conversation, and how its outcome became known."""

    tool: str
    what: str
    status: str
    how: str


@dataclass
class Story:
    """One conversation as the read side shows it."""

    conversation_id: str
    title: str
    status: str
    events: int
    llm_calls: int
    tokens: int
    cost: float
    effects: list[Effect] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class CrashStory:
    """The crash act: who was killed, who resumed, what the provider counted."""

    conversation_id: str
    killed_pid: int
    resumed_pid: int
    operation_id: str
    status: str
    confirmed_by: str
    receipt: str | None
    backfilled: bool
    provider_creations: int
    provider_mutations_in_act: int
    seconds: float

    def as_json(self) -> dict[str, Any]:
        """The act as a JSON-able dict (the `--json` summary's `crash_resume`)."""
        return {
            "conversation": self.conversation_id,
            "operation_id": self.operation_id,
            "status": self.status,
            "runner_killed": self.killed_pid,
            "resumed_by": self.resumed_pid,
            "confirmed_by": self.confirmed_by,
            "provider_receipt": self.receipt,
            "observation_backfilled": self.backfilled,
            "provider_creations_for_operation": self.provider_creations,
            "provider_mutations_in_act": self.provider_mutations_in_act,
            "seconds": round(self.seconds, 1),
        }


def _what(arguments: Any) -> str:
    args = arguments if isinstance(arguments, dict) else {}
    for key in ("path", "title", "to", "command"):
        if isinstance(args.get(key), str):
            return f"{key} {args[key]!r}"
    return json.dumps(args)[:60]


def _how(op: dict[str, Any] | None, effect_class: str) -> tuple[str, str]:
    if op is None:
        return ("read only", "nothing to confirm") if effect_class == "read_only" else ("?", "no ledger yet")
    ledger = op.get("ledger") or []
    confirmed = next((r for r in ledger if r["kind"] == "effect_confirmed"), None)
    receipt = op["evidence"]["provider_receipt"]
    by = confirmed["by"] if confirmed else ""
    how = {
        "runner": f"the call answered (receipt {receipt})",
        "lookup": f"a runner asked the provider afterwards: it had happened (receipt {receipt})",
        "receipt": f"the provider's signed webhook receipt {receipt}",
        "reconciler": f"the reconciler matched the provider's record (receipt {receipt})",
        "human": "a person decided in the human queue",
    }.get(by, op["status"])
    if op["status"] != "confirmed":
        how = f"{op['status']}: {op['evidence']['reason'] or 'waiting'}"
    return op["status"], how


def read_story(api: httpx.Client, conversation_id: str) -> Story:
    """A conversation's story from the JSON API: its actions, their operations and ledgers."""
    summary = api.get(f"/conversations/{conversation_id}").raise_for_status().json()
    view = api.get(f"/conversations/{conversation_id}/view").raise_for_status().json()["events"]
    ops = api.get("/operations", params={"conversation_id": conversation_id, "limit": 500}).raise_for_status()
    by_id = {o["operation_id"]: o for o in ops.json()["operations"]}
    stats = summary["stats"] or {}
    story = Story(
        conversation_id,
        summary["title"] or conversation_id,
        summary["execution_status"] or "?",
        summary["events"],
        stats.get("llm_calls", 0),
        stats.get("prompt_tokens", 0) + stats.get("completion_tokens", 0),
        stats.get("cost", 0.0),
        facts=api.get(f"/conversations/{conversation_id}/status").json(),
    )
    for event in view:
        if event["kind"] != "action":
            continue
        op = by_id.get(event["operation_id"])
        if op is not None:
            op["ledger"] = api.get(f"/operations/{op['operation_id']}").json().get("ledger", [])
        status, how = _how(op, event["effect_class"])
        arguments = json.loads(event["arguments"]) if event["arguments"] else {}
        story.effects.append(Effect(event["tool_name"], _what(arguments), status, how))
    return story


def _tick(value: bool) -> str:
    return "yes" if value else "NO"


def tell(
    out: Any,
    stories: list[Story],
    crash: CrashStory | None,
    extras: dict[str, Any],
) -> None:
    """Print the story (`out` is a rich Console); `tell_keep` ends it with --keep."""
    out.print(
        f"\n[bold]1. {len(stories)} agent conversations[/bold], each sent to the inbox and run by a "
        "fleet runner"
    )
    for story in stories:
        out.print(
            f"\n  [bold]{story.title}[/bold]  ({story.conversation_id})\n"
            f"  {story.status}: {story.events} events, {story.llm_calls} LLM calls, {story.tokens:,} tokens, "
            f"${story.cost:.4f}"
        )
        for effect in story.effects:
            out.print(f"    {effect.tool:<13} {effect.what:<34} {effect.how}", highlight=False)
        facts = story.facts
        out.print(
            f"    the agent says done: {_tick(facts.get('agent_says_done', False))} · the run loop stopped: "
            f"{_tick(facts.get('run_loop_stopped', False))} · every effect confirmed: "
            f"{_tick(facts.get('effects_all_confirmed', False))}"
        )
    if crash is not None:
        out.print("\n[bold]2. A runner killed in the middle of a side effect[/bold]")
        out.print(
            f"  {crash.conversation_id}: runner A (pid {crash.killed_pid}) asked the tracker to create an "
            "issue and was SIGKILLed after the call, before it could record the answer.\n"
            f"  Runner B (pid {crash.resumed_pid}) took over the conversation, found operation "
            f"{crash.operation_id} started but never observed, and asked the tracker by the operation id "
            f"instead of calling again: it had happened (receipt {crash.receipt}). B recorded it "
            f"(confirmed by: {crash.confirmed_by}; observation backfilled: {_tick(crash.backfilled)}) "
            f"and the conversation {crash.status}.",
            highlight=False,
        )
        out.print(
            f"  [bold]The tracker's own count:[/bold] {crash.provider_creations} issue created for this "
            f"operation (its idempotency key), {crash.provider_mutations_in_act} change made by the tracker "
            "during this act. Done twice: never.",
            highlight=False,
        )
    else:
        out.print(
            "\n[bold]2. A runner killed in the middle of a side effect[/bold]: not played with --runners N "
            "(run the demo with one runner to see it)."
        )
    out.print("\n[bold]3. The read side and the archive[/bold]")
    archive = (
        f"{extras['archive_objects']} archive objects in S3, and the archive's export of a conversation "
        f"equals Kafka's: {_tick(bool(extras.get('archive_export_equals_kafka')))}."
        if "archive_objects" in extras
        else "no archive is configured (CONVDB_ARCHIVE_URL)."
    )
    out.print(
        "  Titles, stats, views and the effect ledger above were read back through the query API "
        f"that the console uses; {archive}",
        highlight=False,
    )


def tell_keep(out: Any, console_url: str) -> None:
    """The story's last lines with --keep: where the console is (only then is it still there once
    the story is told) and how to stop the stack."""
    out.print(f"\n[bold]Console:[/bold] {console_url}/  (sign in with the API key [bold]demo-key[/bold])")
    out.print(
        "The stack keeps running (broker, read side, runner, console). Press Ctrl-C to stop it "
        "(or `kill -INT` this process)."
    )
