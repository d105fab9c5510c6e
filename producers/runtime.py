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
from convdb.producers.agents import DEFAULT_AGENT, AgentBook
from convdb.producers.conversation import Conversation
from convdb.producers.crashpoints import NO_CRASH, CrashPoints
from convdb.producers.errors import UnknownAgentError
from convdb.producers.graph_book import GraphBook
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
    agents: AgentBook | None = None
    """The agents conversations may name (None: only `agent`, under the name `default`)."""
    agent_name: str = DEFAULT_AGENT
    """The name `agent` (the default agent of this process) is loaded under."""
    graphs: GraphBook | None = None
    """The LangGraph graphs conversations may name, and the default one (`--graph`), if any."""
    _llms: dict[str, LLMClient] = field(default_factory=dict)

    def agent_for(self, name: str | None, *, recorded: bool = False) -> tuple[str, Agent, LLMClient]:
        """The agent called `name` (None: the default), its name, and an LLM client for its model.

        `recorded`: the name comes from the conversation's log (a runner wrote it), not a message:
        it may be `module:attr`.

        Raises:
            UnknownAgentError, AgentLoadError: `name` cannot be loaded here.
        """
        if name is None or name == self.agent_name:
            return self.agent_name, self.agent, self.llm
        if self.agents is None:
            raise UnknownAgentError(f"unknown agent {name!r}: this runtime runs only {self.agent_name!r}")
        name, agent = self.agents.get(name, recorded=recorded)
        if agent.model == self.agent.model:
            return name, agent, self.llm
        if agent.model not in self._llms:
            self._llms[agent.model] = _llm(self.settings, agent.model)
        return name, agent, self._llms[agent.model]

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
            agent_name=self.agent_name,
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
    agent: str | None = None,
    graph: str | None = None,
) -> Runtime:
    """The runtime: its default agent is `agent` (a `convdb.agents` name or `module:attr`; None
    or `default`: the standard tools), `model` (when given) replaces every agent's model.
    `graph` (a `convdb.graphs` name or `module:attr`) is the default instead: conversations whose
    first message names no agent run that LangGraph graph (`producers.graph_host`).

    Raises:
        UnknownAgentError, AgentLoadError: the default agent or graph cannot be loaded.
    """

    def builtin() -> Agent:
        return Agent(
            model=model or settings.llm.model,
            tools=standard_tools(workspace, tracker_url, settings.runtime.tool_timeout_s),
            confirmation=confirmation or ConfirmationPolicy(),
        )

    book = AgentBook(settings, builtin, default=agent or DEFAULT_AGENT, model=model)
    graphs = GraphBook(settings, default=graph)
    if graph is not None:
        graphs.get(graph)  # a bad --graph fails the command now, not a conversation later
    name, default = book.get(None)
    codec = make_codec(settings.schema_registry_url)
    registered = {**settings.secret_values(), **(secrets or {})}  # CONVDB_SECRETS, then the caller's
    return Runtime(
        settings,
        codec,
        default,
        _llm(settings, default.model),
        secrets=SecretsRegistry(registered),
        crash=crash,
        agents=book,
        agent_name=name,
        graphs=graphs,
    )


def _llm(settings: Settings, model: str) -> LLMClient:
    llm = make_llm(settings.llm, model)
    if isinstance(llm, LitellmClient):
        llm.warm_up()  # pay the ~5 s import now, not inside the first step
    return llm
