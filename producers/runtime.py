"""What every conversation of a process shares: settings, codec, the agent, its model, secrets.

The fleet (`producers.fleet`, served by `convdb runner`) is the one runtime that owns, restores and drives
conversations;
`Runtime.create` also builds a conversation over any sink for tests and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from convdb.infra.settings import Settings
from convdb.producers.agent import Agent, ConfirmationPolicy
from convdb.producers.conversation import Conversation
from convdb.producers.crashpoints import NO_CRASH, CrashPoints
from convdb.producers.llm import LitellmClient, LLMClient, make_llm
from convdb.producers.secrets import SecretsRegistry
from convdb.producers.sink import RecordSink
from convdb.producers.tools import standard_tools
from convdb.schemas import Codec, make_codec


@dataclass
class Runtime:
    """Everything a conversation needs besides its own state and its writer."""

    settings: Settings
    codec: Codec
    agent: Agent
    llm: LLMClient
    secrets: SecretsRegistry = field(default_factory=SecretsRegistry)
    crash: CrashPoints = NO_CRASH

    def create(self, conversation_id: str, tenant_id: str, sink: RecordSink) -> Conversation:
        """A new, empty conversation written through `sink` (no partition owner keeps it)."""
        return Conversation(
            conversation_id,
            tenant_id,
            self.agent,
            sink,
            self.llm,
            runtime=self.settings.runtime,
            secrets=self.secrets,
            crash=self.crash,
        )


def build_runtime(
    settings: Settings,
    *,
    workspace: Path,
    tracker_url: str | None = None,
    secrets: dict[str, str] | None = None,
    model: str | None = None,
    confirmation: ConfirmationPolicy | None = None,
    crash: CrashPoints = NO_CRASH,
) -> Runtime:
    """The runtime with the standard tools and the configured model."""
    agent = Agent(
        model=model or settings.llm.model,
        tools=standard_tools(workspace, tracker_url, settings.runtime.tool_timeout_s),
        confirmation=confirmation or ConfirmationPolicy(),
    )
    llm = make_llm(settings.llm, agent.model)
    if isinstance(llm, LitellmClient):
        llm.warm_up()  # pay the ~5 s import now, not inside the first step
    codec = make_codec(settings.schema_registry_url)
    registered = {**settings.secret_values(), **(secrets or {})}  # CONVDB_SECRETS, then the caller's
    return Runtime(settings, codec, agent, llm, secrets=SecretsRegistry(registered), crash=crash)
