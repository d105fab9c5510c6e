"""Console sessions against the real `convdb serve`: sign-out revokes on every replica, the cookie
names the key by a keyed hash only, sign-in is throttled, one tenant cannot take every live
stream, and a hostile `Last-Event-ID` is ignored, never a 500."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from convdb.consumers.console.session import COOKIE
from convdb.infra.settings import Settings
from tests.api.served import served
from tests.console.conftest import KEYS, ConsoleWorld, csrf_of
from tests.consumers.conftest import drop_pg_schema, make_pg_schema, require_pg

pytestmark = pytest.mark.kafka


def sign_in(base: str, key: str) -> httpx.Client:
    """A fresh client (its own cookies) signed in with `key`."""
    client = httpx.Client(base_url=base, timeout=15)
    token = csrf_of(client.get("/console/login").text)
    answer = client.post("/console/login", data={"csrf": token, "api_key": key})
    assert answer.status_code == 303, answer.text
    return client


def login_attempt(client: httpx.Client, key: str) -> httpx.Response:
    """One sign-in post through the form (`client` is not signed in)."""
    token = csrf_of(client.get("/console/login").text)
    return client.post("/console/login", data={"csrf": token, "api_key": key})


def events(lines: Iterator[str]) -> Iterator[tuple[str, str, str]]:
    """(event, id, data) of each server-sent event on a stream's lines."""
    fields: dict[str, list[str]] = {}
    for line in lines:
        if line:
            name, _, value = line.partition(": ")
            fields.setdefault(name, []).append(value)
            continue
        if "event" in fields:
            yield fields["event"][0], (fields.get("id") or [""])[0], "\n".join(fields.get("data", []))
        fields = {}


