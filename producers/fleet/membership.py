"""How a fleet runner is a member of the `<namespace>.runner` group.

- Rebalances are incremental where the broker can (`kafka.rebalance_config`): a runner that joins
  or leaves moves only the partitions that change hands; the others keep running.
- A runner with a stable name (`runtime.instance_id`) is a static member: restarted under the same
  name within the session timeout, it gets its partitions back and nobody rebalances.
- The runner polls between conversations' work, never in the middle of a run, so
  `max.poll.interval.ms` is sized from the longest run the settings allow (`poll_interval_ms`),
  not left at librdkafka's 300 s.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from convdb.infra.capabilities import capabilities
from convdb.infra.kafka import apply_group_timeouts, consumer_config
from convdb.infra.settings import Settings

logger = logging.getLogger(__name__)

POLL_INTERVAL_FLOOR_MS = 300_000
"""librdkafka's default `max.poll.interval.ms`: never less."""


def run_budget_s(settings: Settings) -> float:
    """The longest one conversation run may take: every step an LLM timeout plus the tool
    timeouts of its actions, run `action_concurrency` at a time (at most `delegation_max_children`
    rounds, the widest fan-out one step may ask for), for `max_iterations` steps."""
    rt = settings.runtime
    rounds = math.ceil(max(rt.delegation_max_children, rt.action_concurrency) / rt.action_concurrency)
    return rt.max_iterations * (settings.llm.timeout_s + rounds * rt.tool_timeout_s)


def poll_interval_ms(settings: Settings) -> int:
    """`max.poll.interval.ms` of a runner: one run budget (`run_budget_s`) plus a minute, and
    never below librdkafka's default. A runner polls before and after every run (and between
    the conversations of a takeover), so only a run that outlasts its budget can exceed it."""
    return max(POLL_INTERVAL_FLOOR_MS, int((run_budget_s(settings) + 60) * 1000))


def runner_config(settings: Settings) -> dict[str, Any]:
    """The runner's consumer settings: incremental rebalancing, its run-sized poll interval and,
    when it has a stable name, static membership."""
    overrides: dict[str, Any] = {"max.poll.interval.ms": poll_interval_ms(settings)}
    if settings.runtime.instance_id and static_membership_works(settings):
        overrides["group.instance.id"] = settings.runtime.instance_id
    return consumer_config(settings, settings.group("runner"), incremental=True, **overrides)


def static_membership_works(settings: Settings) -> bool:
    """Whether a stable name may make this runner a static member on this broker.

    Static membership is used where the group runs the KIP-848 consumer protocol, the case
    `tests/fleet/test_rebalance.py` proves (a restart within the session moves nothing). On the
    embedded broker a static member is assigned and revoked again every few seconds, for ever
    (measured with `python -m bench --only fleet`), so there the name is ignored, with a warning:
    its runners rejoin as new members, as without a name.
    """
    if capabilities(settings).consumer_group_protocol:
        return True
    logger.warning(
        "CONVDB_RUNTIME__INSTANCE_ID ignored: this broker has no KIP-848 consumer protocol, and static "
        "membership is only used with it (on the embedded broker a static member rebalances for ever)"
    )
    return False


def prepare_group(settings: Settings) -> None:
    """Before a runner joins: the group's session and heartbeat on a KIP-848 broker."""
    apply_group_timeouts(settings, settings.group("runner"))
