"""`POST /receipts`: the providers' webhook, HMAC-signed per provider, into the receipts topic.

A receipt's id is derived from (provider, provider_receipt, operation_id), so a provider that
retries its webhook publishes the same record again and every reader drops the repeat.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from consumers.api.deps import Ctx
from schemas import Receipt
from schemas.topics import RECEIPTS

router = APIRouter(tags=["effects"])

_RECEIPT_IDS = uuid.UUID("0b7f3c52-4a8e-4a55-8f61-7d0c2b9e5e21")
REQUIRED = ("provider", "operation_id", "tenant_id", "provider_receipt", "status", "timestamp")


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """True when `header` is `sha256=<hex HMAC-SHA256 of body>` under `secret`."""
    if not header or not header.startswith("sha256="):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, header.removeprefix("sha256="))


def build_receipt(payload: dict[str, Any]) -> Receipt:
    """The Receipt record a webhook payload stands for; raises HTTPException(400) if malformed."""
    missing = [f for f in REQUIRED if not isinstance(payload.get(f), str) or not payload.get(f)]
    if missing:
        raise HTTPException(400, f"receipt is missing string field(s): {', '.join(missing)}")
    operation_id: str = payload["operation_id"]
    conversation_id, sep, _action = operation_id.rpartition("/")
    if not sep or not conversation_id:
        raise HTTPException(400, f"operation_id {operation_id!r} is not '<conversation_id>/<action_id>'")
    try:
        timestamp = datetime.fromisoformat(payload["timestamp"])
    except ValueError as exc:
        raise HTTPException(400, f"timestamp {payload['timestamp']!r} is not ISO-8601") from exc
    name = f"{payload['provider']}|{payload['provider_receipt']}|{operation_id}"
    try:
        return Receipt(
            id=str(uuid.uuid5(_RECEIPT_IDS, name)),
            provider=payload["provider"],
            operation_id=operation_id,
            conversation_id=conversation_id,
            tenant_id=payload["tenant_id"],
            provider_receipt=payload["provider_receipt"],
            status=payload["status"],
            result=payload.get("result") if isinstance(payload.get("result"), str) else "",
            timestamp=timestamp if timestamp.tzinfo else timestamp.replace(tzinfo=UTC),
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise HTTPException(400, f"bad receipt: {problems}") from exc


@router.post("/receipts", status_code=202, summary="a provider's signed receipt for an operation")
async def post_receipt(
    request: Request,
    ctx: Ctx,
    x_convdb_signature: Annotated[
        str | None, Header(description="sha256=<hex HMAC-SHA256 of the raw body with the provider's secret>")
    ] = None,
) -> dict[str, str]:
    """Verify the signature, publish the receipt to the receipts topic, answer once it is durable."""
    if not x_convdb_signature:
        raise HTTPException(401, "missing X-Convdb-Signature header")
    body = await request.body()
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HTTPException(400, f"body is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise HTTPException(400, "body must be a JSON object")
    provider = payload.get("provider")
    if not isinstance(provider, str) or not provider:
        raise HTTPException(400, "receipt is missing string field(s): provider")
    secret = ctx.settings.api.receipt_secrets.get(provider)
    if secret is None or not verify_signature(secret.get_secret_value(), body, x_convdb_signature):
        raise HTTPException(401, f"bad signature for provider {provider!r}")
    receipt = build_receipt(payload)
    await run_in_threadpool(ctx.publish, [(RECEIPTS, receipt)])
    return {"receipt_id": receipt.id, "operation_id": receipt.operation_id}
