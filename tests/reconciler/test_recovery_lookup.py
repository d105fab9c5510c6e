"""End to end without receipts: the reconciler's lookup decides, the runner's resume follows.

The provider sends no receipts here, so the only evidence is what `GET /issues/by-key` says.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from convdb.schemas import EffectConfirmed, EffectResolved, ObservationEvent
from tests.conftest import BrokerInfo, wait_until
from tests.reconciler.conftest import Proc, System, provider_stats, start_system
from tests.reconciler.test_recovery_receipts import conversation_events, finish, ledger_has, operation_of

pytestmark = [pytest.mark.kafka]

TASK = '!create_issue {"title": "flaky test", "body": "test_x"}'


@pytest.fixture(scope="module")
def system(broker: BrokerInfo, module_dir: Path, procs: list[Proc]) -> Iterator[System]:
    """The whole pipeline; the provider sends no receipts."""
    yield start_system(broker, module_dir, procs, receipts=False)


@pytest.mark.parametrize(
    ("crash_at", "transition", "backfilled"),
    [
        ("after_provider_call", EffectConfirmed, True),  # the issue exists: lookup confirms
        ("after_effect_started", EffectResolved, False),  # it does not: lookup approves a retry
    ],
)
def test_lookup_confirms_or_approves_a_retry(
    system: System, crash_at: str, transition: type, backfilled: bool
) -> None:
    conv = f"conv-{uuid.uuid4().hex[:8]}"
    died = system.runner("run", conv, TASK, crash_at=crash_at, crash_tool="create_issue")
    assert finish(died) == -9, died.tail()
    op = operation_of(system.settings, conv, "create_issue")
    expected = {"origin": "lookup"} if transition is EffectConfirmed else {"resolved_by": "reconciler"}
    wait_until(
        lambda: ledger_has(system.settings, op, transition, **expected), 60, f"the reconciler's {transition}"
    )
    resumed = system.runner("resume", conv)
    assert finish(resumed) == 0, resumed.tail()
    (observation,) = [
        e for e in conversation_events(system.settings, conv) if isinstance(e, ObservationEvent)
    ]
    assert observation.backfilled is backfilled and not observation.is_error
    assert provider_stats(system.provider_url)["by_key"][op] == 1  # type: ignore[index]
