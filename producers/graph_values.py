"""Large LangGraph values in the archive bucket, by reference (a claim check).

A channel value or task write whose serialized bytes exceed a quarter of the record size limit
is put in the archive bucket (`CONVDB_ARCHIVE_URL`, s3:// or file://) under a key named by its
SHA-256, before the record that refers to it is written; the record carries a small reference
(type `convdb-ref`: the value's own serde type, the key, the digest and the size). A reader
fetches the object and checks its digest. Content addressing makes the upload idempotent (a
retried or repeated put writes the same object) and shares equal values between checkpoints.

Without an archive the value stays in the record, and a record above the limit is refused
(`ConvdbSaver.check_sizes`). Tombstones (`delete_thread`, `prune`) do not delete objects: the
bucket's lifecycle rules do, as for the archive of the topics.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from convdb.infra.errors import InfraError
from convdb.infra.s3 import s3_client
from convdb.infra.settings import Settings

REF_TYPE = "convdb-ref"
"""The serde type of a value stored by reference."""


class ValueStore:
    """Put and get values by digest in the archive location (an S3 bucket and prefix, or a folder)."""

    def __init__(self, settings: Settings) -> None:
        url = settings.archive_url or ""
        parsed = urlparse(url)
        self.folder = f"graph-values/{settings.namespace}"
        self._client: Any = None
        if parsed.scheme == "s3" and parsed.netloc:
            self._client = s3_client(settings.s3)
            self.bucket = parsed.netloc
            prefix = parsed.path.strip("/")
            self.folder = f"{prefix}/{self.folder}" if prefix else self.folder
            self.root: Path | None = None
        elif parsed.scheme == "file" and parsed.path:
            self.root = Path(parsed.path)
        else:
            raise InfraError(f"archive URL {url!r} is neither s3://bucket/prefix nor file:///dir")

    def put(self, data: bytes) -> tuple[str, str]:
        """Store `data` (no-op when already there); its key and SHA-256."""
        digest = hashlib.sha256(data).hexdigest()
        key = f"{self.folder}/{digest}"
        try:
            if self.root is not None:
                path = self.root / key
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    partial = path.with_suffix(".part")
                    partial.write_bytes(data)
                    partial.replace(path)
            else:
                self._client.put_object(Bucket=self.bucket, Key=key, Body=data)
        except Exception as exc:  # noqa: BLE001 - botocore and the OS raise many types
            raise InfraError(f"cannot store a large graph value at {key}: {exc}") from exc
        return key, digest

    def get(self, key: str, digest: str) -> bytes:
        """The object at `key`, checked against its digest."""
        try:
            if self.root is not None:
                data = (self.root / key).read_bytes()
            else:
                data = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as exc:  # noqa: BLE001
            raise InfraError(f"cannot read the large graph value at {key}: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise InfraError(f"the large graph value at {key} does not match its digest {digest}")
        return bytes(data)


def reference(kind: str, key: str, digest: str, size: int) -> tuple[str, bytes]:
    """The typed value a record carries instead of a large one."""
    return REF_TYPE, json.dumps({"type": kind, "key": key, "sha256": digest, "size": size}).encode()


def dereference(store: ValueStore | None, typed: tuple[str, bytes]) -> tuple[str, bytes]:
    """The typed value itself (fetched when `typed` is a reference)."""
    if typed[0] != REF_TYPE:
        return typed
    if store is None:
        raise InfraError("a graph value is stored in the archive bucket, and no archive is configured")
    ref = json.loads(typed[1])
    return str(ref["type"]), store.get(str(ref["key"]), str(ref["sha256"]))
