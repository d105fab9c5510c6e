"""Every table that decides what an event kind does names every kind, or says it ignores it.

Each table falls back silently for a kind it does not name (a generic description, the raw kind as
a label, no timeline body, nothing shown to the LLM, nothing exported, only counted), so a new kind
added to the schemas would be dropped by omission. Each table therefore comes with an explicit set
of the kinds it leaves out, and together they name each kind of `EVENT_KINDS` exactly once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest

from convdb.consumers.console import render
from convdb.producers import messages
from convdb.projections import index, stats
from convdb.projections.openhands import _kinds as openhands_kinds
from convdb.schemas.events import EVENT_KINDS


def _templated_kinds() -> frozenset[str]:
    """The kinds `_events.html` has a body for (its `e.kind == "..."` branches)."""
    source, _, _ = render.ENV.loader.get_source(render.ENV, "_events.html")  # type: ignore[union-attr]
    return frozenset(re.findall(r'e\.kind == "(\w+)"', source))


TABLES: dict[str, tuple[Iterable[str], Iterable[str]]] = {
    "index descriptions": (index._DESCRIPTIONS, ()),
    "console labels": (render.KIND_LABELS, ()),
    "console timeline template": (_templated_kinds(), render.LABEL_ONLY_KINDS),
    "LLM messages": ([*messages._MESSAGES, *messages.TURN_KINDS], messages.UNSEEN_KINDS),
    "OpenHands export writers": (openhands_kinds._WRITERS, openhands_kinds.NOT_EXPORTED),
    "stats steps": (stats._STEPS, stats.COUNTED_ONLY),
}
"""Per table: the kinds it handles, and the kinds it leaves out on purpose."""


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_event_kind_is_handled_or_explicitly_ignored(table: str) -> None:
    handled, ignored = (frozenset(kinds) for kinds in TABLES[table])
    assert not handled & ignored, f"{table}: both handled and ignored: {sorted(handled & ignored)}"
    missing = set(EVENT_KINDS) - handled - ignored
    assert not missing, f"{table}: kinds neither handled nor explicitly ignored: {sorted(missing)}"
    unknown = (handled | ignored) - set(EVENT_KINDS)
    assert not unknown, f"{table}: names kinds that are not event kinds: {sorted(unknown)}"
