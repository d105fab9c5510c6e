"""What to do with an operation that has no outcome: the retry rule, the attempt cap, recovery steps.

Written once for the runtime (live calls that end ambiguously, and `resume`) and the reconciler
(deadline ticks and lookups), so both take the same decision on the same state and evidence.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from convdb.projections.operation import OperationState, OperationStatus
from convdb.schemas._types import EffectClass

RETRY_SAFE: frozenset[EffectClass] = frozenset({"idempotent", "keyed"})
"""Effect classes a retry cannot duplicate (set-to-state, or the provider honours the key)."""

MAX_ATTEMPTS = 3
"""Provider calls (EffectStarted attempts) per operation before an ambiguous outcome goes to a human."""


class LookupResult(BaseModel):
    """A provider's answer about one operation: found (with receipt/result), not_found (provably
    not done) or unknown (the provider cannot tell, or could not be asked)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: Literal["found", "not_found", "unknown"]
    provider_receipt: str | None = None
    result: str = ""
    detail: str = ""


def may_retry(effect_class: EffectClass | None, provably_not_done: bool) -> bool:
    """May the operation be called again with the same idempotency key?

    idempotent: set-to-state, twice equals once; keyed: the provider deduplicates by key;
    irreversible: only when a lookup proved it was not done.
    """
    return effect_class in RETRY_SAFE or (effect_class == "irreversible" and provably_not_done)


@dataclass(frozen=True)
class Verdict:
    """The decision on an operation started without an outcome."""

    action: Literal["confirm", "retry", "unknown", "ask_again"]
    detail: str = ""
    """Why: the retry's note, or the evidence of an unknown."""
    provider_receipt: str | None = None
    result: str = ""


def settle(state: OperationState, lookup: LookupResult | None, *, may_ask_again: bool = False) -> Verdict:
    """Found → confirm; provably not done or retry-safe → retry (under the cap); else unknown.

    `lookup` is None when the tool has no lookup. `may_ask_again`: an 'unknown' answer may be
    asked again later (the reconciler, below its lookup cap) instead of being decided now.
    """
    if lookup is not None and lookup.outcome == "found":
        return Verdict("confirm", lookup.detail, lookup.provider_receipt, lookup.result)
    if lookup is not None and lookup.outcome == "unknown" and may_ask_again:
        return Verdict("ask_again", lookup.detail)
    provably_not_done = lookup is not None and lookup.outcome == "not_found"
    asked = _asked(lookup)
    if not may_retry(state.effect_class, provably_not_done):
        return Verdict("unknown", f"{asked}; {state.attempt} attempt(s) started")
    if state.attempt >= MAX_ATTEMPTS:
        return Verdict("unknown", f"{asked}; gave up after {state.attempt} attempts")
    why = "provably not done" if provably_not_done else f"a {state.effect_class} retry cannot duplicate it"
    return Verdict("retry", f"{asked}; {why}")


def _asked(lookup: LookupResult | None) -> str:
    if lookup is None:
        return "the tool has no lookup"
    if lookup.outcome == "not_found":
        return f"lookup: provider never saw the operation {lookup.detail}".strip()
    return f"lookup failed: {lookup.detail}"


class Step(enum.Enum):
    """What resume must do for one action that has no observation yet (DESIGN §6)."""

    EXECUTE = "execute"
    """Never started (or a retry was approved): run it now."""
    BACKFILL = "backfill"
    """The outcome is known (ledger or receipt): publish the missing observation."""
    SETTLE = "settle"
    """Started with no outcome: look it up, retry if the rules allow, else ask a human."""
    WAIT_HUMAN = "wait_human"
    """Already marked unknown: a human decides (never re-marked, never re-run)."""


def next_step(state: OperationState | None) -> Step:
    """The recovery step for an unobserved action, given its operation's state."""
    if state is None:
        return Step.EXECUTE
    if state.status is not None and state.status.is_terminal:
        return Step.BACKFILL
    if state.receipt is not None:
        # Proof the call happened beats everything but a recorded outcome: never run it again.
        return Step.BACKFILL
    if state.status is None or state.status is OperationStatus.PROPOSED:
        return Step.EXECUTE
    if state.status is OperationStatus.UNKNOWN:
        return Step.WAIT_HUMAN
    return Step.SETTLE
