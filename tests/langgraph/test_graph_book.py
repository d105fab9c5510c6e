"""Which graphs a runner hosts (`producers.graph_book`): names, loading, and what is refused."""

from __future__ import annotations

import pytest

from convdb.infra.agent_names import installed_agents
from convdb.infra.settings import Settings
from convdb.producers.errors import AgentLoadError, UnknownAgentError
from convdb.producers.graph_book import GraphBook, load_graph

SETTINGS = Settings(_env_file=None)  # type: ignore[call-arg]


def test_a_factory_is_called_with_the_settings_and_its_builder_is_kept() -> None:
    book = GraphBook(SETTINGS, default="tests.langgraph.hosted_graph:make")
    graph = book.get("tests.langgraph.hosted_graph:make")
    assert hasattr(graph, "compile") and book.get("tests.langgraph.hosted_graph:make") is graph
    assert book.hosts(None) and book.hosts("tests.langgraph.hosted_graph:make")
    assert not book.hosts("default") and not GraphBook(SETTINGS).hosts(None)


def test_what_is_not_a_graph_is_refused_with_the_reason() -> None:
    with pytest.raises(UnknownAgentError, match="unknown graph 'checkout'.*convdb.graphs"):
        load_graph("checkout", SETTINGS)
    with pytest.raises(AgentLoadError, match="ModuleNotFoundError"):
        load_graph("no_such_module:make", SETTINGS)
    with pytest.raises(AgentLoadError, match="is a str, not a compiled LangGraph graph"):
        load_graph("tests.langgraph.test_graph_book:NOT_A_GRAPH", SETTINGS)
    book = GraphBook(SETTINGS)
    for _ in range(2):  # the failure is remembered, not retried
        with pytest.raises(AgentLoadError):
            book.get("no_such_module:make")


def test_a_message_may_name_installed_agents_only() -> None:
    assert "tests.langgraph.hosted_graph:make" not in installed_agents()


NOT_A_GRAPH = "a string"
