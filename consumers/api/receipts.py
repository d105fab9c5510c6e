"""`POST /receipts`: the providers' webhook, HMAC-signed per provider, into the receipts topic.

In this order, so that nothing unauthenticated is parsed and nothing unbounded is read:
1. the body is read up to `api.receipt_max_bytes` (413 beyond);
2. its signature is checked against each provider's secret (401 when none matches; failures
   count towards the client's authentication limit, 429);
3. it is parsed and validated: the provider named must be the one whose secret signed it, ids
   and texts follow `convdb.schemas.validation`, the timestamp lies within `api.receipt_window_s` in
   the past and `api.receipt_skew_s` in the future (400);
4. the operation must exist, belong to the tenant the receipt names, and be an operation of a
   tool bound to that provider (`api.receipt_tools`): 404 for an unknown or another tenant's
   operation (the same answer), 403 for a tool the provider may not speak for. The read side
   is given `api.receipt_wait_s` to learn an operation proposed moments ago.

A receipt's id is derived from (provider, provider_receipt, operation_id), so a provider that
retries its webhook publishes the same record again and every reader drops the repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from convdb.consumers.api._body import read_capped
from convdb.consumers.api.auth import client_address
from convdb.consumers.api.deps import ApiContext, Ctx
from convdb.consumers.api.params import problems
from convdb.consumers.effects import get_operation
from convdb.projections.effects import OperationState
from convdb.schemas import Receipt
from convdb.schemas._types import ReceiptStatus
from convdb.schemas.errors import InvalidValueError
from convdb.schemas.topics import RECEIPTS
from convdb.schemas.validation import MAX_ID, check_id, check_operation_id, check_text, shown

router = APIRouter(tags=["effects"])

_RECEIPT_IDS = uuid.UUID("0b7f3c52-4a8e-4a55-8f61-7d0c2b9e5e21")
MAX_RESULT = 32_000
"""Longest `result` text of a receipt, in characters."""


class ReceiptBody(BaseModel):
    """What a provider posts: the raw bytes of this JSON object are what it signs."""

    model_config = ConfigDict(extra="ignore")

    provider: str = Field(max_length=MAX_ID, description="Provider name; its secret signs the body.")
    operation_id: str = Field(description="The operation: '<conversation_id>/<action_id>'.")
    tenant_id: str = Field(max_length=MAX_ID, description="Tenant of the operation.")
    provider_receipt: str = Field(max_length=MAX_ID, description="The provider's request/result id.")
    status: ReceiptStatus = Field(description="The provider's verdict.")
    result: str = Field("", max_length=MAX_RESULT, description="Result text.")
    timestamp: datetime = Field(description="When the provider did it (ISO-8601; naive means UTC).")


class Accepted(BaseModel):
    """The receipt is durable in the receipts topic."""

    receipt_id: str
    operation_id: str


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """True when `header` is `sha256=<hex HMAC-SHA256 of body>` under `secret`."""
    if not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256="))


def signing_provider(ctx: ApiContext, body: bytes, header: str | None) -> str | None:
    """The provider whose secret signed `body`, or None (every secret is tried: no early exit)."""
    found = None
    for name, secret in sorted(ctx.settings.api.receipt_secrets.items()):
        if verify_signature(secret.get_secret_value(), body, header) and found is None:
            found = name
    return found


def build_receipt(payload: Any, now: datetime, window: timedelta, skew: timedelta) -> Receipt:
    """The Receipt record a verified webhook payload stands for; raises HTTPException(400) if malformed."""
    if not isinstance(payload, dict):
        raise HTTPException(400, "body must be a JSON object")
    try:
        body = ReceiptBody.model_validate(payload)
        operation_id = check_operation_id(body.operation_id)
        for what in ("provider", "tenant_id", "provider_receipt"):
            check_id(getattr(body, what), what)
        check_text(body.result, "result")
    except InvalidValueError as exc:
        raise HTTPException(400, f"bad receipt: {exc}") from exc
    except ValueError as exc:  # pydantic's ValidationError
        errors: list[dict[str, Any]] = getattr(exc, "errors", list)()
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))[:40]}: {e['msg'][:200]}" for e in errors[:5])
        raise HTTPException(400, f"bad receipt: {problems}") from exc
    moment = body.timestamp if body.timestamp.tzinfo else body.timestamp.replace(tzinfo=UTC)
    if not now - window <= moment <= now + skew:
        raise HTTPException(
            400,
            f"receipt timestamp {moment.isoformat()} is outside the accepted window "
            f"({window.total_seconds():.0f}s before to {skew.total_seconds():.0f}s after now)",
        )
    name = f"{body.provider}|{body.provider_receipt}|{operation_id}"
    return Receipt(
        id=str(uuid.uuid5(_RECEIPT_IDS, name)),
        provider=body.provider,
        operation_id=operation_id,
        conversation_id=operation_id.rpartition("/")[0],
        tenant_id=body.tenant_id,
        provider_receipt=body.provider_receipt,
        status=body.status,
        result=body.result,
        timestamp=moment,
    )


async def _operation(ctx: ApiContext, operation_id: str) -> OperationState | None:
    """The operation's state on the read side, waiting up to `receipt_wait_s` for it to appear."""

    def load() -> OperationState | None:
        with ctx.engine.connect() as conn:
            state = get_operation(conn, operation_id)
        return state if state is not None and state.status is not None else None

    deadline = time.monotonic() + ctx.settings.api.receipt_wait_s
    while True:
        state = await run_in_threadpool(load)
        if state is not None or time.monotonic() >= deadline:
            return state
        await asyncio.sleep(0.1)


