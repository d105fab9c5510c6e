"""Resolver plugins: found through `convdb.resolvers`, the tracker one against a real provider."""

from __future__ import annotations

from pathlib import Path

import httpx

from convdb.consumers.reconciler import load_resolvers
from convdb.infra.procs import free_port
from convdb.infra.settings import Settings
from convdb.producers.tools.tracker import TrackerResolver
from convdb.projections.effects import initial
from tests.conftest import settings_for
from tests.reconciler.conftest import start_provider


def settings_with(urls: dict[str, str]) -> Settings:
    return settings_for(reconciler={"resolver_urls": urls, "lookup_timeout_s": 2})


def test_unconfigured_resolvers_are_skipped() -> None:
    assert load_resolvers(settings_with({})) == {}
    found = load_resolvers(settings_with({"tracker": "http://127.0.0.1:1"}))
    assert isinstance(found["create_issue"], TrackerResolver)


def test_tracker_lookup_answers(tmp_path: Path) -> None:
    provider, url = start_provider(tmp_path / "provider.log")
    try:
        resolver = TrackerResolver(settings_with({"tracker": url}))
        op = "conv-1/act-1"
        assert resolver.lookup(initial(op)).outcome == "not_found"
        httpx.post(f"{url}/issues", json={"title": "t"}, headers={"Idempotency-Key": op}, timeout=5)
        found = resolver.lookup(initial(op))
        assert (
            found.outcome == "found"
            and found.provider_receipt == "trk-1"
            and '"key": "conv-1/act-1"' in found.result
        )
    finally:
        provider.stop()
    down = TrackerResolver(settings_with({"tracker": f"http://127.0.0.1:{free_port()}"}))
    answer = down.lookup(initial("conv-1/act-2"))
    assert answer.outcome == "unknown" and "ConnectError" in answer.detail
