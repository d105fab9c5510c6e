"""Consumer plugins, found through the `convdb.consumers` entry-point group.

A third party adds a consumer without touching convdb: write a class with the `Projector`
shape (`convdb.consumers.base`: `name`, `topics`, `version`, `create`, `drop`, `apply`, `digests`,
`after_commit`), or subclass `ConversationProjector` (declare a table, a fold and the row
mapping), whose constructor takes the `Settings`, and register it in its own package's
pyproject:

    [project.entry-points."convdb.consumers"]
    audit_trail = "mypkg.audit:AuditTrailConsumer"

After `pip install`, `convdb consume audit_trail` runs it with the same exactly-once runner,
DLQ and metrics as the built-in ones. `convdb consume all` runs the built-in read side
(`DEFAULT_GROUP`), not every installed plugin.
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points

from convdb.consumers.base import Projector
from convdb.consumers.errors import PluginError
from convdb.infra.settings import Settings

logger = logging.getLogger(__name__)

GROUP = "convdb.consumers"
"""The entry-point group consumer plugins register under."""

DEFAULT_GROUP = ("views", "index", "titles", "stats", "effects")
"""What `convdb consume all` hosts in one process (one group, one transaction per batch)."""


def available() -> dict[str, EntryPoint]:
    """Every registered consumer plugin, by name."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def load(name: str, settings: Settings) -> Projector:
    """Instantiate the plugin registered as `name`.

    Raises:
        PluginError: no plugin has that name, or it fails to import.
    """
    found = available()
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise PluginError(f"no consumer named {name!r} (installed: {known})")
    try:
        cls = found[name].load()
    except (ImportError, AttributeError) as exc:
        raise PluginError(f"consumer {name!r} ({found[name].value}) does not load: {exc}") from exc
    projector: Projector = cls(settings)
    return projector


def load_many(names: list[str], settings: Settings) -> list[Projector]:
    """Instantiate plugins by name; 'all' expands to `DEFAULT_GROUP`."""
    expanded: list[str] = []
    for name in names:
        for item in DEFAULT_GROUP if name == "all" else (name,):
            if item not in expanded:
                expanded.append(item)
    return [load(n, settings) for n in expanded]
