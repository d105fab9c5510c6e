"""The index consumer: every event, searchable by conversation, kind, source and time."""

from consumers.index.projector import IndexConsumer
from consumers.index.search import Page, search

__all__ = ["IndexConsumer", "Page", "search"]