def signed_out(client: httpx.Client) -> bool:
    """True when the client's cookie no longer opens the console (pages, streams, forms)."""
    page = client.get("/")
    stream = client.get("/console/live/conversations")
    form = client.post("/console/conversations/a1/pause", data={"csrf": "whatever"})
    return (
        page.status_code == 303
        and page.headers["location"] == "/console/login"
        and stream.status_code == 401
        and form.status_code == 303
        and form.headers["location"] == "/console/login"
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """One store two API replicas share."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    require_pg()
    url, schema = make_pg_schema()
    try:
        yield url
    finally:
        drop_pg_schema(schema)


def test_sign_out_revokes_a_copied_cookie_on_every_replica(
    settings: Settings, store_url: str, tmp_path: Path
) -> None:
    shared = settings.model_copy(update={"store_url": store_url})
    secret = f"session-secret-{uuid.uuid4().hex}"
    with (
        served(shared, tmp_path, "replica-1", keys=KEYS, session_secret=secret) as one,
        served(shared, tmp_path, "replica-2", keys=KEYS, session_secret=secret) as two,
    ):
        user = sign_in(one, "key-a")
        cookie = user.cookies[COOKIE]
        thief = httpx.Client(base_url=two, cookies={COOKIE: cookie}, timeout=15)
        assert thief.get("/").status_code == 200  # the copy works, on the other replica too
        with thief.stream("GET", "/console/live/conversations") as stream:
            assert stream.status_code == 200
            feed = events(stream.iter_lines())
            token = csrf_of(user.get("/").text)
            assert user.post("/console/logout", data={"csrf": token}).status_code == 303
            started = time.monotonic()
            # The open stream learns of it at its next session check (RECHECK_S) and ends.
            assert next(feed)[0] == "reload"
            assert time.monotonic() - started < 15
        for base in (one, two):
            assert signed_out(httpx.Client(base_url=base, cookies={COOKIE: cookie}, timeout=15)), base
        # Signing out again with the copy changes nothing; signing in again starts a new session.
        again = httpx.Client(base_url=one, cookies={COOKIE: cookie}, timeout=15)
        assert again.post("/console/logout", data={"csrf": token}).status_code == 303
        assert sign_in(two, "key-a").get("/").status_code == 200


def unkeyed_digests(key: str) -> set[str]:
    """The key's plain digests, hex and base64, 12 characters of each (what a cookie must not hold)."""
    found = set()
    for name in sorted(hashlib.algorithms_guaranteed - {"shake_128", "shake_256"}):
        raw = hashlib.new(name, key.encode()).digest()
        for text in (
            raw.hex(),
            base64.b64encode(raw).decode(),
            base64.urlsafe_b64encode(raw).decode(),
        ):
            found.add(text[:12])
    return found


def cookie_body(value: str) -> str:
    text = value.partition(".")[0]
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


def test_the_cookie_names_the_key_by_a_keyed_hash_and_hostile_cookies_are_refused(
    settings: Settings, tmp_path: Path
) -> None:
    store = settings.model_copy(update={"store_url": f"sqlite:///{tmp_path / 'store.db'}"})
    with (
        served(store, tmp_path, "one", keys=KEYS, session_secret="secret-number-one") as one,
        served(store, tmp_path, "two", keys=KEYS, session_secret="secret-number-two") as two,
    ):
        values = [sign_in(base, "key-a").cookies[COOKIE] for base in (one, two)]
        bodies = [cookie_body(v) for v in values]
        for value, body in zip(values, bodies, strict=True):
            assert "key-a" not in body and "key-a" not in value
            for digest in unkeyed_digests("key-a"):
                assert digest not in body and digest not in value, (digest, body)
        # Keyed: under another session secret the same key is named differently.
        assert json.loads(bodies[0])["k"] != json.loads(bodies[1])["k"]
        # A cookie of one secret opens nothing under the other.
        assert httpx.get(f"{two}/", cookies={COOKIE: values[0]}).status_code == 303
        for hostile in ("é.é", "x.\u00ff\u00fe", ".", "e30.", values[0] + "x", "%00.%00"):
            page = httpx.get(f"{one}/", headers={"Cookie": f"{COOKIE}={hostile}".encode("latin-1")})
            assert page.status_code == 303, (hostile, page.status_code)
        signed = sign_in(one, "key-a")
        bad_token = signed.post("/console/conversations/a1/pause", data={"csrf": "é-not-the-token"})
        assert bad_token.status_code == 403


def test_sign_in_is_throttled_and_a_valid_key_still_signs_in(settings: Settings, tmp_path: Path) -> None:
    store = settings.model_copy(update={"store_url": f"sqlite:///{tmp_path / 'store.db'}"})
    with served(store, tmp_path, keys=KEYS, console_sign_ins=3) as base:
        guesser = httpx.Client(base_url=base, timeout=15)
        answers = [login_attempt(guesser, uuid.uuid4().hex).status_code for _ in range(20)]
        assert answers == [401] * 20
        limited = login_attempt(guesser, uuid.uuid4().hex)
        assert limited.status_code == 429 and "too many failed authentications" in limited.text
        # Others' failures from this address keep no valid key out: three sessions for tenant A...
        for _ in range(3):
            sign_in(base, "key-a")
        # ...and no more in this window: sessions (and the live streams they hold) are not free.
        over = login_attempt(httpx.Client(base_url=base, timeout=15), "key-a")
        assert over.status_code == 429 and "CONVDB_API__CONSOLE_SIGN_INS=3" in over.text
        assert sign_in(base, "key-b").get("/").status_code == 200  # another tenant signs in


def test_one_tenant_cannot_take_every_live_stream(console_world: ConsoleWorld, tmp_path: Path) -> None:
    limits = {"console_streams": 4, "console_streams_per_tenant": 2, "console_streams_per_session": 1}
    with served(console_world.settings, tmp_path, **limits) as base, ExitStack() as streams:

        def open_stream(client: httpx.Client) -> httpx.Response:
            return streams.enter_context(client.stream("GET", "/console/live/conversations"))

        first = sign_in(base, "key-a")
        assert open_stream(first).status_code == 200
        second_tab = open_stream(first)
        assert second_tab.status_code == 503 and "PER_SESSION" in second_tab.read().decode()
        assert open_stream(sign_in(base, "key-a")).status_code == 200
        # Tenant A signs in as often as it likes: its sessions share the tenant's bound.
        third = open_stream(sign_in(base, "key-a"))
        assert third.status_code == 503 and third.headers["retry-after"]
        assert "CONVDB_API__CONSOLE_STREAMS_PER_TENANT" in third.read().decode()
        # Tenant B's live updates are still served.
        for _ in range(2):
            assert open_stream(sign_in(base, "key-b")).status_code == 200


HOSTILE_IDS = (
    b"\xb9",  # '¹': str.isdigit says yes, int() says no
    b"\xb9\xb2:x",
    b"\xb2\xb3:%s",
    "\u0663:x".encode(),  # '٣' in UTF-8 (a server reads it as Latin-1)
    b"99999999999999999999999999:x",
    str(2**62 + 1).encode() + b":x",
    b"-1:x",
    b"+5:x",
    b"5 :x",
    b"0x10:x",
    b"1e3:x",
    b"1_0:x",
    b":",
    b"abc",
    b"\xff\xfe\xfd",
)


def test_hostile_last_event_ids_are_ignored_never_a_500(console_world: ConsoleWorld, tmp_path: Path) -> None:
    ids = [e.id for e in console_world.of("a1")]
    with served(console_world.settings, tmp_path, console_streams_per_session=64) as base:
        client = sign_in(base, "key-a")
        url, query = "/console/live/conversations/a1", {"since": 25, "tail": ids[24]}

        def first_append(last_event_id: bytes) -> tuple[str, int]:
            headers = {"Last-Event-ID": last_event_id.replace(b"%s", ids[-1].encode())}
            with client.stream("GET", url, params=query, headers=headers) as stream:
                assert stream.status_code == 200, (last_event_id, stream.status_code, stream.read())
                event, event_id, html = next(events(stream.iter_lines()))
            assert event == "append", (last_event_id, event)
            return event_id, len(re.findall(r'data-event-id="', html))

        n = len(ids)
        for hostile in HOSTILE_IDS:
            # Ignored: the stream goes on from the page's own `since` and `tail`.
            assert first_append(hostile) == (f"{n}:{ids[-1]}", n - 25), hostile
        # A Last-Event-ID this server sent still resumes the stream where it left off.
        assert first_append(f"{n - 2}:{ids[-3]}".encode()) == (f"{n}:{ids[-1]}", 2)
