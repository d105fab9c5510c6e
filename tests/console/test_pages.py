"""The console over a store filled by the real consumers: sessions, tenancy, CSRF, escaping, paging."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from subprocess import Popen

import httpx
import pytest

from convdb.consumers.console.live import sse
from convdb.infra.procs import free_port, spawn, stop_group, wait_for_port
from convdb.infra.reader import read_topic as read_log
from convdb.schemas import EffectResolved, InboxMessage, SingleObjectCodec
from convdb.schemas.topics import EFFECTS, INBOX
from tests.console.conftest import SECRET_B, ConsoleWorld, csrf_of, sign_in
from tests.helpers import read_topic

pytestmark = pytest.mark.kafka
CODEC = SingleObjectCodec()


def event_ids(html: str) -> list[str]:
    return re.findall(r'data-event-id="([^"]+)"', html)


def test_signed_out_pages_go_to_the_login_form(console_world: ConsoleWorld) -> None:
    with console_world.client() as client:
        for path in ("/", "/console/queue", "/console/conversations/a1"):
            response = client.get(path, follow_redirects=False)
            assert response.status_code == 303 and response.headers["location"] == "/console/login", path
        assert client.get("/console/live/conversations").status_code == 401
        posted = client.post(
            "/console/conversations/a1/messages", data={"content": "hi"}, follow_redirects=False
        )
        assert posted.status_code == 303 and posted.headers["location"] == "/console/login"


def test_login_sets_a_safe_session_cookie_without_the_key(console_world: ConsoleWorld) -> None:
    for https in (False, True):
        with console_world.client(https=https) as client:
            client.get("/console/login")
            refused = client.post("/console/login", data={"api_key": "key-a"})  # no token
            assert refused.status_code == 403 and "expired" in refused.text
            wrong = client.post("/console/login", data={"csrf": csrf_of(refused.text), "api_key": "nope"})
            assert wrong.status_code == 401 and "Unknown API key" in wrong.text
            token = csrf_of(wrong.text)
            done = client.post(
                "/console/login", data={"csrf": token, "api_key": "key-a"}, follow_redirects=False
            )
            assert done.status_code == 303 and "key-a" not in done.headers["location"]
            header = next(h for h in done.headers.get_list("set-cookie") if h.startswith("convdb_session="))
            flags = {part.strip().split("=")[0].lower() for part in header.split(";")}
            assert {"httponly", "path", "max-age"} <= flags and "samesite=lax" in header.lower()
            assert ("secure" in flags) is https, header
            value = SimpleCookie(header)["convdb_session"].value
            assert "key-a" not in value and value
            assert client.get("/").status_code == 200


def test_a_session_never_shows_another_tenants_data(console_world: ConsoleWorld) -> None:
    with console_world.client() as a, console_world.client() as b:
        sign_in(a, "key-a")
        sign_in(b, "key-b")
        listed = a.get("/").text
        assert 'data-conversation-id="a1"' in listed and 'data-conversation-id="a2"' in listed
        # ("b1" alone may occur inside a random token of the page)
        assert 'data-conversation-id="b1"' not in listed and '/conversations/b1"' not in listed
        assert SECRET_B not in listed
        for path in (
            "/console/conversations/b1",
            "/console/conversations/b1/branches",
            "/console/conversations/b1?offset=3",
        ):
            page = a.get(path)
            assert page.status_code == 404 and SECRET_B not in page.text, path
        assert a.get("/console/live/conversations/b1").status_code == 404
        queue = a.get("/console/queue").text
        assert console_world.unknown_a in queue and console_world.unknown_b not in queue
        token = csrf_of(listed)
        for path, form in (
            ("/console/conversations/b1/messages", {"content": "hi"}),
            ("/console/conversations/b1/pause", {}),
            ("/console/conversations/b1/cancel", {}),
            (
                "/console/operations/resolve",
                {"operation_id": console_world.unknown_b, "decision": "confirmed"},
            ),
        ):
            assert a.post(path, data={"csrf": token, **form}).status_code == 404, path
        seen_by_b = b.get("/").text
        assert SECRET_B in seen_by_b and 'data-conversation-id="a1"' not in seen_by_b
        assert b.get("/console/conversations/a1").status_code == 404


def test_hostile_event_text_renders_as_text(console_world: ConsoleWorld) -> None:
    with console_world.client() as client:
        sign_in(client, "key-a")
        for path in ("/", "/console/conversations/a1"):
            page = client.get(path)
            assert "<script>window.__xss" not in page.text and "<img src=x" not in page.text, path
            assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page.text, path
            assert "script-src 'self'" in page.headers["content-security-policy"]
    # A carriage return in a text cannot start a new server-sent event field.
    assert (
        sse("append", "a\rid: x\r\rdata: y")
        == "event: append\ndata: a\ndata: id: x\ndata: \ndata: data: y\n\n"
    )


def test_search_page_finds_the_tenants_words_marked_and_escaped(console_world: ConsoleWorld) -> None:
    with console_world.client() as a, console_world.client() as b:
        sign_in(a, "key-a")
        sign_in(b, "key-b")
        found = a.get("/console/search", params={"q": "window xss"}).text
        assert 'data-conversation-id="a1"' in found and 'data-seq="1"' in found
        assert "<script>window.__xss" not in found and "<img src=x" not in found
        assert "&lt;script&gt;<mark>window</mark>.__<mark>xss</mark>" in found
        # The other tenant's words are in the same index, and never found from here (nor ours there).
        words = " ".join(SECRET_B.split()[:3])
        assert 'class="hit"' not in a.get("/console/search", params={"q": words}).text
        assert 'data-conversation-id="b1"' in b.get("/console/search", params={"q": words}).text
        assert 'class="hit"' not in b.get("/console/search", params={"q": "window xss"}).text
        # Within one conversation, and a query without a word is said, not a crash.
        inside = a.get("/console/search", params={"q": "bug", "conversation_id": "a2"}).text
        assert 'data-conversation-id="a2"' in inside and 'data-conversation-id="a1"' not in inside
        empty = a.get("/console/search", params={"q": "!!"})
        assert empty.status_code == 200 and "no word in it" in empty.text


def test_as_of_an_event_shows_every_panel_as_it_was_then(console_world: ConsoleWorld) -> None:
    with console_world.client() as a:
        sign_in(a, "key-a")
        live = a.get("/console/conversations/a1").text
        assert "Every effect confirmed:</strong> no" in live and 'id="asof-banner"' not in live
        assert 'href="/console/conversations/a1?seq=10"' in live  # "as of here" on each event
        then = a.get("/console/conversations/a1", params={"seq": "10"}).text
        assert 'id="asof-banner"' in then and "As of event #10" in then and "Back to now" in then
        assert "<dt>Events</dt><dd>10</dd>" in then  # the stats fold of the first 10 events
        assert 'data-seq="10"' in then and 'data-seq="11"' not in then
        assert "Every effect confirmed:</strong> yes" in then and "No side effects." in then
        assert console_world.unknown_a not in then  # the unknown operation came later
        assert "Send a message" not in then  # nothing live on an "as of" page
        missing = a.get("/console/conversations/a1", params={"seq": "999"})
        assert missing.status_code == 400 and "no event #999" in missing.text


def test_forms_need_the_session_token_and_post_to_the_inbox(console_world: ConsoleWorld) -> None:
    settings = console_world.settings
    with console_world.client() as client:
        sign_in(client, "key-a", name="Ada")
        page = client.get("/console/conversations/a1")
        assert 'action="/console/conversations/a1/cancel"' in page.text and ">Cancel</button>" in page.text
        refused = client.post("/console/conversations/a1/messages", data={"content": "no token"})
        assert refused.status_code == 403
        refused = client.post("/console/conversations/a1/messages", data={"content": "x", "csrf": "forged"})
        assert refused.status_code == 403
        sent = client.post(
            "/console/conversations/a1/messages",
            data={"content": "ship it", "csrf": csrf_of(page.text)},
            follow_redirects=False,
        )
        assert sent.status_code == 303 and sent.headers["location"].endswith("?notice=sent")
    records = [CODEC.decode(v) for _, _, _, v in read_topic(settings, INBOX.name(settings.namespace), 1)]
    assert [(r.conversation_id, r.content, r.sender) for r in records if isinstance(r, InboxMessage)] == [
        ("a1", "ship it", "Ada")
    ]


def test_resolve_from_the_queue_records_who_decided(console_world: ConsoleWorld) -> None:
    settings, op = console_world.settings, console_world.unknown_a
    with console_world.client() as client:
        sign_in(client, "key-a", name="Grace")
        queue = client.get("/console/queue")
        assert (
            "It happened" in queue.text and "Abandon" in queue.text and "no lookup for notify" in queue.text
        )
        bad = client.post(
            "/console/operations/resolve",
            data={"csrf": csrf_of(queue.text), "operation_id": op, "decision": "maybe"},
        )
        assert bad.status_code == 400
        done = client.post(
            "/console/operations/resolve",
            follow_redirects=False,
            data={
                "csrf": csrf_of(queue.text),
                "operation_id": op,
                "decision": "confirmed",
                "note": "saw it in Slack",
            },
        )
        assert done.status_code == 303, done.text
        assert "Recorded" in client.get(done.headers["location"]).text
    effects = [CODEC.decode(v) for _, _, _, v in read_topic(settings, EFFECTS.name(settings.namespace), 9)]
    (resolved,) = [r for r in effects if isinstance(r, EffectResolved)]
    assert (resolved.operation_id, resolved.decision, resolved.resolved_by, resolved.note) == (
        op,
        "confirmed",
        "human:tenant-a:Grace",
        "saw it in Slack",
    )
    inbox = [CODEC.decode(v) for _, _, _, v in read_topic(settings, INBOX.name(settings.namespace), 2)]
    assert any(isinstance(r, InboxMessage) and r.command == "resolve" and r.operation_id == op for r in inbox)


def test_long_timeline_is_paged_and_matches_the_api_view(console_world: ConsoleWorld) -> None:
    with console_world.client() as client:
        sign_in(client, "key-a")
        view = client.get("/conversations/a2/view", headers={"X-API-Key": "key-a"}).json()["events"]
        ids = [e["id"] for e in view]
        assert len(ids) == 450
        page = client.get("/console/conversations/a2").text
        assert event_ids(page) == ids[-200:]
        assert "Show earlier events (250 more)" in page
        earlier = client.get("/console/conversations/a2", params={"before": 250}).text
        assert event_ids(earlier) == ids[50:250]
        rows = client.get(
            "/events", params={"conversation_id": "a2", "limit": 500}, headers={"X-API-Key": "key-a"}
        ).json()["events"]
        tenth = next(r for r in rows if r["seq"] == 10)
        past = client.get("/console/conversations/a2", params={"offset": tenth["offset"]}).text
        assert event_ids(past) == ids[:10] and "Timeline as of" in past
        assert client.get("/console/conversations/a2", params={"before": "x"}).status_code == 400
        assert client.get("/console/conversations/a2", params={"at": "yesterday"}).status_code == 400


def test_branches_and_forks_are_shown(console_world: ConsoleWorld) -> None:
    a3 = console_world.of("a3")
    with console_world.client() as client:
        sign_in(client, "key-a")
        page = client.get("/console/conversations/a3").text
        assert event_ids(page) == [e.id for e in a3[:5]] and "/console/conversations/a3/branches" in page
        tree = client.get("/console/conversations/a3/branches").text
        rows = re.findall(r"<tr( class=\"active-branch\")?>\s*<td><a href=\"[^\"]+leaf=([^\"]+)\"", tree)
        assert [(bool(active), leaf) for active, leaf in rows] == [(True, a3[4].id), (False, a3[5].id)]
        # The tree: the three events both branches share, then the two runs where they part, each
        # leaf labelled by its branch's last message.
        runs = re.findall(
            r'<span class="run">(\d+) events? <span class="muted">#(\d+)(?:–#(\d+))?</span>', tree
        )
        assert runs == [("3", "1", "3"), ("2", "4", "5"), ("1", "6", "")], runs
        leaves = re.findall(r'<a class="leaf( active)?" href="[^"]+leaf=([^"]+)"><bdi>([^<]*)</bdi>', tree)
        assert [(bool(a), leaf, label) for a, leaf, label in leaves] == [
            (True, a3[4].id, "user: please fix bug a3"),
            (False, a3[5].id, "user: please fix bug a3"),
        ]
        side = client.get("/console/conversations/a3/branches", params={"leaf": a3[5].id}).text
        assert event_ids(side) == [a3[0].id, a3[1].id, a3[2].id, a3[5].id]
        assert client.get("/console/conversations/a3/branches", params={"leaf": "nope"}).status_code == 404
        source = client.get("/console/conversations/a1").text
        assert 'Forked into <a href="/console/conversations/a4">a4</a>' in source
        fork = client.get("/console/conversations/a4").text
        assert "Forked from" in fork and 'href="/console/conversations/a1"' in fork


def test_list_filters_and_keyset_pages(console_world: ConsoleWorld) -> None:
    with console_world.client() as client:
        sign_in(client, "key-a")
        first = client.get("/", params={"status": "running"}).text
        assert 'data-conversation-id="a1"' in first
        assert "No conversations match" in client.get("/", params={"status": "finished"}).text
        assert "No conversations match" in client.get("/", params={"since": "2999-01-01T00:00"}).text
        assert client.get("/", params={"status": "bogus"}).status_code == 400
        seen, after, last_activity = [], None, []
        while True:  # the JSON API's keyset pages, most recent activity first, one per page
            params = {"order": "recent", "limit": 1, **({"after": after} if after else {})}
            page = client.get("/conversations", params=params, headers={"X-API-Key": "key-a"}).json()
            seen += [c["conversation_id"] for c in page["conversations"]]
            last_activity += [c["stats"]["last_timestamp"] for c in page["conversations"]]
            after = page["next_after"]
            if after is None:
                break
        assert sorted(seen) == ["a1", "a2", "a3", "a4"] and last_activity == sorted(
            last_activity, reverse=True
        )
        bad = client.get(
            "/conversations", params={"order": "recent", "after": "x"}, headers={"X-API-Key": "key-a"}
        )
        assert bad.status_code == 400


def _serve(world: ConsoleWorld, tmp_path: Path, **api: object) -> tuple[Popen[bytes], str]:
    port = free_port()
    log = tmp_path / "serve.log"
    argv = [sys.executable, "-m", "convdb", "serve", "--port", str(port)]
    settings = world.settings.model_copy(update={"api": world.settings.api.model_copy(update=api)})
    proc = spawn(argv, log, settings.to_env())
    wait_for_port(proc, port, 60, "convdb serve", log)
    return proc, f"http://127.0.0.1:{port}"


def _signed_in(base: str, key: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=10)
    token = csrf_of(client.get("/console/login").text)
    assert client.post("/console/login", data={"csrf": token, "api_key": key}).status_code == 303
    return client


def _first_event(lines: Iterator[str]) -> tuple[str, str, str]:
    """(event, id, data) of the next event on a stream's lines (keep the iterator: dropping it
    mid-stream closes the connection)."""
    fields: dict[str, list[str]] = {}
    for line in lines:
        if not line:
            if "event" in fields:
                return fields["event"][0], (fields.get("id") or [""])[0], "\n".join(fields.get("data", []))
            fields = {}
            continue
        name, _, value = line.partition(": ")
        fields.setdefault(name, []).append(value)
    raise AssertionError("the stream ended without an event")


def test_live_streams_append_new_events_and_are_bounded(console_world: ConsoleWorld, tmp_path: Path) -> None:
    proc, base = _serve(console_world, tmp_path, console_streams_per_session=2)
    try:
        ids = [e.id for e in console_world.of("a2")]
        client = _signed_in(base, "key-a")
        url = "/console/live/conversations/a2"
        with client.stream("GET", url, params={"since": 440, "tail": ids[439]}) as behind:
            assert behind.status_code == 200 and behind.headers["content-type"].startswith(
                "text/event-stream"
            )
            lines = behind.iter_lines()
            event, event_id, html = _first_event(lines)
            assert event == "append" and event_id == f"450:{ids[-1]}"
            assert re.findall(r'data-event-id="([^"]+)"', html) == ids[440:]
            with client.stream("GET", url, params={"since": 440, "tail": "not-that-one"}) as moved:
                assert (
                    _first_event(moved.iter_lines())[0] == "reload"
                )  # the page no longer matches the branch
            with client.stream("GET", url, params={"since": 450, "tail": ids[-1]}) as second:
                assert second.status_code == 200
                third = client.get(url, params={"since": 450, "tail": ids[-1]})
                assert third.status_code == 503 and third.headers["retry-after"]
                other = _signed_in(base, "key-a")  # another session has its own slots
                with other.stream("GET", url, params={"since": 450, "tail": ids[-1]}) as fine:
                    assert fine.status_code == 200
        # A page rendered before a change learns of it, however late its stream connects. (A new
        # session: the streams closed above give their slots back only when the server notices.)
        late = _signed_in(base, "key-a")
        with late.stream("GET", "/console/live/conversations", params={"v": "rendered-earlier"}) as stale:
            assert _first_event(stale.iter_lines())[0] == "changed"
        with late.stream("GET", url, params={"since": 450, "tail": ids[-1], "v": "old"}) as panels:
            assert _first_event(panels.iter_lines())[0] == "changed"
        b = _signed_in(base, "key-b")
        assert b.get(url).status_code == 404
        with b.stream("GET", "/console/live/conversations/b1") as own:
            assert own.status_code == 200
    finally:
        stop_group(proc.pid)
        proc.wait(10)


def test_hostile_ids_texts_and_numbers_in_the_console_are_refused_not_crashed(
    console_world: ConsoleWorld,
) -> None:
    with console_world.client() as client:
        sign_in(client, "key-a", name="Eve\x1b[2J\u202e")
        token = csrf_of(client.get("/").text)
        for path in (
            "/console/conversations/a%00b",
            "/console/conversations/" + "x" * 5000,
            "/console/conversations/a1?offset=" + "9" * 40,
            "/console/conversations/a1?offset=%C2%B2",  # a Unicode digit
            "/console/conversations/a1?before=-1",
            "/console/queue?after=%00",
            "/?after=" + "z" * 5000,
        ):
            page = client.get(path)
            assert page.status_code in (400, 404), (path[:50], page.status_code)
            assert len(page.text) < 20_000
        for path, form in (
            ("/console/conversations/a%00b/messages", {"content": "hi"}),
            ("/console/conversations/a1/messages", {"content": "nul \x00 inside"}),
            ("/console/conversations/" + "y" * 300 + "/pause", {}),
            ("/console/operations/resolve", {"operation_id": "c\x00/a", "decision": "failed"}),
        ):
            answer = client.post(path, data={"csrf": token, **form})
            assert answer.status_code in (400, 404), (path[:50], answer.status_code)
        page = client.get("/console/conversations/a1")
        assert "\x1b" not in page.text and "\u202e" not in page.text  # the sign-in name was cleaned


def test_failed_console_sign_ins_are_rate_limited(console_world: ConsoleWorld) -> None:
    limit = console_world.settings.api.auth_failures
    with console_world.client() as client:
        for _ in range(limit):
            page = client.get("/console/login")
            token = re.search(r'name="csrf" value="([^"]+)"', page.text)
            assert token
            wrong = client.post("/console/login", data={"csrf": token.group(1), "api_key": "guess"})
            assert wrong.status_code == 401
        page = client.get("/console/login")
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert token
        limited = client.post("/console/login", data={"csrf": token.group(1), "api_key": "guess"})
        assert limited.status_code == 429 and "too many" in limited.text
        # The failures of others behind this address never keep a valid key out.
        token = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/login").text)
        assert token
        fields = {"csrf": token.group(1), "api_key": "key-a"}
        assert client.post("/console/login", data=fields, follow_redirects=False).status_code == 303


def test_the_fork_page_and_its_forms_refuse_bad_input(console_world: ConsoleWorld) -> None:
    """The page behind each event's "fork / branch from here"; its forms go through the API's checks."""
    a3 = console_world.of("a3")
    with console_world.client() as client:
        sign_in(client, "key-a")
        page = client.get("/console/conversations/a3").text
        assert 'href="/console/conversations/a3/fork?seq=3"' in page
        shown = client.get("/console/conversations/a3/fork", params={"seq": 3})
        assert shown.status_code == 200 and event_ids(shown.text) == [a3[2].id]
        assert 'id="fork-button"' in shown.text and 'id="branch-button"' in shown.text
        switch = client.get("/console/conversations/a3/fork", params={"seq": 7}).text
        assert "is a branch switch" in switch and 'id="fork-button"' not in switch
        for seq, status in (("x", 400), ("0", 400), ("99", 400)):
            assert client.get("/console/conversations/a3/fork", params={"seq": seq}).status_code == status
        assert client.get("/console/conversations/b1/fork", params={"seq": 1}).status_code == 404
        token = csrf_of(page)
        cases = [
            ("a3/branch", {"at_seq": "3"}, 403, "form token"),  # no CSRF token
            ("a3/branch", {"csrf": token, "at_seq": "9"}, 400, "no event #9"),
            ("a3/branch", {"csrf": token, "at_seq": "7"}, 400, "is a branch switch"),
            ("b1/branch", {"csrf": token, "at_seq": "1"}, 404, "no conversation"),
            ("a3/fork", {"csrf": token, "at_seq": "2", "new_conversation_id": "a1"}, 409, "already exists"),
            ("a3/fork", {"csrf": token, "at_seq": "2", "new_conversation_id": "a3"}, 409, "a new id"),
            ("a3/fork", {"csrf": token, "at_seq": "2", "new_conversation_id": "x/y"}, 400, "id"),
            ("a3/fork", {"csrf": token, "at_seq": "-1"}, 400, "whole number"),
        ]
        for path, data, status, words in cases:
            answer = client.post(f"/console/conversations/{path}", data=data, follow_redirects=False)
            assert answer.status_code == status and words in answer.text, (path, data, answer.text[-300:])
        done = client.post(
            "/console/conversations/a3/fork",
            data={"csrf": token, "at_seq": "2", "new_conversation_id": "a3-fork"},
            follow_redirects=False,
        )
        assert done.status_code == 303
        assert done.headers["location"] == "/console/conversations/a3?notice=forked&fork=a3-fork"
        assert 'href="/console/conversations/a3-fork"' in client.get(done.headers["location"]).text
        moved = client.post(
            "/console/conversations/a3/branch", data={"csrf": token, "at_seq": "3"}, follow_redirects=False
        )
        assert moved.status_code == 303 and moved.headers["location"].endswith("?notice=branched")
        cancelled = client.post(
            "/console/conversations/a3/cancel", data={"csrf": token}, follow_redirects=False
        )
        assert cancelled.status_code == 303 and cancelled.headers["location"].endswith("?notice=cancel")
    settings = console_world.settings
    found = [CODEC.decode(m.value()) for m in read_log(settings, INBOX.name(settings.namespace))]
    commands = {(r.conversation_id, r.command, r.at_seq, r.source_conversation_id) for r in found}
    assert {("a3-fork", "fork", 2, "a3"), ("a3", "branch", 3, None), ("a3", "cancel", None, None)} <= commands
