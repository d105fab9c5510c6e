"""Titles as a callback processor as data: immediate title, LLM title, disabled, replay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convdb.projections import titles
from convdb.projections.errors import SequenceGapError
from convdb.schemas.events import Event, MessageEvent, TitleEvent
from tests.strategies import T0, batch_splits, conversations, split, texts, with_redeliveries


def user_message(seq: int, content: str, role: str = "user", source: str = "user") -> MessageEvent:
    return MessageEvent(
        id=f"m{seq}",
        conversation_id="c",
        tenant_id="t",
        seq=seq,
        timestamp=T0 + timedelta(seconds=seq),
        source=source,
        role=role,
        content=content,
    )


def title_event(n: int, title: str, origin: str = "llm") -> TitleEvent:
    return TitleEvent(
        id=f"title-{n}",
        conversation_id="c",
        tenant_id="t",
        seq=0,
        timestamp=T0 + timedelta(seconds=100 + n),
        source="hook",
        title=title,
        origin=origin,
        model="gpt-4o-mini" if origin == "llm" else None,
    )


@pytest.mark.parametrize(
    ("content", "title"),
    [
        ("Fix the  login\tbug", "Fix the login bug"),
        ("\n\n  second line first \nthird", "second line first"),
        ("word " * 30, "word " * 11 + "word…"),
        ("x" * 80, "x" * 59 + "…"),
    ],
)
def test_first_message_title(content: str, title: str) -> None:
    assert titles.first_message_title(content) == title
    assert len(titles.first_message_title(content)) <= titles.TITLE_LIMIT


def test_first_user_message_then_llm_title_then_disabled() -> None:
    state = titles.fold_all(
        titles.initial("c"),
        [
            user_message(1, "   "),  # blank: not a title
            user_message(2, "from the agent", role="assistant", source="agent"),
            user_message(3, "Book a flight\nto Oslo"),
        ],
    )
    assert (state.title, state.origin, state.status) == ("Book a flight", "first_message", "active")
    assert titles.wants_llm_title(state, llm_enabled=True)
    assert not titles.wants_llm_title(state, llm_enabled=False)
    state = titles.fold_all(state, [title_event(1, "Flight to Oslo"), user_message(4, "another")])
    assert (state.title, state.origin, state.status) == ("Flight to Oslo", "llm", "disabled")
    assert state.first_user_message == "Book a flight\nto Oslo"
    assert not titles.wants_llm_title(state, llm_enabled=True)


def test_failed_attempts_then_give_up_with_a_first_message_title() -> None:
    state = titles.fold(titles.initial("c"), user_message(1, "Plan the release"))
    for _ in range(titles.MAX_ATTEMPTS):
        assert titles.wants_llm_title(state, llm_enabled=True) and not titles.gives_up(state)
        state = titles.record_failed_attempt(state)
    assert not titles.wants_llm_title(state, llm_enabled=True) and titles.gives_up(state)
    state = titles.fold(state, title_event(1, state.title or "", origin="first_message"))
    assert (state.status, state.attempts, state.title) == ("disabled", 0, "Plan the release")


def test_llm_answers_are_cleaned() -> None:
    assert titles.clean_llm_title('  "Flight to Oslo"\nbecause...') == "Flight to Oslo"
    assert len(titles.clean_llm_title("t" * 200)) == titles.TITLE_LIMIT
    assert "Plan" in titles.title_prompt(titles.fold(titles.initial("c"), user_message(1, "Plan")))


def live_service(events: list[Event], outcomes: list[bool]) -> tuple[titles.TitleProcessor, list[Event], int]:
    """The titles service as a test double around the pure fold: folds, calls the 'LLM', publishes."""
    state, log, calls = titles.initial(events[0].conversation_id), [], 0
    for event in events:
        if isinstance(event, TitleEvent):
            continue  # the generated titles are replaced by what this service publishes
        log.append(event)
        state = titles.fold(state, event)
        while titles.wants_llm_title(state, llm_enabled=True):
            succeeded = outcomes[calls % len(outcomes)]
            calls += 1
            if succeeded:
                published = _title_for(state, len(log), "llm", "LLM: " + (state.title or ""))
            elif titles.gives_up(state := titles.record_failed_attempt(state)):
                published = _title_for(state, len(log), "first_message", state.title or "")
            else:
                continue
            log.append(published)
            state = titles.fold(state, published)
    return state, log, calls


def _title_for(state: titles.TitleProcessor, n: int, origin: str, title: str) -> TitleEvent:
    return TitleEvent(
        id=f"{state.conversation_id}:svc-title-{n}",
        conversation_id=state.conversation_id,
        tenant_id="tenant-a",
        seq=0,
        timestamp=T0,
        source="hook",
        title=title,
        origin=origin,
    )


@given(conversations(max_size=30), st.lists(st.booleans(), min_size=1, max_size=5))
def test_replay_of_the_log_needs_no_llm(events: list[Event], outcomes: list[bool]) -> None:
    """Replaying the log the service wrote gives the live state, and asks the LLM for nothing."""
    live, log, calls = live_service(events, outcomes)
    replayed = titles.fold_all(titles.initial(live.conversation_id), log)
    assert replayed == live
    assert not titles.wants_llm_title(replayed, llm_enabled=True)
    assert calls <= titles.MAX_ATTEMPTS
    if replayed.first_user_message is not None:
        assert replayed.status == "disabled" and replayed.title is not None


@given(conversations(), st.data())
def test_batch_split_and_duplicates(events: list[Event], data: st.DataObject) -> None:
    """Any batch split, a second fold and redeliveries all give the one-shot state."""
    once = titles.fold_all(titles.initial(events[0].conversation_id), events)
    state = titles.initial(events[0].conversation_id)
    for batch in split(events, data.draw(batch_splits(len(events)))):
        state = titles.fold_all(state, batch)
    assert state == once
    assert titles.fold_all(once, events) == once
    redelivered = data.draw(with_redeliveries(events))
    assert titles.fold_all(titles.initial(events[0].conversation_id), redelivered) == once


@given(conversations())
def test_title_is_first_user_message_or_last_title_event(events: list[Event]) -> None:
    """A recount: the last TitleEvent wins, else the first non-blank user message's title."""
    state = titles.fold_all(titles.initial(events[0].conversation_id), events)
    title_events = [e for e in events if isinstance(e, TitleEvent)]
    users = [
        e
        for e in events
        if isinstance(e, MessageEvent) and e.role == "user" and e.source == "user" and e.content.strip()
    ]
    if title_events:
        assert (state.title, state.status) == (title_events[-1].title, "disabled")
    elif users:
        assert state.title == titles.first_message_title(users[0].content)
    else:
        assert state.title is None and state.status == "active"


@given(texts)
def test_any_text_gives_a_short_single_line_title(content: str) -> None:
    title = titles.first_message_title(content)
    assert len(title) <= titles.TITLE_LIMIT and "\n" not in title and title == title.strip()


def test_gap_raises() -> None:
    state = titles.fold(titles.initial("c"), user_message(1, "hi"))
    with pytest.raises(SequenceGapError, match="seq 3 after 1"):
        titles.fold(state, user_message(3, "again"))
