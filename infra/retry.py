"""Exponential backoff under a deadline: how the services retry what the infrastructure fails.

An error of the infrastructure (the store, the DLQ's broker, the archive target, a group
coordinator) is retried, never dead-lettered (STYLE §7): the waits double up to a cap, and past
the deadline the caller raises its own error, so the process ends visibly and its supervisor
restarts it instead of records being skipped. Meanwhile `failing_since` says when the operation
last stopped making progress: what a service shows on `/healthz` and in
`convdb_consumer_retrying_seconds`.

One `Backoff` serves one operation (a batch's store transaction, an archive put, a lookup) and is
then dropped. The clock and the sleep are injected, so the schedule is tested without waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Backoff:
    """The retries of one operation: waits of `first_s`, doubled up to `cap_s`, until `deadline_s`
    from its creation.

    A wait never reaches past the deadline: the last try is made at the deadline, and its failure
    ends the retries. So the operation is retried for the whole `deadline_s`, and given up soon
    after, whatever the cap.
    """

    def __init__(
        self,
        deadline_s: float,
        *,
        first_s: float = 0.1,
        cap_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.deadline_s = deadline_s
        self.first_s = first_s
        self.cap_s = cap_s
        self._clock = clock
        self._sleep = sleep
        self.deadline = clock() + deadline_s
        self.failing_since: float | None = None
        """The clock when the tries started failing (None while none has failed since a success)."""
        self._next_s = first_s

    def failed(self) -> float | None:
        """Count a failed try: the seconds to wait before the next one, or None when the deadline
        has passed (give up)."""
        now = self._clock()
        if self.failing_since is None:
            self.failing_since = now
        if now >= self.deadline:
            return None
        wait = min(self._next_s, self.deadline - now)
        self._next_s = min(self._next_s * 2, self.cap_s)
        return wait

    def wait(self, seconds: float) -> None:
        """Sleep the wait `failed()` returned."""
        self._sleep(seconds)

    def succeeded(self) -> None:
        """A try succeeded: no longer failing, and a later failure waits `first_s` again."""
        self.failing_since = None
        self._next_s = self.first_s

    def failing_s(self) -> float:
        """Seconds the tries have been failing without a success (0 when they are not)."""
        return 0.0 if self.failing_since is None else self._clock() - self.failing_since
