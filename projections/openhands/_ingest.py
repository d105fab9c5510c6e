"""Appending OpenHands records to one convdb conversation: a pure fold run by its single writer.

`ingest(state, received)` maps a payload (an event batch, a ConversationInfo, an imported
base_state or meta) onto convdb events with the next seqs, skipping ids the conversation
already holds (webhook retries, re-imports), and derives what OpenHands keeps outside its
events: execution status, the active leaf, LLM usage and the title.

Placement: tree events keep their parent; an OpenHands event without one after the first
(legacy files) hangs under the previous tree event, as the SDK reads it; a root made by
`navigate_to(None)` (`"__root__"`) or an event whose parent convdb never saw starts a new root
that becomes the active leaf. ConversationStateUpdateEvents and other non-node kinds are
annotations (seq 0). The OpenHands JSON is always recoverable: `extension` holds the patch
from the JSON rebuilt out of convdb's fields to the original.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, NamedTuple, get_args

from pydantic import ValidationError

from convdb.projections._sequence import ANNOTATION_SEQ
from convdb.projections._text import shorten
from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands._arguments import compact as compact_arguments
from convdb.projections.openhands._check import ROOT_PARENT, check_events, check_record
from convdb.projections.openhands._fields import derived_id, digest, intent_hash, parse_timestamp
from convdb.projections.openhands._kinds import ANNOTATION_KINDS, ORIGIN, STATE_UPDATE, fields_of, rebuild
from convdb.projections.openhands._patch import diff
from convdb.projections.openhands._state import OpenHandsState, effect_classes
from convdb.projections.openhands._usage import derive_usage
from convdb.projections.view import fold
from convdb.schemas._types import ExecutionStatus
from convdb.schemas.events import (
    ActionEvent,
    ActiveLeafChangedEvent,
    Event,
    EventEnvelope,
    ExternalEvent,
    LLMUsageEvent,
    StateUpdateEvent,
    TitleEvent,
)
from convdb.schemas.validation import clean_text

TITLE_LIMIT = 200
"""Longest title kept in a derived TitleEvent (the stores' title column)."""


class Received(NamedTuple):
    """One accepted payload: its kind, its parsed JSON, and when convdb accepted it."""

    payload_kind: str
    payload: Any
    timestamp: datetime


def ingest(state: OpenHandsState, received: Received) -> tuple[OpenHandsState, list[Event]]:
    """Map one payload onto the conversation's next events.

    Raises:
        ForeignRecordError: the payload is not valid OpenHands data (nothing of it is mapped).
    """
    out = _Appender(state)
    if received.payload_kind == "events":
        for oh in check_events(received.payload):
            out.event(oh)
    else:
        out.record(
            received.payload_kind, check_record(received.payload_kind, received.payload), received.timestamp
        )
    return out.state, out.events


class _Appender:
    """Builds the events of one payload, folding each into the state as it goes."""

    def __init__(self, state: OpenHandsState) -> None:
        self.state = state
        self.events: list[Event] = []

    @property
    def cid(self) -> str:
        return self.state.view.conversation_id

    def build(self, cls: type[EventEnvelope], chain: bool, **fields: Any) -> Event:
        """The next event of the conversation (not yet appended).

        Texts lose NUL characters (stores cannot hold them); the patch in `extension` keeps the
        original, so export still gives it back.
        """
        fields = {k: _cleaned(v) for k, v in fields.items()}
        try:
            return cls(  # type: ignore[return-value]
                conversation_id=self.cid,
                tenant_id=self.state.tenant_id,
                seq=self.state.view.last_seq + 1 if chain else ANNOTATION_SEQ,
                **fields,
            )
        except ValidationError as exc:
            raise ForeignRecordError(f"event {fields.get('id')}: does not fit {cls.__name__}: {exc}") from exc

    def append(self, event: Event) -> Event:
        self.state = self.state._replace(view=fold(self.state.view, event))
        self.events.append(event)
        return event

    def add(self, cls: type[EventEnvelope], chain: bool, **fields: Any) -> Event:
        return self.append(self.build(cls, chain, **fields))

    # -- OpenHands events -----------------------------------------------------------------
    def event(self, oh: dict[str, Any]) -> None:
        if oh["id"] in self.state.view.events:
            self.state = self.state._replace(duplicates=self.state.duplicates + 1)
            return
        where = f"event {oh['id'][:40]} ({oh['kind']})"
        cls, values = fields_of(oh, where)
        node = oh["kind"] not in ANNOTATION_KINDS
        parent, new_root = self._parent(oh) if node else (oh.get("parent_id"), False)
        if cls is ActionEvent:
            values.update(self._operation(oh["id"], values))
        timestamp = parse_timestamp(oh["timestamp"], where)
        built = self.build(
            cls, node, id=oh["id"], timestamp=timestamp, source=oh["source"], parent_id=parent, **values
        )
        patch = diff(rebuild(built), oh)
        if isinstance(built, ActionEvent):
            patch = compact_arguments(patch, built.arguments)
        extension = json.dumps(
            {ORIGIN: {"patch": patch} if patch else {}}, separators=(",", ":"), ensure_ascii=False
        )
        event = self.append(built.model_copy(update={"extension": extension}))
        if node:
            self.state = self.state._replace(last_node=event.id)
            if new_root:
                self.leaf(event.id, event)
        self._derive_from_event(oh, event)

    def _parent(self, oh: dict[str, Any]) -> tuple[str | None, bool]:
        """convdb's parent of a tree event, and whether it starts a new root that becomes the leaf."""
        parent = oh.get("parent_id")
        view = self.state.view
        if parent is None:
            return self.state.last_node, False
        if parent != ROOT_PARENT:
            known = view.events.get(parent)
            if known is not None and known.seq != ANNOTATION_SEQ and known.kind != "active_leaf_changed":
                return parent, False
        return None, view.active_leaf is not None

    def _operation(self, action_id: str, values: dict[str, Any]) -> dict[str, Any]:
        return {
            "operation_id": f"{self.cid}/{action_id}",
            "intent_hash": intent_hash(values["tool_name"], values["arguments"]),
            "target": None,
            # convdb did not run the tool: what the tool declares, else the most careful class.
            "effect_class": self.state.effect_classes.get(values["tool_name"], "irreversible"),
        }

    def _derive_from_event(self, oh: dict[str, Any], event: Event) -> None:
        if oh["kind"] == "SystemPromptEvent":
            self.state = self.state._replace(effect_classes=effect_classes(oh.get("tools", [])))
        elif isinstance(event, StateUpdateEvent):
            self.state = self.state._replace(status=event.execution_status)
        elif oh["kind"] == STATE_UPDATE and oh.get("key") == "stats":
            self.usage(oh.get("value"), event)
        elif (
            oh["kind"] == STATE_UPDATE and oh.get("key") == "full_state" and isinstance(oh.get("value"), dict)
        ):
            self.from_state(oh["value"], event)

    # -- conversation-level records ------------------------------------------------------------
    def record(self, payload_kind: str, record: dict[str, Any], received_at: datetime) -> None:
        record_id = derived_id(self.cid, "record", payload_kind, digest(record))
        if record_id in self.state.view.events:
            self.state = self.state._replace(duplicates=self.state.duplicates + 1)
            return
        extension = {ORIGIN: {"record": record, "as": payload_kind}}
        event = self.add(
            ExternalEvent,
            False,
            id=record_id,
            timestamp=received_at,
            source="environment",
            origin=ORIGIN,
            external_kind=payload_kind,
            extension=json.dumps(extension, separators=(",", ":"), ensure_ascii=False),
        )
        if payload_kind == "base_state":
            self.from_state(record, event)
        elif payload_kind == "conversation_info":
            # Not ordered with the event stream (another route): only what events never carry.
            self.title(record.get("title"), event)
            self.usage(record.get("stats"), event)
        else:
            self.title(record.get("title"), event)

    # -- derived events ------------------------------------------------------------------------
    def _derived(self, source: Event, what: str, *more: str) -> dict[str, Any]:
        mark = {ORIGIN: {"derived_from": source.id, **({"usage_id": more[0]} if more else {})}}
        return {
            "id": derived_id(self.cid, source.id, what, *more),
            "timestamp": source.timestamp,
            "extension": json.dumps(mark, separators=(",", ":"), ensure_ascii=False),
        }

    def from_state(self, value: dict[str, Any], source: Event) -> None:
        status = value.get("execution_status")
        if isinstance(status, str) and status in _STATUSES and status != self.state.status:
            self.add(
                StateUpdateEvent,
                False,
                **self._derived(source, "status"),
                source="environment",
                execution_status=status,
            )
            self.state = self.state._replace(status=status)
        leaf = value.get("leaf_event_id")
        if isinstance(leaf, str):
            self.leaf(leaf, source)
        self.usage(value.get("stats"), source)

    def leaf(self, leaf: str, source: Event) -> None:
        view = self.state.view
        target = view.events.get(leaf)
        if leaf == view.active_leaf or target is None or target.seq == ANNOTATION_SEQ:
            return
        if target.kind == "active_leaf_changed":
            return
        self.add(
            ActiveLeafChangedEvent,
            True,
            **self._derived(source, "leaf", leaf),
            source="environment",
            parent_id=view.active_leaf,
            leaf_event_id=leaf,
        )

    def usage(self, stats: Any, source: Event) -> None:
        totals, items = derive_usage(self.state.usage, stats)
        self.state = self.state._replace(usage=totals)
        for item in items:
            self.add(
                LLMUsageEvent,
                False,
                **self._derived(source, f"usage{item.part}", item.usage_id),
                source="agent",
                model=item.model,
                llm_response_id=item.response_id or source.id,
                prompt_tokens=item.prompt_tokens,
                completion_tokens=item.completion_tokens,
                cached_tokens=item.cached_tokens,
                cost=item.cost,
                latency_ms=item.latency_ms,
            )

    def title(self, title: Any, source: Event) -> None:
        if not isinstance(title, str) or not title.strip():
            return
        short = shorten(title, TITLE_LIMIT)
        if short != self.state.title:
            self.add(
                TitleEvent,
                False,
                **self._derived(source, "title"),
                source="environment",
                title=short,
                origin="llm",
            )
            self.state = self.state._replace(title=short)


_STATUSES = frozenset(get_args(ExecutionStatus))


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, tuple):
        return tuple(clean_text(v) if isinstance(v, str) else v for v in value)
    return value
