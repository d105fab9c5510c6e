"""S3 client factory (boto3)."""

from __future__ import annotations

from typing import Any

from convdb.infra.settings import S3Settings


def make_s3_client(
    endpoint_url: str | None, region: str, access_key_id: str | None, secret_access_key: str | None
) -> Any:
    """A boto3 S3 client; path-style addressing so local endpoints work."""
    import boto3  # type: ignore[import-untyped]  # boto3 ships no types
    from botocore.config import Config  # type: ignore[import-untyped]

    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"}),
    )


def s3_client(settings: S3Settings) -> Any:
    """A boto3 S3 client for a settings section."""
    secret = settings.secret_access_key.get_secret_value() if settings.secret_access_key else None
    return make_s3_client(settings.endpoint_url, settings.region, settings.access_key_id, secret)
