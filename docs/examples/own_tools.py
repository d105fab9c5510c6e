"""convdb's own Agent with your tools and their effect classes, run by a fleet runner in this process.

    python docs/examples/own_tools.py            # a broker from CONVDB_*, else an embedded one

A `keyed` tool (the provider honours an idempotency key: here the operation id) that can be
looked up after a crash, and a `read_only` one. The offline scripted model follows the
`!tool {...}` directives of the message; set CONVDB_LLM__MODEL (e.g. gpt-4o-mini, with its key)
for a real one.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from convdb.infra.cli.run import broker_for, send_task
from convdb.infra.settings import Settings
from convdb.producers.agent import Agent
from convdb.producers.errors import EffectError
from convdb.producers.fleet import FleetContext, SnapshotStore, serve_until
from convdb.producers.llm import make_llm
from convdb.producers.runtime import Runtime
from convdb.producers.status import STOP_STATUSES
from convdb.producers.tools import Operation, Tool, ToolResult
from convdb.producers.tools.base import ToolArgs
from convdb.schemas import make_codec
from convdb.schemas._types import EffectClass


class NoteArgs(ToolArgs):
    """Arguments of add_note."""

    text: str = Field(description="What to note.")


class AddNote(Tool):
    """Appends a note to a ledger file; the operation id is the idempotency key."""

    name: ClassVar[str] = "add_note"
    description: ClassVar[str] = "Add a note to the team's notebook."
    effect_class: ClassVar[EffectClass] = "keyed"
    Args: ClassVar[type[ToolArgs]] = NoteArgs
    supports_lookup: ClassVar[bool] = True
    notebook: Path

    def _notes(self) -> dict[str, str]:
        return json.loads(self.notebook.read_text()) if self.notebook.exists() else {}

    def execute(self, operation: Operation) -> ToolResult:
        """Add the note unless this operation already did (a retry with the same key)."""
        notes = self._notes()
        notes.setdefault(operation.operation_id, operation.arguments["text"])
        self.notebook.write_text(json.dumps(notes))
        return ToolResult(f"noted ({len(notes)} notes)", provider_receipt=operation.operation_id)

    def lookup(self, operation: Operation) -> ToolResult | None:
        """After a crash: the note is there (done) or not (provably not done)."""
        if operation.operation_id in self._notes():
            return ToolResult("noted", provider_receipt=operation.operation_id)
        return None


class CountNotes(Tool):
    """Reads the notebook."""

    name: ClassVar[str] = "count_notes"
    description: ClassVar[str] = "Count the notes in the notebook."
    effect_class: ClassVar[EffectClass] = "read_only"
    Args: ClassVar[type[ToolArgs]] = ToolArgs
    notebook: Path

    def execute(self, operation: Operation) -> ToolResult:  # noqa: ARG002 - no arguments
        """The number of notes."""
        if not self.notebook.exists():
            raise EffectError("the notebook does not exist yet")
        return ToolResult(f"{len(json.loads(self.notebook.read_text()))} notes")


def main() -> int:
    """Run one conversation with these tools to a stop state and print its events."""
    settings = Settings()
    notebook = settings.data_dir / "notebook.json"
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    agent = Agent(model=settings.llm.model, tools=(AddNote(notebook=notebook), CountNotes(notebook=notebook)))
    task = '!add_note {"text": "ship the OpenHands bridge"}\n!count_notes {}'
    cid = str(uuid.uuid4())
    with broker_for(settings, with_s3=False) as live:
        runtime = Runtime(live, make_codec(live.schema_registry_url), agent, make_llm(live.llm, agent.model))
        ctx = FleetContext(live, runtime, SnapshotStore(live.data_dir / f"example-{cid}.sqlite"))
        message = send_task(live, cid, "default", task)

        def stopped(runner: object) -> bool:
            conv = runner.conversations().get(cid)  # type: ignore[attr-defined]
            return conv is not None and message in conv.state.view.events and conv.status in STOP_STATUSES

        runner = serve_until(ctx, stopped, timeout=120)
        ctx.store.close()
    conv = runner.at_exit[cid]
    for event in conv.state.view.log:
        text = str(getattr(event, "content", "")).splitlines()[:1]
        print(f"{event.seq:>3} {event.kind:<12} {getattr(event, 'tool_name', '')} {' '.join(text)}")
    print(f"{cid}: {conv.status}; notebook: {notebook.read_text()}")
    return 0 if conv.status == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
