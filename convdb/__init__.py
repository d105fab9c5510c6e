"""convdb: conversation as database. Agent conversations as typed, append-only event streams on Kafka.

This module is the public surface: what a program that runs, extends or reads convdb imports.
The packages below it (`convdb.schemas`, `convdb.projections`, `convdb.producers`,
`convdb.consumers`, `convdb.infra`) are the implementation, laid out as DESIGN §3 describes.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from convdb.infra.connection import load_settings
from convdb.infra.settings import Settings
from convdb.producers.agent import Agent
from convdb.producers.conversation import Conversation
from convdb.producers.tools.base import Tool
from convdb.schemas._types import EffectClass

try:
    __version__ = version("convdb")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Agent", "Conversation", "EffectClass", "Settings", "Tool", "__version__", "load_settings"]
