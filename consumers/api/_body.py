"""Request bodies read with a size cap: nothing beyond the limit is read or kept."""

from __future__ import annotations

from fastapi import HTTPException, Request


async def read_capped(request: Request, limit: int, what: str = "body") -> bytes:
    """The request's body, 413 as soon as it (or its declared length) passes `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"{what} of {declared[:20]} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"{what} larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
