"""`convdb init`: the one-shot deployment job: every topic and the archive bucket, idempotently."""

from __future__ import annotations

import argparse
from pathlib import Path
from urllib.parse import urlparse

from convdb.infra.cli._common import reachable_broker, refuse_sample_credentials, require_broker
from convdb.infra.connection import load_settings
from convdb.infra.errors import InfraError
from convdb.infra.kafka import apply_topics
from convdb.infra.s3 import s3_client
from convdb.infra.settings import Settings
from convdb.schemas.topics import ALL_TOPICS


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `init` command."""
    p = sub.add_parser(
        "init",
        help="create the topics (partitions, replication factor from settings) and the archive bucket",
        description="Idempotent set-up for a deployment: creates every topic of the namespace, the "
        "reconciler's changelog included, and the S3 bucket of CONVDB_ARCHIVE_URL. Refuses to run "
        "with a sample credential unless CONVDB_DEV is on.",
    )
    p.set_defaults(func=_init)


def _init(_: argparse.Namespace) -> int:
    from convdb.consumers.reconciler import CHANGELOG  # imports faust: only this command needs it

    settings = require_broker(load_settings())
    refuse_sample_credentials(settings, serving_api=False)
    reachable_broker(settings)
    for name, state in apply_topics(settings, (*ALL_TOPICS, CHANGELOG)).items():
        print(f"topic {name}\t{state}", flush=True)
    if settings.archive_url:
        print(f"archive {settings.archive_url}\t{ensure_archive(settings)}", flush=True)
    return 0


def ensure_archive(settings: Settings) -> str:
    """Create the archive's bucket (s3://) or folder (file://); returns 'created' or 'exists'.

    Raises:
        InfraError: the URL is neither, or the object store refused.
    """
    url = urlparse(settings.archive_url or "")
    if url.scheme == "file" and url.path:
        folder = Path(url.path)
        state = "exists" if folder.is_dir() else "created"
        folder.mkdir(parents=True, exist_ok=True)
        return state
    if url.scheme != "s3" or not url.netloc:
        raise InfraError(
            f"archive URL {settings.archive_url!r} is neither s3://bucket/prefix nor file:///dir"
        )
    from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

    client = s3_client(settings.s3)
    try:
        try:
            client.head_bucket(Bucket=url.netloc)
            return "exists"
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                raise
        client.create_bucket(Bucket=url.netloc)
    except client.exceptions.BucketAlreadyOwnedByYou:
        return "exists"
    except (BotoCoreError, ClientError) as exc:
        where = settings.s3.endpoint_url or "AWS"
        raise InfraError(f"cannot create or reach bucket {url.netloc} at {where}: {exc}") from exc
    return "created"
