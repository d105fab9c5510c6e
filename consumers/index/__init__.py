"""The index consumer: every event, searchable by conversation, kind, source and time."""

from convdb.consumers.index.projector import IndexConsumer
from convdb.consumers.index.search import Page, search

__all__ = ["IndexConsumer", "Page", "search"]
