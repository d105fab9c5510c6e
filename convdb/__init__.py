"""convdb: conversation as database. Agent conversations as typed, append-only event streams on Kafka.

This module is the public surface: what a program that runs, extends or reads convdb imports.
The packages below it (`convdb.schemas`, `convdb.projections`, `convdb.producers`,
`convdb.consumers`, `convdb.infra`) are the implementation, laid out as DESIGN §3 describes.

Writing an agent (docs/own-agent.md):

- a tool is `@convdb.tool(effect=..., lookup=..., receipt=...)` over a function, or a
  `convdb.Tool` subclass (`name`, `description`, `effect_class`, `Args`, `execute`, `lookup`);
- its effect class is one of `EFFECT_CLASSES` (read_only, idempotent, keyed, irreversible);
- it raises `EffectError` (definite failure) or `OutcomeUnknownError` (may have acted); the
  runtime raises `ToolArgumentError` for arguments its `Args` model rejects;
- an agent is a frozen `convdb.Agent(model=..., system_prompt=..., tools=(...), confirmation=...)`
  whose `version` digests its configuration;
- delegation: `with_delegation(agent)` adds the tools `task`, `delegate` and `report`
  (`delegation_tools()`), with which an agent hands tasks to child conversations (and a child
  states its result);
- plug-ins: entry points `convdb.agents` (name -> `make(settings) -> Agent`) and `convdb.tools`
  (name -> `make(settings) -> Tool`), or `module:attr` on `convdb run/runner --agent`.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from convdb.infra.connection import load_settings
from convdb.infra.settings import Settings
from convdb.producers.agent import Agent, Condenser, ConfirmationPolicy, SecurityAnalyzer
from convdb.producers.agents import (
    AGENTS_GROUP,
    DEFAULT_AGENT,
    TOOLS_GROUP,
    installed_agents,
    installed_tools,
    load_agent,
)
from convdb.producers.conversation import Conversation
from convdb.producers.errors import (
    AgentLoadError,
    EffectError,
    OutcomeUnknownError,
    ToolArgumentError,
    UnknownAgentError,
)
from convdb.producers.tools.base import Operation, Tool, ToolArgs, ToolResult
from convdb.producers.tools.delegation import delegation_tools, with_delegation
from convdb.producers.tools.function import EFFECT_CLASSES, tool
from convdb.schemas._types import EffectClass

try:
    __version__ = version("convdb")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AGENTS_GROUP",
    "DEFAULT_AGENT",
    "EFFECT_CLASSES",
    "TOOLS_GROUP",
    "Agent",
    "AgentLoadError",
    "Condenser",
    "ConfirmationPolicy",
    "Conversation",
    "EffectClass",
    "EffectError",
    "Operation",
    "OutcomeUnknownError",
    "SecurityAnalyzer",
    "Settings",
    "Tool",
    "ToolArgs",
    "ToolArgumentError",
    "ToolResult",
    "UnknownAgentError",
    "__version__",
    "delegation_tools",
    "installed_agents",
    "installed_tools",
    "load_agent",
    "load_settings",
    "tool",
    "with_delegation",
]
