"""The OpenHands agent-server's webhooks: event batches and conversation info, durable in the inbox.

Point an agent-server at ``{convdb}/openhands/webhooks`` with the convdb API key in its webhook
headers. A post is validated whole (`convdb.projections.openhands`), written to the inbox topic as
`ExternalBatch` records and answered 200 only once the broker acknowledged every record; the
conversation's runner appends it (one writer per conversation), skipping event ids it holds,
so the agent-server's retries of the same batch store nothing twice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from convdb.consumers.api._acks import AsyncAcks
from convdb.consumers.api._body import read_capped
from convdb.consumers.api.deps import ApiContext, context
from convdb.consumers.api.ownership import Claim, OwnershipUnknownError
from convdb.infra.errors import PublishError
from convdb.infra.json_redaction import redact_json
from convdb.infra.limits import HEADROOM, record_limit
from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands import (
    ORIGIN,
    Received,
    check_events,
    check_record,
    conversation_key,
    ingest,
    initial,
)
from convdb.schemas import ExternalBatch
from convdb.schemas.topics import INBOX

PREFIX = "/openhands/webhooks"
"""Base URL path of the webhook routes (the agent-server's webhook `base_url` ends with it)."""

router = APIRouter(prefix=PREFIX, tags=["openhands"])

OWNERS_KEPT = 100_000
"""Conversation owners one API process remembers (an owner never changes)."""


class Position(BaseModel):
    """Where one inbox record landed."""

    topic: str
    partition: int
    offset: int


class Stored(BaseModel):
    """The post is durable in the inbox topic; the conversation's runner appends it."""

    conversation_id: str
    events: int
    records: list[Position]


@router.post(
    "/events/{conversation_id}",
    response_model=Stored,
    summary="An agent-server event batch (durable in the inbox before 200)",
    responses={400: {"description": "malformed batch"}, 401: {}, 404: {}, 413: {}, 503: {}},
)
async def post_events(conversation_id: str, request: Request) -> Stored:
    """Store a batch of OpenHands events of one conversation (JSON array, as the agent-server posts it)."""
    ctx = context(request)
    tenant_id = _tenant(request, ctx)
    cid = _conversation(conversation_id)
    body = await read_capped(request, ctx.settings.openhands.max_body_bytes)
    # Parsing, checking, splitting and redacting a body of megabytes are linear, not cheap (the
    # redactor's cost is its patterns'): on a worker thread, never holding the event loop that
    # serves every other request.
    events, payloads = await run_in_threadpool(_prepared_events, ctx, cid, tenant_id, body)
    claim = await _check_owner(request, ctx, cid, tenant_id)
    records = await _store(request, ctx, cid, tenant_id, "events", payloads)
    if claim is not None:
        await _confirm(request, ctx, cid, tenant_id, claim, records[0].offset)
    return Stored(conversation_id=cid, events=events, records=records)


@router.post(
    "/conversations",
    response_model=Stored,
    summary="An agent-server ConversationInfo (durable in the inbox before 200)",
    responses={400: {"description": "malformed info"}, 401: {}, 404: {}, 413: {}, 503: {}},
)
async def post_conversation(request: Request) -> Stored:
    """Store a ConversationInfo the agent-server posts on start, pause, update and delete."""
    ctx = context(request)
    tenant_id = _tenant(request, ctx)
    body = await read_capped(request, ctx.settings.openhands.max_body_bytes)
    cid, payload = await run_in_threadpool(_prepared_info, ctx, body)
    claim = await _check_owner(request, ctx, cid, tenant_id)
    records = await _store(request, ctx, cid, tenant_id, "conversation_info", [payload])
    if claim is not None:
        await _confirm(request, ctx, cid, tenant_id, claim, records[0].offset)
    return Stored(conversation_id=cid, events=0, records=records)


def _app_state(request: Request, name: str, make: Callable[[], Any]) -> Any:
    """A collaborator kept on the app (built on first use; closed with the app when it has `close`)."""
    state = request.app.state
    if not hasattr(state, name):
        value = make()
        setattr(state, name, value)
        if hasattr(value, "close"):
            state.closers = [*getattr(state, "closers", ()), value.close]
    return getattr(state, name)


def _tenant(request: Request, ctx: ApiContext) -> str:
    """The tenant of the convdb key in the configured header (throttled like every API key check)."""
    header = ctx.settings.openhands.key_header
    return ctx.authenticate(request, request.headers.get(header), header)


def _conversation(raw: str) -> str:
    try:
        return conversation_key(raw, "conversation id")
    except ForeignRecordError as exc:
        raise HTTPException(400, str(exc)) from exc


def _prepared_events(ctx: ApiContext, cid: str, tenant_id: str, body: bytes) -> tuple[int, list[str]]:
    """A batch checked whole (4xx otherwise): its event count and its inbox payloads, redacted."""
    items = _parse(body)
    if isinstance(items, list) and len(items) > ctx.settings.openhands.max_events:
        raise HTTPException(
            413, f"{len(items)} events in one batch; the limit is {ctx.settings.openhands.max_events}"
        )
    try:
        events = check_events(items)
    except ForeignRecordError as exc:
        raise HTTPException(400, f"bad OpenHands batch: {exc}; nothing was stored") from exc
    for index, event in enumerate(events):
        _check_mapped_size(ctx, cid, tenant_id, index, event)
    payloads = _split(body.decode(), events, ctx.settings.openhands.max_record_bytes)
    return len(events), [redact_json(ctx.secrets, payload) for payload in payloads]


def _prepared_info(ctx: ApiContext, body: bytes) -> tuple[str, str]:
    """A ConversationInfo checked (4xx otherwise): its conversation and its inbox payload, redacted."""
    try:
        info = check_record("conversation_info", _parse(body))
        cid = conversation_key(info["id"], "conversation info")
    except ForeignRecordError as exc:
        raise HTTPException(400, f"bad ConversationInfo: {exc}; nothing was stored") from exc
    if len(body) > ctx.settings.openhands.max_record_bytes:
        raise HTTPException(
            413,
            f"ConversationInfo of {len(body)} bytes; the limit is {ctx.settings.openhands.max_record_bytes}",
        )
    return cid, redact_json(ctx.secrets, body.decode())


def _check_mapped_size(ctx: ApiContext, cid: str, tenant_id: str, index: int, event: dict[str, Any]) -> None:
    """413 for an event whose convdb record would be larger than the runner writes (it would be
    dead-lettered). The convdb record holds the text once, so only an event of more than half the
    limit can exceed it: only those are mapped here."""
    limit = record_limit(ctx.settings)
    if len(json.dumps(event, ensure_ascii=False).encode()) <= limit // 2:
        return
    try:
        _, mapped = ingest(initial(cid, tenant_id), Received("events", [event], datetime.now(UTC)))
    except ForeignRecordError:
        return  # maps only after the events before it: the runner checks it there
    for record in mapped:
        size = len(ctx.codec.encode(record)) + len(cid) + HEADROOM
        if size > limit:
            raise HTTPException(
                413,
                f"event {index} (id {event['id'][:40]}) would be a convdb record of {size} bytes; the "
                f"limit is {limit} (nothing was stored)",
            )


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise HTTPException(400, f"body is not JSON: {str(exc)[:200]}; nothing was stored") from exc


def _split(text: str, events: list[dict[str, Any]], limit: int) -> list[str]:
    """The batch as inbox payloads under `limit` bytes each (the body itself when it fits)."""
    if len(text.encode()) <= limit:
        return [text]
    payloads: list[str] = []
    chunk: list[str] = []
    size = 2
    for index, event in enumerate(events):
        one = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        length = len(one.encode()) + 1
        if length + 2 > limit:
            raise HTTPException(
                413, f"event {index} (id {event['id'][:40]}) is {length} bytes; the limit is {limit}"
            )
        if chunk and size + length > limit:
            payloads.append("[" + ",".join(chunk) + "]")
            chunk, size = [], 2
        chunk.append(one)
        size += length
    payloads.append("[" + ",".join(chunk) + "]")
    return payloads


async def _check_owner(request: Request, ctx: ApiContext, cid: str, tenant_id: str) -> Claim | None:
    """404 unless the log says the conversation is this tenant's or nobody's yet: the rule every
    post follows (`convdb.consumers.api.ownership`: the read side, then the log tails it has not folded).

    An owner never changes, so a found one is kept and a stream of batches costs one lookup per
    conversation. Returns the claim to confirm when nobody owned the conversation yet.
    """
    owners: dict[str, str] = _app_state(request, "openhands_owners", dict)
    known = owners.get(cid)
    if known is None:
        try:
            known, claim = await ctx.on_writer(ctx.ownership.owner, cid)
        except OwnershipUnknownError as exc:
            raise HTTPException(
                503, f"cannot tell who owns {cid!r} now: {exc}; retry the same batch"
            ) from exc
        if known is None:
            return claim
        _remember(owners, cid, known)
    if known != tenant_id:
        raise HTTPException(404, f"no conversation {cid!r}")
    return None


async def _confirm(
    request: Request, ctx: ApiContext, cid: str, tenant_id: str, claim: Claim, offset: int
) -> None:
    """A new conversation's first batch: 404 when another tenant's post won the race for the id."""
    if not await ctx.on_writer(ctx.ownership.confirm_claim, claim, cid, tenant_id, offset):
        raise HTTPException(404, f"no conversation {cid!r}")
    _remember(_app_state(request, "openhands_owners", dict), cid, tenant_id)


def _remember(owners: dict[str, str], cid: str, tenant_id: str) -> None:
    if len(owners) >= OWNERS_KEPT:
        owners.clear()  # bounded memory; owners are looked up again as they come
    owners[cid] = tenant_id


async def _store(
    request: Request, ctx: ApiContext, cid: str, tenant_id: str, payload_kind: str, payloads: list[str]
) -> list[Position]:
    topic = INBOX.name(ctx.settings.namespace)
    now = datetime.now(UTC)
    records = [
        (
            cid,
            ctx.codec.encode(
                ExternalBatch(
                    id=str(uuid.uuid4()),
                    conversation_id=cid,
                    tenant_id=tenant_id,
                    timestamp=now,
                    origin=ORIGIN,
                    payload_kind=payload_kind,
                    # What the agent-server sent, credentials already hidden (`redact_json`).
                    payload=payload,
                )
            ),
        )
        for payload in payloads
    ]
    acks: AsyncAcks = _app_state(
        request,
        "openhands_acks",
        lambda: AsyncAcks(
            ctx.settings, ctx.settings.api.publish_timeout_s, ctx.settings.openhands.max_waiting
        ),
    )
    try:
        landed = await acks.send(topic, records)
    except PublishError as exc:
        raise HTTPException(503, f"not stored: {exc}; retry the same batch") from exc
    lost: list[int] = _app_state(
        request, "openhands_lost", lambda: [ctx.settings.openhands.fault_lost_responses]
    )
    if payload_kind == "events" and lost[0] > 0:
        lost[0] -= 1
        raise HTTPException(
            503, "fault injection: stored, but answering 503 (CONVDB_OPENHANDS__FAULT_LOST_RESPONSES)"
        )
    return [Position(topic=topic, partition=p, offset=o) for p, o in landed]
