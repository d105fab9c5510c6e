"""Agents and tools as plug-ins: the `convdb.agents` and `convdb.tools` entry-point groups.

An agent is named by its entry-point name (`[project.entry-points."convdb.agents"] triage =
"mypkg.agent:make"`) or, by an operator (`--agent`), by `module:attr` (an importable module on
the runner's path); a message names installed agents only. The object named is an `Agent`, or a
factory `make(settings) -> Agent`. `default` names the built-in agent (file tools, plus the
tracker tools when a tracker URL is given); `delegator` is the built-in agent with the delegation
tools (`task`, `delegate`, `report`).

A `convdb.tools` entry point names a `Tool`, or a factory `make(settings) -> Tool | sequence of
Tool`; an agent factory collects them with `installed_tools(settings, *names)`.

A runner loads each agent the first time a conversation needs it and keeps it. A name that
cannot be loaded is an error the inbox record carries to the DLQ (`UnknownAgentError`,
`AgentLoadError`); the runner never falls back to another agent.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from convdb.infra.agent_names import (
    AGENTS_GROUP,
    DEFAULT_AGENT,
    DELEGATOR_AGENT,
    REFERENCE,
    TOOLS_GROUP,
    installed_agents,
    is_agent_name,
    unknown_agent_message,
)
from convdb.infra.settings import Settings
from convdb.producers.agent import Agent
from convdb.producers.errors import AgentLoadError, UnknownAgentError
from convdb.producers.tools.base import Tool
from convdb.producers.tools.delegation import with_delegation

logger = logging.getLogger(__name__)


def _target(name: str, group: str) -> tuple[Any, str]:
    """The object `name` refers to (an entry point of `group`, or `module:attr`), and its origin."""
    for ep in entry_points(group=group):
        if ep.name == name:
            return ep.load(), ep.value
    if REFERENCE.match(name):
        module, _, attr = name.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj, name
    names = (
        installed_agents() if group == AGENTS_GROUP else sorted(ep.name for ep in entry_points(group=group))
    )
    what = "agent" if group == AGENTS_GROUP else "tool"
    raise UnknownAgentError(
        f"unknown {what} {name!r}: not in the {group!r} entry points ({', '.join(names) or 'none'}) "
        "and not module:attr"
    )


def load_agent(name: str, settings: Settings) -> Agent:
    """The agent called `name`, built with `settings`.

    Raises:
        UnknownAgentError: no such entry point, and not `module:attr`.
        AgentLoadError: the module, the attribute or the factory failed, or made no `Agent`.
    """
    try:
        obj, origin = _target(name, AGENTS_GROUP)
    except UnknownAgentError:
        raise
    except Exception as exc:
        raise AgentLoadError(f"agent {name!r} does not load: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, Agent) and not callable(obj):
        raise AgentLoadError(
            f"agent {name!r} ({origin}) is a {type(obj).__name__}, not a convdb.Agent or a factory"
        )
    try:
        agent = obj if isinstance(obj, Agent) else obj(settings)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise AgentLoadError(f"agent {name!r} ({origin}): its factory raised {why}") from exc
    if not isinstance(agent, Agent):
        raise AgentLoadError(f"agent {name!r} ({origin}) made a {type(agent).__name__}, not a convdb.Agent")
    return agent


def installed_tools(settings: Settings, *names: str) -> tuple[Tool, ...]:
    """The tools of the `convdb.tools` entry points `names` (or module:attr), built with `settings`.

    Raises:
        UnknownAgentError: a name that is not installed.
        AgentLoadError: a tool that does not load or whose factory fails.
    """
    tools: list[Tool] = []
    for name in names:
        try:
            obj, origin = _target(name, TOOLS_GROUP)
            made = obj if isinstance(obj, Tool) else obj(settings)
        except UnknownAgentError:
            raise
        except Exception as exc:
            raise AgentLoadError(f"tool {name!r} does not load: {type(exc).__name__}: {exc}") from exc
        made = (made,) if isinstance(made, Tool) else tuple(made)
        if not all(isinstance(t, Tool) for t in made):
            raise AgentLoadError(f"tool {name!r} ({origin}) made something that is not a convdb.Tool")
        tools += made
    return tuple(tools)


@dataclass
class AgentBook:
    """The agents one runner serves: loaded on first use and kept, failures remembered.

    `default` names the agent of a conversation whose messages name none; `model` (the
    `--model` flag) replaces every loaded agent's model.
    """

    settings: Settings
    builtin: Callable[[], Agent]
    default: str = DEFAULT_AGENT
    model: str | None = None
    _agents: dict[str, Agent] = field(default_factory=dict)
    _errors: dict[str, Exception] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, name: str | None, *, recorded: bool = False) -> tuple[str, Agent]:
        """The name and agent for `name` (None: the default): the default (`--agent`, which may be
        `module:attr`) or an installed agent; any name when `recorded` (read from the conversation's
        log, which only runners write).

        Raises:
            UnknownAgentError, AgentLoadError: as `load_agent` (remembered: not retried).
        """
        name = name or self.default
        if not recorded and name != self.default and name not in installed_agents():
            # From a message: never import and call what a message names (module:attr).
            raise UnknownAgentError(unknown_agent_message(name))
        with self._lock:  # partitions' conversations may ask at once: one load per agent
            return self._get(name)

    def _get(self, name: str) -> tuple[str, Agent]:
        if name in self._agents:
            return name, self._agents[name]
        if name in self._errors:
            raise self._errors[name]
        try:
            if name == DEFAULT_AGENT:
                agent = self.builtin()
            elif name == DELEGATOR_AGENT:
                agent = with_delegation(self.builtin())
            else:
                agent = load_agent(name, self.settings)
        except (UnknownAgentError, AgentLoadError) as exc:
            logger.error("agent %s: %s", name, exc)
            self._errors[name] = exc
            raise
        if self.model:
            agent = agent.model_copy(update={"model": self.model})
        self._agents[name] = agent
        logger.info("agent %s loaded: version %s, tools %s", name, agent.version, tool_names(agent.tools))
        return name, agent

    def loaded(self) -> dict[str, Agent]:
        """The agents loaded so far, by name."""
        return dict(self._agents)


def tool_names(tools: Sequence[Tool]) -> tuple[str, ...]:
    """The names of `tools`, in order."""
    return tuple(t.name for t in tools)


__all__ = [
    "AGENTS_GROUP",
    "DEFAULT_AGENT",
    "TOOLS_GROUP",
    "AgentBook",
    "installed_agents",
    "installed_tools",
    "is_agent_name",
    "load_agent",
]
