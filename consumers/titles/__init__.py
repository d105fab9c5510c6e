"""The titles consumer: a title per conversation; optional LLM titles published as events."""

from convdb.consumers.titles.projector import TitlesConsumer
from convdb.consumers.titles.service import TitleService, title_event_id

__all__ = ["TitleService", "TitlesConsumer", "title_event_id"]
