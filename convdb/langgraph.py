"""LangGraph on convdb (`pip install convdb[langgraph]`, docs/langgraph.md).

`ConvdbSaver(settings)` is a LangGraph checkpointer whose checkpoints and task writes are typed
records on the `graph` topic, keyed by thread id (= conversation id), each written in a Kafka
transaction by the fenced writer of the thread's partition.
"""

from __future__ import annotations

from convdb.producers.graph_saver import ConvdbSaver, graph_transactional_id

__all__ = ["ConvdbSaver", "graph_transactional_id"]
