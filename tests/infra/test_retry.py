"""`convdb.infra.retry.Backoff`: the schedule of waits, the deadline and the failing time, on a fake clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from convdb.infra.retry import Backoff


@dataclass
class FakeTime:
    """A clock that moves only when slept on (or told to), recording the sleeps."""

    now: float = 1000.0
    slept: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def backoff(time: FakeTime, deadline_s: float, **kwargs: float) -> Backoff:
    return Backoff(deadline_s, clock=time.clock, sleep=time.sleep, **kwargs)


def fail_until_given_up(retry: Backoff, time: FakeTime, try_s: float = 0.0) -> list[float]:
    """Fail every try (each taking `try_s`) until the backoff gives up; the waits it asked for."""
    waits = []
    while True:
        time.now += try_s
        wait = retry.failed()
        if wait is None:
            return waits
        waits.append(wait)
        retry.wait(wait)


def test_waits_double_up_to_the_cap_and_the_last_try_is_at_the_deadline() -> None:
    time = FakeTime()
    retry = backoff(time, 20.0, first_s=0.5, cap_s=4.0)
    waits = fail_until_given_up(retry, time)
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 0.5]
    assert time.slept == waits
    assert time.now == retry.deadline == 1020.0  # the last try ran at the deadline; its failure gave up


def test_slow_tries_count_against_the_deadline() -> None:
    time = FakeTime()
    retry = backoff(time, 10.0, first_s=1.0, cap_s=5.0)
    # Tries fail at 4, 9 and 14 s; the second wait is cut short by the deadline.
    assert fail_until_given_up(retry, time, try_s=4.0) == [1.0, 1.0]
    assert time.now == 1014.0


def test_a_try_that_fails_past_the_deadline_is_given_up_at_once() -> None:
    time = FakeTime()
    retry = backoff(time, 2.0)
    time.now += 3.0
    assert retry.failed() is None
    assert time.slept == []


def test_failing_time_runs_from_the_first_failure_until_a_success() -> None:
    time = FakeTime()
    retry = backoff(time, 60.0, first_s=1.0)
    assert retry.failing_s() == 0.0 and retry.failing_since is None
    time.now += 5.0  # the first try takes 5 s, then fails
    retry.wait(retry.failed() or 0.0)
    assert retry.failing_since == 1005.0 and retry.failing_s() == 1.0
    retry.wait(retry.failed() or 0.0)  # a second failure does not move the start
    assert retry.failing_since == 1005.0 and retry.failing_s() == 3.0
    retry.succeeded()
    assert retry.failing_s() == 0.0 and retry.failing_since is None


def test_after_a_success_the_waits_start_again_from_the_first() -> None:
    time = FakeTime()
    retry = backoff(time, 60.0, first_s=0.25, cap_s=8.0)
    assert [retry.failed(), retry.failed(), retry.failed()] == [0.25, 0.5, 1.0]
    retry.succeeded()
    assert retry.failed() == 0.25


@given(
    deadline_s=st.floats(0.0, 600.0),
    first_s=st.floats(0.01, 10.0),
    cap_s=st.floats(0.01, 30.0),
    try_s=st.floats(0.0, 20.0),
)
def test_retries_never_sleep_past_the_deadline_and_always_end(
    deadline_s: float, first_s: float, cap_s: float, try_s: float
) -> None:
    time = FakeTime()
    retry = backoff(time, deadline_s, first_s=first_s, cap_s=cap_s)
    waits = fail_until_given_up(retry, time, try_s)
    assert all(0 < w <= max(first_s, cap_s) for w in waits)
    assert time.now - try_s <= retry.deadline + 1e-9  # the last try started by the deadline
    assert time.now >= retry.deadline  # ... and the retries did not stop before it
