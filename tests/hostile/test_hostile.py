"""The hostile-input suite: the running system, attacked through every entry point, on both stores.

Two tenants, acme and umbrella. Cross-tenant attempts on every endpoint (and the race where the
read side lags), control characters and huge ids through the API, the inbox, the events and
receipts topics, hostile receipts, unbounded integers, planted secrets. Afterwards every service
still runs, `/healthz` is truthful, no tenant sees another's data, and nothing was lost.
Tests run in file order on one stack per store (the last one checks what the others left).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from confluent_kafka import Producer

from convdb.consumers.archive.container import read_container
from convdb.consumers.archive.target import open_target
from convdb.infra.dlq import ERROR_CLASS
from convdb.infra.kafka import producer_config
from convdb.schemas import InboxMessage, MessageEvent, ObservationEvent, Receipt
from tests.conftest import BrokerInfo, S3Endpoint, wait_until
from tests.consumers.conftest import drop_pg_schema, make_pg_schema, require_pg
from tests.hostile.stack import (
    ACME,
    CODEC,
    RECEIPT_SECRET,
    REGISTERED,
    UMBRELLA,
    Stack,
    stack_settings,
    start_stack,
)
from tests.schemas.test_validation import foreign_bytes

pytestmark = [pytest.mark.kafka, pytest.mark.s3, pytest.mark.postgres]

PLANTED_IN_TASK = ("AKIAZ7QWERTYUIOP1234", "ghp_" + "Hx7k" * 9)
PLANTED_IN_FILE = (
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAhostileplantedkeymaterial0123456789\n"
    "-----END RSA PRIVATE KEY-----",
    "sk-ant-api03-" + "Pl4nted" * 5,
)
FRAGMENTS = (
    "AKIAZ7QWERTYUIOP1234",
    "Hx7kHx7kHx7k",
    "hostileplantedkeymaterial",
    "Pl4ntedPl4nted",
    REGISTERED[1],
)
ACCEPTED: dict[str, list[str]] = {}
"""conversation -> contents of the user messages the API accepted (202), to prove none was lost."""


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def stack(
    request: pytest.FixtureRequest,
    broker: BrokerInfo,
    s3_endpoint: S3Endpoint,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp(f"hostile-{request.param}")
    schema = None
    if request.param == "postgresql":
        require_pg()
        url, schema = make_pg_schema()
    else:
        url = f"sqlite:///{root / 'store.db'}"
    ACCEPTED.clear()
    stack = start_stack(stack_settings(broker, s3_endpoint, url, root), request.param, root)
    try:
        yield stack
    finally:
        stack.stop()
        if schema is not None:
            drop_pg_schema(schema)


def post_message(stack: Stack, conversation: str, content: str, headers: dict[str, str]) -> int:
    found = stack.call("POST", f"/conversations/{conversation}/messages", headers, json={"content": content})
    if found.status_code == 202:
        ACCEPTED.setdefault(conversation, []).append(content)
    return found.status_code


def finished(stack: Stack, conversation: str, headers: dict[str, str] = ACME) -> dict | None:
    found = stack.call("GET", f"/conversations/{conversation}/status", headers)
    body = found.json() if found.status_code == 200 else None
    return body if body and body["execution_status"] == "finished" and body["run_loop_stopped"] else None


def operations_of(stack: Stack, conversation: str, headers: dict[str, str]) -> list[dict]:
    return stack.call("GET", "/operations", headers, params={"conversation_id": conversation}).json()[
        "operations"
    ]


def produce(stack: Stack, suffix: str, key: bytes, value: bytes) -> None:
    producer = Producer(producer_config(stack.settings))
    producer.produce(stack.settings.topic(suffix), value, key)
    assert producer.flush(30) == 0


def dead_letters(stack: Stack) -> list[dict[str, str]]:
    return [
        {k: (v or b"").decode(errors="replace") for k, v in m.headers() or []} for m in stack.records("dlq")
    ]


def test_cross_tenant_attempts_on_every_endpoint(stack: Stack) -> None:
    conv = f"acme-{uuid.uuid4().hex[:8]}"
    task = 'please write a file\n!write_file {"path": "acme.txt", "content": "acme only"}'
    assert post_message(stack, conv, task, ACME) == 202
    wait_until(lambda: finished(stack, conv), 120, "acme's conversation to finish", logs=stack.logs())
    (operation,) = wait_until(
        lambda: operations_of(stack, conv, ACME), 60, "acme's operation on the read side", logs=stack.logs()
    )
    op = operation["operation_id"]

    for path in (f"/conversations/{conv}", f"/conversations/{conv}/view", f"/conversations/{conv}/status",
                 f"/operations/{op}"):  # fmt: skip
        assert stack.call("GET", path, UMBRELLA).status_code == 404, path
    for command in ("messages", "pause", "resume"):
        found = stack.call(
            "POST",
            f"/conversations/{conv}/{command}",
            UMBRELLA,
            json={"content": "mine"} if command == "messages" else None,
        )
        assert found.status_code == 404, (command, found.text)
    resolved = stack.call("POST", f"/operations/{op}/resolve", UMBRELLA, json={"decision": "failed"})
    assert resolved.status_code == 404
    assert stack.call("GET", "/events", UMBRELLA, params={"conversation_id": conv}).json()["events"] == []
    assert operations_of(stack, conv, UMBRELLA) == []
    listed = stack.call("GET", "/conversations", UMBRELLA).json()["conversations"]
    assert conv not in {c["conversation_id"] for c in listed}
    # A receipt that names umbrella for acme's operation: refused like an unknown operation.
    body = json.dumps({
        "provider": "files", "operation_id": op, "tenant_id": "umbrella", "provider_receipt": "r-1",
        "status": "succeeded", "timestamp": datetime.now(UTC).isoformat(),
    }).encode()  # fmt: skip
    signature = "sha256=" + hmac.new(RECEIPT_SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert stack.call("POST", "/receipts", {"X-Convdb-Signature": signature}, content=body).status_code == 404


def test_the_lagging_read_side_race_and_a_foreign_producer(stack: Stack) -> None:
    read_side = stack.services["read-side"]
    read_side.stop()  # the read side lags from here on
    try:
        lagging = f"lag-{uuid.uuid4().hex[:8]}"
        assert post_message(stack, lagging, "acme starts this one", ACME) == 202
        assert post_message(stack, lagging, "umbrella claims it", UMBRELLA) == 404
        raced = f"race-{uuid.uuid4().hex[:8]}"
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            answers = list(
                pool.map(
                    lambda h: post_message(stack, raced, f"mine ({h['X-API-Key']})", h), (ACME, UMBRELLA)
                )
            )
        assert sorted(answers) == [202, 404], answers
        # A foreign producer writes umbrella's message into acme's conversation.
        intruder = InboxMessage(
            id=str(uuid.uuid4()), conversation_id=lagging, tenant_id="umbrella",
            timestamp=datetime.now(UTC), command="message", content="intruder",
        )  # fmt: skip
        produce(stack, "inbox", lagging.encode(), CODEC.encode(intruder))
        wait_until(lambda: any(d.get(ERROR_CLASS) == "TenantMismatchError" for d in dead_letters(stack)), 90,
                   "the runner to refuse the intruder", logs=stack.logs())  # fmt: skip
    finally:
        read_side.start()
    wait_until(
        lambda: finished(stack, lagging), 120, "acme's lagging conversation to show up", logs=stack.logs()
    )
    winner = ACME if answers[0] == 202 else UMBRELLA
    assert wait_until(
        lambda: finished(stack, raced, winner), 120, "the race winner's conversation", logs=stack.logs()
    )
    loser = UMBRELLA if winner is ACME else ACME
    assert stack.call("GET", f"/conversations/{raced}", loser).status_code == 404


HOSTILE_PATHS = ["/conversations/a%00b", "/conversations/" + "x" * 10_000, "/conversations/%E2%80%AEx/view",
                 "/operations/" + "c/" + "y" * 10_000, "/conversations/a%0Ab/messages"]  # fmt: skip
HOSTILE_QUERIES = [
    ("/conversations/x/view", {"offset": str(2**70)}),
    ("/conversations", {"limit": str(10**40)}),
    ("/conversations", {"order": "recent", "after": f"{10**30}:x"}),
    ("/events", {"limit": "-1"}),
    ("/events", {"cursor": "WzEsOTk5OTk5OTk5OTk5OTk5OTk5OTk5OTksImEiLDEsImUiXQ"}),
    ("/events", {"conversation_id": "\x07"}),
    ("/operations", {"limit": str(2**64)}),
]


def test_control_characters_huge_ids_and_unbounded_integers_through_every_entry_point(stack: Stack) -> None:
    for path in HOSTILE_PATHS:
        for method in ("GET", "POST"):
            found = stack.call(method, path, ACME, json={"content": "x"} if method == "POST" else None)
            assert found.status_code in (400, 404, 405), (method, path[:40], found.status_code)
            assert len(found.content) < 1500
    for path, params in HOSTILE_QUERIES:
        found = stack.call("GET", path, ACME, params=params)
        assert found.status_code in (400, 404), (path, params, found.status_code, found.text[:200])
    for body in ({"content": "nul\x00"}, {"content": "x" * 200_000}, {"content": "ok", "sender": "\x1b[2J"}):
        assert stack.call("POST", "/conversations/fine/messages", ACME, json=body).status_code == 400
    # Records of a foreign producer on the inbox, events and receipts topics, each breaking a rule.
    now = datetime.now(UTC)
    base = MessageEvent(id="f1", conversation_id="foreign", tenant_id="acme", seq=1, timestamp=now,
                        source="user", role="user", content="fine")  # fmt: skip
    nul = base.model_construct(**{**base.__dict__, "content": "nul \x00 text"})
    huge = base.model_construct(**{**base.__dict__, "conversation_id": "z" * 5000})
    produce(stack, "events", b"foreign", foreign_bytes(nul))
    produce(stack, "events", b"z" * 5000, foreign_bytes(huge))
    inbox = InboxMessage(id="i1", conversation_id="foreign-inbox", tenant_id="acme", timestamp=now,
                         command="message", content="hi")  # fmt: skip
    produce(
        stack,
        "inbox",
        b"foreign-inbox",
        foreign_bytes(inbox.model_construct(**{**inbox.__dict__, "content": "\x00"})),
    )
    receipt = Receipt(
        id="r1", provider="files", operation_id="foreign/act", conversation_id="foreign", tenant_id="acme",
        provider_receipt="ok", status="succeeded", timestamp=datetime.now(UTC),
    )  # fmt: skip
    produce(
        stack,
        "receipts",
        b"foreign",
        foreign_bytes(receipt.model_construct(**{**receipt.__dict__, "result": "\x00"})),
    )
    wait_until(lambda: sum(d.get(ERROR_CLASS) == "InvalidRecordError" for d in dead_letters(stack)) >= 4, 90,
               "the foreign records in the DLQ", logs=stack.logs())  # fmt: skip
    # Every service went on.
    assert post_message(stack, "after-poison", "still serving", ACME) == 202
    wait_until(
        lambda: finished(stack, "after-poison"), 120, "a conversation after the poison", logs=stack.logs()
    )


def test_planted_secrets_reach_no_topic_store_or_archive_object(stack: Stack) -> None:
    (stack.workspace / "credentials.txt").write_text("\n".join(PLANTED_IN_FILE) + "\n")
    conv = f"secrets-{uuid.uuid4().hex[:8]}"
    task = (f"use {PLANTED_IN_TASK[0]} and {PLANTED_IN_TASK[1]} and {REGISTERED[1]}\n"
            '!read_file {"path": "credentials.txt"}')  # fmt: skip
    assert post_message(stack, conv, task, ACME) == 202
    wait_until(
        lambda: finished(stack, conv), 120, "the conversation that read the credentials", logs=stack.logs()
    )
    events = [CODEC.decode(m.value()) for m in stack.records("events") if m.key() == conv.encode()]
    (observation,) = [e for e in events if isinstance(e, ObservationEvent)]
    assert "<secret:detected.private_key>" in observation.content, observation.content
    assert f"<secret:{REGISTERED[0]}>" in next(e.content for e in events if isinstance(e, MessageEvent))
    for suffix in ("events", "inbox", "state", "effects", "receipts"):
        for message in stack.records(suffix):
            blob = (message.value() or b"") + (message.key() or b"")
            assert not any(f.encode() in blob for f in FRAGMENTS), suffix
    wait_until(
        lambda: _store_holds(stack, conv), 60, "the read side to hold the conversation", logs=stack.logs()
    )
    assert _store_leaks(stack) == []
    wait_until(
        lambda: _archived(stack, "events") >= len(stack.records("events")),
        90,
        "the archive to catch up",
        logs=stack.logs(),
    )
    assert _archive_leaks(stack) == []


def _store_holds(stack: Stack, conv: str) -> bool:
    return finished(stack, conv) is not None and bool(
        stack.call("GET", f"/conversations/{conv}", ACME).json()["title"]
    )


def _store_leaks(stack: Stack) -> list[str]:
    engine = sa.create_engine(stack.settings.resolved_store_url)
    leaks = []
    try:
        with engine.connect() as conn:
            metadata = sa.MetaData()
            metadata.reflect(conn)
            for table in metadata.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    for value in row:
                        blob = value if isinstance(value, bytes) else str(value).encode()
                        leaks += [f"{table.name}: {f[:12]}" for f in FRAGMENTS if f.encode() in blob]
    finally:
        engine.dispose()
    return leaks


def _archive_objects(stack: Stack) -> dict[str, bytes]:
    target, prefix = open_target(stack.settings)
    return {key: target.get(key) or b"" for key in target.list(prefix)}


def _archived(stack: Stack, suffix: str) -> int:
    name = stack.settings.topic(suffix)
    return sum(len(list(read_container(data, key))) for key, data in _archive_objects(stack).items()
               if f"/{name}/" in key and key.endswith(".avro"))  # fmt: skip


def _archive_leaks(stack: Stack) -> list[str]:
    leaks = []
    for key, data in _archive_objects(stack).items():
        blobs = (
            [data]
            if not key.endswith(".avro")
            else [(r.value or b"") + (r.key or b"") for r in read_container(data, key)]
        )
        leaks += [f"{key}: {f[:12]}" for blob in blobs for f in FRAGMENTS if f.encode() in blob]
    return leaks


def test_afterwards_everything_runs_health_is_true_tenants_are_apart_nothing_lost(stack: Stack) -> None:
    for name, service in stack.services.items():
        assert service.alive(), f"{name} died\n{stack.tails()}"
    assert stack.call("GET", "/healthz").status_code == 200
    for name in ("read-side", "archive"):
        health = wait_until(
            lambda n=name: stack.services[n].health(), 30, f"{name} /healthz", logs=stack.logs()
        )
        assert health.status_code == 200, (name, health.text)
    read_side = wait_until(lambda: stack.services["read-side"].health().json()["behind"] == 0 or None, 90,
                           "the read side to catch up", logs=stack.logs())  # fmt: skip
    del read_side
    seen = {}
    for tenant, headers in (("acme", ACME), ("umbrella", UMBRELLA)):
        listed = stack.call("GET", "/conversations", headers, params={"limit": 500}).json()["conversations"]
        seen[tenant] = {c["conversation_id"] for c in listed}
        events = stack.call("GET", "/events", headers, params={"limit": 500}).json()["events"]
        assert {e["event"]["tenant_id"] for e in events} <= {tenant}
    assert not seen["acme"] & seen["umbrella"]
    user_messages: dict[str, list[str]] = {}
    for message in stack.records("events"):
        try:
            event = CODEC.decode(message.value())
        except Exception:  # noqa: BLE001 - the planted foreign records are poison on purpose
            continue
        if isinstance(event, MessageEvent) and event.role == "user":
            user_messages.setdefault(event.conversation_id, []).append(event.content)
    for conv, contents in ACCEPTED.items():
        assert len(user_messages.get(conv, [])) == len(contents), (conv, contents, user_messages.get(conv))
