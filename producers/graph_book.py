"""LangGraph graphs a fleet runner hosts: the `convdb.graphs` entry points and `--graph module:attr`.

A graph is named like an agent: by its entry-point name (`[project.entry-points."convdb.graphs"]
checkout = "shop.graph:make"`), which a message may name in its `agent` field, or by the
operator's `--graph module:attr` (the runner's default: conversations whose first message names
no agent run it). The object named is a compiled graph, a `StateGraph` (compiled here), or a
factory `make(settings)` returning either. The runner compiles or copies it once per partition
it owns, with that partition's hosted checkpointer (`convdb.producers.graph_host`).

This module imports nothing of LangGraph: a runner that hosts no graph never loads it.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from convdb.infra.agent_names import GRAPHS_GROUP, REFERENCE
from convdb.infra.settings import Settings
from convdb.producers.errors import AgentLoadError, UnknownAgentError

logger = logging.getLogger(__name__)


def installed_graphs() -> list[str]:
    """The names of the `convdb.graphs` entry points."""
    return sorted(ep.name for ep in entry_points(group=GRAPHS_GROUP))


@dataclass
class GraphBook:
    """The graphs one runner hosts: `default` (`--graph`, may be `module:attr`) and the installed ones.

    A graph's object is loaded once and kept (a failure is remembered, as agents' are).
    """

    settings: Settings
    default: str | None = None
    _graphs: dict[str, Any] = field(default_factory=dict)
    _errors: dict[str, Exception] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _installed: frozenset[str] | None = None

    def hosts(self, name: str | None) -> bool:
        """True when conversations under `name` (None: the runner's default) run a graph here."""
        if name is None:
            return self.default is not None
        return name == self.default or name in self.installed()

    def installed(self) -> frozenset[str]:
        """The installed graphs' names, read once per book: `hosts` is asked for every conversation
        a runner creates or restores, and reading the entry points scans every installed package's
        metadata (22 ms here: a takeover of 1,000 conversations spent 22 s in it)."""
        if self._installed is None:
            self._installed = frozenset(installed_graphs())
        return self._installed

    def name_of(self, name: str | None) -> str:
        """The graph's name (`name`, or the default)."""
        found = name or self.default
        if found is None:
            raise UnknownAgentError("no graph named and no --graph default")
        return found

    def get(self, name: str) -> Any:
        """The graph object (what `load_graph` returns), loaded on first use.

        Raises:
            UnknownAgentError, AgentLoadError: as `load_graph` (remembered: not retried).
        """
        with self._lock:
            if name in self._graphs:
                return self._graphs[name]
            if name in self._errors:
                raise self._errors[name]
            try:
                graph = load_graph(name, self.settings)
            except (UnknownAgentError, AgentLoadError) as exc:
                logger.error("graph %s: %s", name, exc)
                self._errors[name] = exc
                raise
            self._graphs[name] = graph
            logger.info("graph %s loaded", name)
            return graph


def load_graph(name: str, settings: Settings) -> Any:
    """The compiled graph or `StateGraph` that `name` refers to, made with `settings` if a factory.

    Raises:
        UnknownAgentError: no such entry point, and not `module:attr`.
        AgentLoadError: the module, the attribute or the factory failed, or made no graph.
    """
    from convdb.producers.agents import _target

    if not REFERENCE.match(name) and name not in installed_graphs():
        raise UnknownAgentError(
            f"unknown graph {name!r}: not in the {GRAPHS_GROUP!r} entry points "
            f"({', '.join(installed_graphs()) or 'none'}) and not module:attr"
        )
    try:
        obj, origin = _target(name, GRAPHS_GROUP)
        if not _is_graph(obj) and callable(obj):
            obj = obj(settings)
    except Exception as exc:
        raise AgentLoadError(f"graph {name!r} does not load: {type(exc).__name__}: {exc}") from exc
    if not _is_graph(obj):
        raise AgentLoadError(
            f"graph {name!r} ({origin}) is a {type(obj).__name__}, not a compiled LangGraph graph, a "
            "StateGraph, or a factory of one"
        )
    return obj


def _is_graph(obj: Any) -> bool:
    """A compiled graph (it has `get_state` and `copy`) or a builder (it has `compile`)."""
    return (hasattr(obj, "get_state") and hasattr(obj, "copy")) or (
        hasattr(obj, "compile") and hasattr(obj, "add_node")
    )
