"""Agent names: the `convdb.agents` / `convdb.tools` entry-point groups and what a name may be.

Shared by the runner (which loads agents, `convdb.producers.agents`) and the API (which refuses
an inbox message naming an agent no runner could load).
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points

AGENTS_GROUP = "convdb.agents"
"""Entry-point group of agents: name -> `Agent` or `make(settings) -> Agent`."""

GRAPHS_GROUP = "convdb.graphs"
"""Entry-point group of LangGraph graphs a runner hosts: name -> a compiled graph, a `StateGraph`,
or `make(settings)` returning either (`convdb.producers.graph_book`, docs/langgraph.md)."""

TOOLS_GROUP = "convdb.tools"
"""Entry-point group of tools: name -> `Tool` or `make(settings) -> Tool | Sequence[Tool]`."""

DEFAULT_AGENT = "default"
"""The built-in agent's name."""

DELEGATOR_AGENT = "delegator"
"""The built-in agent with the delegation tools (`task`, `delegate`) added."""

REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
"""`module:attr`: an agent named by where it is, importable on the runner's path. Only an operator
names one (`--agent` of `convdb runner` / `convdb run`): a message may name installed agents only,
since a runner would import and call whatever a message named."""


def installed_agents() -> list[str]:
    """The names of the installed agents (`convdb.agents` entry points, and the LangGraph graphs of
    `convdb.graphs`, which a message names the same way), plus the built-in ones."""
    named = [ep.name for group in (AGENTS_GROUP, GRAPHS_GROUP) for ep in entry_points(group=group)]
    return sorted({DEFAULT_AGENT, DELEGATOR_AGENT, *named})


def is_agent_name(name: str) -> bool:
    """True for a name a message may carry: a built-in or an installed agent."""
    return name in installed_agents()


def unknown_agent_message(name: str) -> str:
    """Why a message naming `name` is refused, with the names that would do."""
    return (
        f"unknown agent {name!r}: a message names an installed agent, one of the {AGENTS_GROUP!r} entry "
        f"points ({', '.join(installed_agents())}); module:attr is only for a runner's own --agent"
    )
