"""Named crash points: SIGKILL this process at an exact step of the effect protocol (fault tests)."""

from __future__ import annotations

import logging
import os
import signal

logger = logging.getLogger(__name__)

EFFECT_POINTS = (
    "after_effect_proposed",
    "after_effect_started",
    "after_provider_call",
    "after_observation",
)
"""The points of the effect protocol (hit per tool), in protocol order."""

CRASH_POINTS = (
    *EFFECT_POINTS,
    "after_inbox_message",
    "before_inbox_commit",
    "after_children_started",
    "after_child_report",
)
"""Every point the runtime calls `hit` at, in protocol order."""


class CrashPoints:
    """Kills the process when `hit` names the armed point (and tool, if one is set)."""

    def __init__(self, point: str | None = None, tool: str | None = None) -> None:
        if point is not None and point not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}; known: {', '.join(CRASH_POINTS)}")
        self.point = point
        self.tool = tool

    def hit(self, point: str, tool: str | None = None) -> None:
        """SIGKILL ourselves if armed for this point; a no-op otherwise."""
        if self.point != point or (self.tool is not None and tool != self.tool):
            return
        logger.warning("crash point %s reached (tool %s): SIGKILL", point, tool)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


NO_CRASH = CrashPoints()
"""Crash points that never fire."""
