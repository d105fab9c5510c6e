"""The titles service: an LLM title (litellm, scripted) published as a TitleEvent; replay never calls it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from convdb.consumers.runner import Runner
from convdb.consumers.titles import TitlesConsumer, title_event_id
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.producers.publisher import EventPublisher
from convdb.schemas import SingleObjectCodec, TitleEvent
from convdb.schemas.topics import EVENTS
from tests.conftest import wait_until
from tests.consumers.builders import conversation
from tests.consumers.verify import rows
from tests.helpers import read_topic

pytestmark = pytest.mark.kafka


def run_until(settings: Settings, consumer: TitlesConsumer, done: Callable[[], object]) -> None:
    runner = Runner(settings, [consumer], name=f"titles-{id(consumer)}")
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: runner.assignment, 60, "the titles consumer to be assigned partitions")
        wait_until(done, 60, "titles to settle")
    finally:
        runner.stop()
        thread.join(30)


def title_row(url: str, conv: str) -> tuple | None:
    try:
        found = rows(
            url, f"SELECT title, origin, status FROM titles_conversations WHERE conversation_id = '{conv}'"
        )
    except Exception:  # noqa: BLE001 - the table may not exist yet
        return None
    return found[0] if found else None


def test_llm_title_is_published_once_and_replay_never_calls_the_llm(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    settings = make_settings(store_url=url, llm={"title_model": "convdb/scripted"})
    apply_topics(settings)
    events = conversation("conv-t", 6)
    EventPublisher(settings, SingleObjectCodec()).publish_durable(events)
    live = TitlesConsumer(settings)  # the real litellm, answering with mock_response (no network)
    run_until(
        settings,
        live,
        lambda: title_row(url, "conv-t") == ("Title: please fix bug conv-t", "llm", "disabled"),
    )
    assert live.service is not None and live.service.calls == 1

    records = read_topic(settings, EVENTS.name(settings.namespace), len(events) + 1)
    titles = [e for e in (SingleObjectCodec().decode(v) for *_, v in records) if isinstance(e, TitleEvent)]
    assert len(titles) == 1
    title = titles[0]
    assert (title.seq, title.parent_id, title.source, title.origin, title.model) == (
        0,
        None,
        "hook",
        "llm",
        "convdb/scripted",
    )
    assert title.id == title_event_id("conv-t", "llm")

    def no_llm(_model: str, _prompt: str) -> str:
        raise AssertionError("a replay must not call the LLM")

    shadow = f"sqlite:///{tmp_path / 'replay.db'}"
    replay = TitlesConsumer(settings.model_copy(update={"store_url": shadow}), complete=no_llm)
    run_until(
        settings.model_copy(update={"store_url": shadow}),
        replay,
        lambda: title_row(shadow, "conv-t") == ("Title: please fix bug conv-t", "llm", "disabled"),
    )


def test_failing_llm_gives_up_after_three_attempts_with_the_first_message_title(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settings = make_settings(store_url=url, llm={"title_model": "convdb/scripted"})
    apply_topics(settings)
    EventPublisher(settings, SingleObjectCodec()).publish_durable(conversation("conv-f", 3))
    calls = []

    def failing(_model: str, prompt: str) -> str:
        calls.append(prompt)
        raise TimeoutError("the model did not answer")

    consumer = TitlesConsumer(settings, complete=failing)
    run_until(
        settings,
        consumer,
        lambda: title_row(url, "conv-f") == ("please fix bug conv-f", "first_message", "disabled"),
    )
    assert len(calls) == 3
