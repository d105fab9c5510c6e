"""Where archive objects live: an S3 bucket (boto3) or a local folder with the same layout."""

from __future__ import annotations

import builtins
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from convdb.consumers.archive.errors import ArchiveError, ArchiveUrlError
from convdb.infra.s3 import s3_client
from convdb.infra.settings import Settings

logger = logging.getLogger(__name__)


class ArchiveTarget(Protocol):
    """An object store holding the archive: put, get and ordered listing by key."""

    url: str

    def put(self, key: str, data: bytes, metadata: dict[str, str]) -> None:
        """Store an object (replacing any object with that key)."""
        ...

    def get(self, key: str) -> bytes | None:
        """An object's bytes, or None when there is no such key."""
        ...

    def list(self, prefix: str, start_after: str = "") -> Iterator[str]:
        """Keys under `prefix` in ascending order, only those after `start_after`."""
        ...

    # `builtins.list`: in these classes `list` names the listing method.
    def folders(self, prefix: str) -> builtins.list[str]:
        """Names of the immediate sub-folders of `prefix` (which ends with '/')."""
        ...


class S3Target:
    """An S3 bucket (any endpoint boto3 can reach)."""

    def __init__(self, client: Any, bucket: str) -> None:
        self.client = client
        self.bucket = bucket
        self.url = f"s3://{bucket}"

    def put(self, key: str, data: bytes, metadata: dict[str, str]) -> None:
        """PutObject with user metadata."""
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, Metadata=metadata)
        except Exception as exc:  # noqa: BLE001 - botocore raises many unrelated types
            raise ArchiveError(f"put s3://{self.bucket}/{key} failed: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        """GetObject; None on NoSuchKey."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        except Exception as exc:  # noqa: BLE001
            raise ArchiveError(f"get s3://{self.bucket}/{key} failed: {exc}") from exc

    def head_metadata(self, key: str) -> dict[str, str]:
        """An object's S3 user metadata."""
        try:
            return self.client.head_object(Bucket=self.bucket, Key=key)["Metadata"]
        except Exception as exc:  # noqa: BLE001
            raise ArchiveError(f"head s3://{self.bucket}/{key} failed: {exc}") from exc

    def list(self, prefix: str, start_after: str = "") -> Iterator[str]:
        """ListObjectsV2, paginated (1000 keys a page)."""
        pages = self.client.get_paginator("list_objects_v2")
        kwargs = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after:
            kwargs["StartAfter"] = start_after
        try:
            for page in pages.paginate(**kwargs):
                for item in page.get("Contents", []):
                    yield item["Key"]
        except Exception as exc:  # noqa: BLE001
            raise ArchiveError(f"list s3://{self.bucket}/{prefix} failed: {exc}") from exc

    def folders(self, prefix: str) -> builtins.list[str]:
        """Common prefixes under `prefix` with Delimiter='/' (no object listing)."""
        pages = self.client.get_paginator("list_objects_v2")
        names = []
        try:
            for page in pages.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/"):
                names += [c["Prefix"][len(prefix) :].rstrip("/") for c in page.get("CommonPrefixes", [])]
        except Exception as exc:  # noqa: BLE001
            raise ArchiveError(f"list s3://{self.bucket}/{prefix} failed: {exc}") from exc
        return sorted(names)


class FileTarget:
    """A local folder: keys are relative paths; writes are atomic (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = f"file://{root}"

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise ArchiveError(f"key {key!r} escapes the archive folder {self.root}")
        return path

    def put(self, key: str, data: bytes, metadata: dict[str, str]) -> None:  # noqa: ARG002
        """Write the file atomically; metadata lives in the sidecar index instead."""
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise ArchiveError(f"write {path} failed: {exc}") from exc

    def get(self, key: str) -> bytes | None:
        """The file's bytes, or None."""
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ArchiveError(f"read {key} under {self.root} failed: {exc}") from exc

    def list(self, prefix: str, start_after: str = "") -> Iterator[str]:
        """Every file under the prefix, in key order (temp files excluded)."""
        folder = prefix.rpartition("/")[0]
        base = self.root / folder if folder else self.root
        if not base.is_dir():
            return
        keys = []
        for path in base.rglob("*"):
            if path.is_file() and not path.name.startswith(".tmp-"):
                key = path.relative_to(self.root).as_posix()
                if key.startswith(prefix) and key > start_after:
                    keys.append(key)
        yield from sorted(keys)

    def folders(self, prefix: str) -> builtins.list[str]:
        """Sub-directories of the prefix folder."""
        base = self.root / prefix
        return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.is_dir() else []


def open_target(settings: Settings) -> tuple[ArchiveTarget, str]:
    """The archive target and key prefix named by `archive_url`.

    Raises:
        ArchiveUrlError: no archive configured, or the URL is not s3:// or file://.
    """
    url = settings.archive_url
    if not url:
        raise ArchiveUrlError(
            "no archive configured: set CONVDB_ARCHIVE_URL=s3://bucket/prefix or file:///dir "
            "(or start the dev stack with `convdb dev up`)"
        )
    parsed = urlparse(url)
    if parsed.scheme == "s3" and parsed.netloc:
        return S3Target(s3_client(settings.s3), parsed.netloc), parsed.path.strip("/")
    if parsed.scheme == "file" and parsed.path and not parsed.netloc:
        root = Path(parsed.path)
        return FileTarget(root), ""
    raise ArchiveUrlError(f"archive URL {url!r} is neither s3://bucket/prefix nor file:///dir")
