"""The query API: FastAPI app factory and routers (conversations, view, events search, messages)."""

from convdb.consumers.api.app import ROUTERS, create_app

__all__ = ["ROUTERS", "create_app"]