@router.post(
    "/receipts",
    status_code=202,
    response_model=Accepted,
    summary="a provider's signed receipt for an operation",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ReceiptBody.model_json_schema()}},
        }
    },
    responses=problems(400, 401, 403, 404, 413, 429, 503),
)
async def post_receipt(
    request: Request,
    ctx: Ctx,
    x_convdb_signature: Annotated[
        str | None, Header(description="sha256=<hex HMAC-SHA256 of the raw body with the provider's secret>")
    ] = None,
) -> Accepted:
    """Verify, validate, check the operation, publish the receipt; answer once it is durable."""
    api = ctx.settings.api
    client = client_address(request)
    if not x_convdb_signature:
        raise HTTPException(401, "missing X-Convdb-Signature header")
    body = await read_capped(request, api.receipt_max_bytes)
    signer = signing_provider(ctx, body, x_convdb_signature)
    if signer is None:
        ctx.throttle.failed(client)
        raise HTTPException(401, "bad signature: no provider's secret signed this body")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise HTTPException(400, f"body is not JSON: {str(exc)[:200]}") from exc
    now = datetime.now(UTC)
    receipt = build_receipt(
        payload, now, timedelta(seconds=api.receipt_window_s), timedelta(seconds=api.receipt_skew_s)
    )
    if receipt.provider != signer:
        raise HTTPException(401, f"the body names provider {shown(receipt.provider)}; {signer!r} signed it")
    state = await _operation(ctx, receipt.operation_id)
    if state is None or state.tenant_id != receipt.tenant_id:
        raise HTTPException(404, f"no operation {shown(receipt.operation_id)}")
    if state.tool_name not in api.receipt_tools.get(signer, ()):
        raise HTTPException(
            403, f"provider {signer!r} is not bound to tool {state.tool_name!r} (CONVDB_API__RECEIPT_TOOLS)"
        )
    # Redaction reads the whole receipt: on a worker thread, not on the event loop every tenant shares.
    await ctx.publish_async([(RECEIPTS, await run_in_threadpool(ctx.secrets.redact_record, receipt))])
    return Accepted(receipt_id=receipt.id, operation_id=receipt.operation_id)
