"""Archive target contract, run against a folder, SeaweedFS (real S3) and moto server."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from convdb.consumers.archive.errors import ArchiveUrlError
from convdb.consumers.archive.target import ArchiveTarget, FileTarget, S3Target, open_target
from convdb.infra.s3 import make_s3_client
from convdb.infra.settings import S3Settings
from tests.conftest import S3Endpoint, settings_for


def _bucket(client: object) -> str:
    name = f"c-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)  # type: ignore[attr-defined]
    return name


class TargetContract:
    """What every archive target must do; subclasses provide `target`."""

    @pytest.fixture
    def target(self) -> ArchiveTarget:
        raise NotImplementedError

    def test_put_get_replaces_and_missing_is_none(self, target: ArchiveTarget) -> None:
        target.put("a/t/partition=0/x.avro", b"one", {"records": "1"})
        target.put("a/t/partition=0/x.avro", b"two", {"records": "1"})
        assert target.get("a/t/partition=0/x.avro") == b"two"
        assert target.get("a/t/partition=0/missing.avro") is None

    def test_list_is_ordered_and_honours_start_after(self, target: ArchiveTarget) -> None:
        keys = [f"a/t/partition=1/{i:020d}.avro" for i in (30, 10, 20)]
        for k in keys:
            target.put(k, b"x", {})
        target.put("a/t/partition=10/other.avro", b"x", {})
        assert list(target.list("a/t/partition=1/")) == sorted(keys)
        assert list(target.list("a/t/partition=1/", keys[1])) == [keys[2], keys[0]]

    def test_folders_lists_partitions_without_objects(self, target: ArchiveTarget) -> None:
        for p in (0, 2, 11):
            target.put(f"a/t/partition={p}/k.avro", b"x", {})
        assert target.folders("a/t/") == ["partition=0", "partition=11", "partition=2"]
        assert target.folders("a/none/") == []


class TestFileTarget(TargetContract):
    @pytest.fixture
    def target(self, tmp_path: Path) -> ArchiveTarget:
        return FileTarget(tmp_path / "archive")


@pytest.mark.s3
class TestSeaweedTarget(TargetContract):
    @pytest.fixture
    def target(self, s3_endpoint: S3Endpoint) -> ArchiveTarget:
        client = make_s3_client(
            s3_endpoint.endpoint_url, "us-east-1", s3_endpoint.access_key_id, s3_endpoint.secret_access_key
        )
        return S3Target(client, _bucket(client))


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.mark.s3
class TestMotoTarget(TargetContract):
    @pytest.fixture
    def target(self, moto_endpoint: str) -> ArchiveTarget:
        client = make_s3_client(moto_endpoint, "us-east-1", "test", "test")
        return S3Target(client, _bucket(client))


def test_open_target_parses_urls_and_refuses_others(tmp_path: Path) -> None:
    base = settings_for()
    s3 = base.model_copy(
        update={"archive_url": "s3://bucket/some/prefix", "s3": S3Settings(endpoint_url="http://x")}
    )
    target, prefix = open_target(s3)
    assert isinstance(target, S3Target) and target.bucket == "bucket" and prefix == "some/prefix"
    target, prefix = open_target(base.model_copy(update={"archive_url": f"file://{tmp_path}"}))
    assert isinstance(target, FileTarget) and prefix == ""
    for bad in (None, "http://x/y", "s3://", "file://host/dir"):
        with pytest.raises(ArchiveUrlError):
            open_target(base.model_copy(update={"archive_url": bad}))
