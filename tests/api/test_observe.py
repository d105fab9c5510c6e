"""The API's /healthz and /metrics: truthful health, requests counted by route template and status."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine

from convdb.consumers.api import create_app
from tests.api.conftest import KEYS, World


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of one metric, by its sorted labels."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_requests_are_counted_by_route_template_and_status(world: World) -> None:
    key = next(k for k, t in KEYS.items() if t == "tenant-a")
    for conv in ("a1", "a2"):
        assert world.client.get(f"/conversations/{conv}", headers={"X-API-Key": key}).status_code == 200
    assert world.client.get("/conversations").status_code == 401
    assert world.client.get("/no/such/route").status_code == 404
    text = world.client.get("/metrics").text
    counts = samples(text, "convdb_api_requests_total")
    route = "/conversations/{conversation_id}"
    assert counts[(("method", "GET"), ("route", route), ("status", "200"))] >= 2
    assert counts[(("method", "GET"), ("route", "/conversations"), ("status", "401"))] >= 1
    assert counts[(("method", "GET"), ("route", "unmatched"), ("status", "404"))] >= 1
    latency = samples(text, "convdb_api_request_seconds_count")
    assert latency[(("method", "GET"), ("route", route))] >= 2


def test_healthz_is_ok_while_the_store_answers(world: World) -> None:
    answer = world.client.get("/healthz")
    assert answer.status_code == 200 and answer.json() == {"status": "ok", "problems": {}}


def test_healthz_says_503_when_the_store_is_gone(world: World) -> None:
    app = create_app(world.settings)
    app.state.ctx.engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:9/none")
    with TestClient(app) as client:
        answer = client.get("/healthz")
    assert answer.status_code == 503
    assert answer.json()["status"] == "unhealthy" and "store" in answer.json()["problems"]
