"""The LLM-title effect: call the model, publish the result as a `TitleEvent` (DESIGN §8).

The event id is a function of the conversation and the origin, so a call repeated after a
crash or a rebalance publishes the same id again and the fold counts it once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from convdb.consumers.titles.tables import load_states, processors
from convdb.infra.errors import PublishError
from convdb.infra.producer import DurableProducer
from convdb.infra.settings import Settings
from convdb.projections import titles
from convdb.schemas import TitleEvent, make_codec
from convdb.schemas._types import TitleOrigin
from convdb.schemas.topics import EVENTS

logger = logging.getLogger(__name__)

SCRIPTED = "convdb/scripted"
"""Model name of the offline scripted LLM (litellm `mock_response`, no network)."""


def title_event_id(conversation_id: str, origin: TitleOrigin) -> str:
    """The deterministic id of a conversation's generated title event."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"convdb:title:{conversation_id}:{origin}"))


def litellm_complete(model: str, prompt: str, timeout: float = 60.0) -> str:
    """One completion through litellm; the scripted model answers from the prompt, offline."""
    import litellm  # lazily: importing it takes ~5 s

    messages = [{"role": "user", "content": prompt}]
    if model == SCRIPTED:
        first = prompt.rsplit("\n\n", 1)[-1]
        reply = "Title: " + titles.first_message_title(first)
        response = litellm.completion(model="gpt-4o-mini", messages=messages, mock_response=reply)
    else:
        response = litellm.completion(model=model, messages=messages, timeout=timeout)
    return str(response.choices[0].message.content or "")


class TitleService:
    """Calls the LLM for wanted titles and publishes them to the events topic."""

    def __init__(self, settings: Settings, complete: Callable[[str, str], str] | None = None) -> None:
        self.settings = settings
        self.model = settings.llm.title_model or SCRIPTED
        self.complete = complete or (
            lambda model, prompt: litellm_complete(model, prompt, settings.llm.timeout_s)
        )
        self.codec = make_codec(settings.schema_registry_url)
        self._producer: DurableProducer | None = None
        self.calls = 0

    def make_titles(self, engine: Engine, conversation_ids: list[str]) -> list[str]:
        """For each conversation still wanting one: call the LLM, publish the title (or give up).

        Returns the conversations whose call failed and that may be tried again.
        """
        with engine.connect() as conn:
            states = load_states(conn, conversation_ids)
            conn.rollback()
        retry = []
        for conv, (tenant, state) in states.items():
            if not titles.wants_llm_title(state, True):
                continue
            try:
                if self._make_title(engine, conv, tenant, state):
                    retry.append(conv)
            except PublishError as exc:  # the broker: the next round publishes it
                logger.warning("title for %s not published, tried again: %s", conv, exc)
                retry.append(conv)
            except Exception as exc:  # noqa: BLE001 - one conversation's title, not the consumer
                logger.error("title for %s not made: %s: %s", conv, type(exc).__name__, exc)
        return retry

    def _make_title(self, engine: Engine, conv: str, tenant: str, state: titles.TitleProcessor) -> bool:
        """Call the LLM for one title and publish it (or give up); True to try again later."""
        try:
            self.calls += 1
            text = titles.clean_llm_title(self.complete(self.model, titles.title_prompt(state)))
        except Exception as exc:  # noqa: BLE001 - any LLM failure is an attempt, counted in the row
            logger.warning("title LLM call failed for %s: %s", conv, exc)
            state = titles.record_failed_attempt(state)
            with engine.begin() as conn:
                conn.execute(
                    sa.update(processors)
                    .where(processors.c.conversation_id == conv)
                    .values(attempts=state.attempts)
                )
            if not titles.gives_up(state):
                return True
            self._publish(conv, tenant, state.title or "", "first_message")
            return False
        if text:
            self._publish(conv, tenant, text, "llm")
        return False

    def _publish(self, conv: str, tenant: str, title: str, origin: TitleOrigin) -> None:
        event = TitleEvent(
            id=title_event_id(conv, origin),
            conversation_id=conv,
            tenant_id=tenant,
            seq=0,
            timestamp=datetime.now(UTC),
            source="hook",
            parent_id=None,
            title=title,
            origin=origin,
            model=self.model if origin == "llm" else None,
        )
        if self._producer is None:
            self._producer = DurableProducer(self.settings)
        self._producer.send(EVENTS.name(self.settings.namespace), conv, self.codec.encode(event))
        logger.info("published %s title for %s: %r", origin, conv, title)
