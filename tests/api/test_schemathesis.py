"""schemathesis against the API's OpenAPI schema (bounded): no 5xx, and every answer is documented.

The app runs over a store the real consumers filled and a real broker (posts land in the inbox
topic). Checks: no server error, the status code and content type are in the schema, the body
matches the documented schema. Examples: `EXAMPLES` per operation in each generation mode,
positive (schema-valid) and negative (schema-breaking) inputs, so the whole run stays within a few
minutes; the figures are printed.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from convdb.consumers.api import create_app
from tests.api.conftest import KEYS, World

pytestmark = [pytest.mark.kafka]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = 40
CALLS: list[float] = []


@pytest.fixture(scope="module")
def fuzzed_app(world: World) -> Iterator[FastAPI]:
    """The API over the world's store; authentication failures are not rate-limited here (the
    fuzzer makes hundreds on purpose: `tests/reconciler/test_api.py` proves the limit)."""
    api = world.settings.api.model_copy(update={"auth_failures": 1_000_000, "receipt_wait_s": 0.0})
    app = create_app(world.settings.model_copy(update={"api": api}))
    yield app
    app.state.ctx.close()
    print(f"\nschemathesis: {len(CALLS)} calls in {sum(CALLS):.1f}s (max {max(CALLS, default=0):.2f}s)")


def test_no_server_error_and_every_answer_is_documented(fuzzed_app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12  # every documented route is explored
    failures: list[str] = []
    for operation, mode in itertools.product(operations, schemathesis.GenerationMode):
        calls = len(CALLS)

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
        )
        def explore(case: schemathesis.Case) -> None:
            started = time.perf_counter()
            # A valid key two calls in three: authenticated routes get past the key check to their logic.
            headers = {"X-API-Key": next(iter(KEYS))} if len(CALLS) % 3 else None
            try:
                case.call_and_validate(headers=headers, checks=CHECKS)
            finally:
                CALLS.append(time.perf_counter() - started)

        try:
            explore()
        except Unsatisfiable:
            assert mode is schemathesis.GenerationMode.NEGATIVE, operation.label  # nothing to break
            continue
        except Exception as exc:  # noqa: BLE001 - collect every operation's failure, then fail once
            failures.append(f"{operation.label} ({mode.value}): {str(exc)[:2000]}")
        assert len(CALLS) > calls, operation.label
    assert not failures, "\n\n".join(failures)
