"""LangGraph on convdb (`pip install convdb[langgraph]`, docs/langgraph.md).

`ConvdbSaver(settings)` is a LangGraph checkpointer whose checkpoints and task writes are typed
records on the `graph` topic, keyed by thread id (= conversation id), each written in a Kafka
transaction by the fenced writer of the thread's partition. `@effect(...)` runs a node's or a
tool's provider call under convdb's effect protocol, so a node re-run after a crash never makes
the call twice.
"""

from __future__ import annotations

from convdb.producers.graph_effects import Lookup, effect
from convdb.producers.graph_saver import ConvdbSaver, graph_transactional_id
from convdb.projections.settlement import LookupResult

__all__ = ["ConvdbSaver", "Lookup", "LookupResult", "effect", "graph_transactional_id"]
