"""Helpers for the agent-runtime tests: runner processes, the inbox, reading records back."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from convdb.infra.producer import DurableProducer
from convdb.infra.reader import read_topic
from convdb.infra.settings import Settings
from convdb.producers.conversation import Conversation
from convdb.producers.publisher import EventPublisher
from convdb.producers.runtime import Runtime, build_runtime
from convdb.producers.sink import DurableSink
from convdb.schemas import InboxMessage, SingleObjectCodec, StateUpdateEvent
from convdb.schemas.topics import EFFECTS, EVENTS, INBOX, Topic


def direct(settings: Settings, **runtime: Any) -> Settings:
    """Settings with the scripted model run without litellm (child processes start in ~1 s)."""
    llm = settings.llm.model_copy(update={"scripted_backend": "direct"})
    rt = settings.runtime.model_copy(update=runtime)
    return settings.model_copy(update={"llm": llm, "runtime": rt})


def runner_cmd(workspace: Path, tracker: str | None = None, idle_exit: float = 0.0) -> list[str]:
    """argv of a fleet runner process (`python -m convdb runner`), exiting when idle if asked."""
    argv = [sys.executable, "-m", "convdb", "runner", "--workspace", str(workspace)]
    argv += ["--tracker-url", tracker] if tracker else []
    return argv + (["--idle-exit", str(idle_exit)] if idle_exit else [])


def send(
    settings: Settings,
    conversation: str,
    content: str,
    *,
    command: str = "message",
    tenant: str = "t1",
    **fields: Any,
) -> str:
    """One inbox record (a user message unless `command` says otherwise), durable; returns its id."""
    message = InboxMessage(
        id=str(uuid.uuid4()), conversation_id=conversation, tenant_id=tenant,
        timestamp=datetime.now(UTC), command=command, content=content, **fields,
    )  # fmt: skip
    DurableProducer(settings).send(INBOX.name(settings.namespace), conversation, CODEC.encode(message))
    return message.id


def final_status(settings: Settings, conversation: str) -> str | None:
    """The last execution status the conversation's events record."""
    updates = [e for e in events(settings, conversation) if isinstance(e, StateUpdateEvent)]
    return updates[-1].execution_status if updates else None


@dataclass
class Standalone:
    """Conversations over an idempotent sink, created directly (no runner owns them)."""

    runtime: Runtime
    sink: DurableSink

    def create(self, conversation_id: str, tenant_id: str) -> Conversation:
        """A new conversation."""
        return self.runtime.create(conversation_id, tenant_id, self.sink)


def standalone(settings: Settings, **build: Any) -> tuple[Standalone, EventPublisher]:
    """The standard runtime (`build_runtime` arguments) and the publisher under its sink."""
    runtime = build_runtime(settings, **build)
    publisher = EventPublisher(settings, runtime.codec)
    return Standalone(runtime, DurableSink(publisher)), publisher


def start(argv: list[str], settings: Settings, **env: str) -> subprocess.Popen[str]:
    """Start a runner child with the settings (and extra variables) in its environment."""
    full = {**_base_env(), **settings.to_env(), **env}
    return subprocess.Popen(argv, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("CONVDB_")}


CODEC = SingleObjectCodec()


def records(settings: Settings, topic: Topic, conversation: str | None = None) -> list[Any]:
    """Every decoded record of a topic (optionally of one conversation), per-partition order.

    Reads to the end the fetch reports (no waiting for a count).
    """
    out = [CODEC.decode(m.value()) for m in read_topic(settings, topic.name(settings.namespace))]
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
