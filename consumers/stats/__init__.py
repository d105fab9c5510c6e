"""The stats consumer: per-conversation statistics in the store."""

from convdb.consumers.stats.projector import StatsConsumer, conversations, from_row, load_states, to_row

__all__ = ["StatsConsumer", "conversations", "from_row", "load_states", "to_row"]
