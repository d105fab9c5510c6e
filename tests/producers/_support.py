"""Helpers for the agent-runtime tests: settings for child processes, reading records back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from infra.reader import read_topic
from infra.settings import Settings
from schemas import SingleObjectCodec
from schemas.topics import EFFECTS, EVENTS, Topic


def direct(settings: Settings, **runtime: Any) -> Settings:
    """Settings with the scripted model run without litellm (child processes start in ~1 s)."""
    llm = settings.llm.model_copy(update={"scripted_backend": "direct"})
    rt = settings.runtime.model_copy(update=runtime)
    return settings.model_copy(update={"llm": llm, "runtime": rt})


def runner_cmd(command: str, conversation: str, workspace: Path, tracker: str, task: str = "") -> list[str]:
    """argv of `python -m producers.runner`."""
    argv = [sys.executable, "-m", "producers.runner", command, *([task] if task else [])]
    return argv + [
        "--conversation",
        conversation,
        "--workspace",
        str(workspace),
        "--tracker-url",
        tracker,
        "--tenant",
        "t1",
    ]


def start(argv: list[str], settings: Settings, **env: str) -> subprocess.Popen[str]:
    """Start a runner child with the settings (and extra variables) in its environment."""
    full = {**_base_env(), **settings.to_env(), **env}
    return subprocess.Popen(argv, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}


def records(settings: Settings, topic: Topic, conversation: str | None = None) -> list[Any]:
    """Every decoded record of a topic (optionally of one conversation), per-partition order.

    Reads to the end the fetch reports (no waiting for a count).
    """
    codec = SingleObjectCodec()
    out = [codec.decode(m.value()) for m in read_topic(settings, topic.name(settings.namespace))]
    return [r for r in out if conversation is None or r.conversation_id == conversation]


def by_conversation(items: list[Any]) -> dict[str, list[Any]]:
    """Records grouped by conversation id, order kept."""
    out: dict[str, list[Any]] = {}
    for item in items:
        out.setdefault(item.conversation_id, []).append(item)
    return out


def events(settings: Settings, conversation: str) -> list[Any]:
    """The conversation's events in seq order."""
    return sorted(records(settings, EVENTS, conversation), key=lambda e: e.seq)


def ledger(settings: Settings, conversation: str) -> list[Any]:
    """The conversation's ledger records in log order."""
    return records(settings, EFFECTS, conversation)


def last_json_line(text: str) -> dict[str, Any]:
    """The last JSON line a runner printed."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}
