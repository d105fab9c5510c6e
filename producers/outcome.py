"""How an action ended for now: the effect protocol's answer, shared with delegation."""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    """How an action ended for now."""

    DONE = "done"
    """Observed (success or definite failure)."""
    HUMAN = "human"
    """Outcome unknown: EffectUnknown is on the ledger, a human decides."""
    WAITING = "waiting"
    """Children were started (a delegation): the observation comes when enough of them reported."""
