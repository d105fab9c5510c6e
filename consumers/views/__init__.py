"""The views consumer: the active branch of every conversation, in the store."""

from convdb.consumers.views.projector import ViewsConsumer
from convdb.consumers.views.queries import load_state

__all__ = ["ViewsConsumer", "load_state"]
