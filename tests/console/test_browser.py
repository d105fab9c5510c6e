"""The console in Debian's Chromium (Playwright) against a running stack with the demo's conversations.

list → open a conversation → its timeline equals the API's view → decide the unknown operation
in the human queue and watch the conversation continue, live → a new event appears live → a
hostile message renders as text → search across conversations and within one → another tenant's
session sees none of it. Screenshots of each page at 1400 and 420 px wide go to
`--console-artifacts DIR`, else `$CONVDB_ARTIFACTS/console`, else tests/console/artifacts (printed).
Without /usr/bin/chromium these tests fail: `infra/scripts/chromium.sh` installs it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from convdb.consumers.archive import export
from convdb.infra.cli.demo.parts import task
from convdb.infra.kafka import apply_topics
from convdb.infra.settings import Settings
from convdb.schemas import ActiveLeafChangedEvent, ForkEvent, make_codec
from tests.conftest import wait_until
from tests.console.conftest import HOSTILE
from tests.console.stack import Stack

pytestmark = pytest.mark.kafka

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NOTIFY = 'Tell ops the deploy is done.\n!notify {"to": "ops", "text": "deploy of service 1 done"}'
FAN_OUT = "!delegate " + json.dumps(
    {"tasks": [{"message": f"Summarise the notes of service {i}"} for i in (1, 2)]}
)
WAIT_MS = 60_000


@pytest.fixture(scope="module")
def stack(
    make_settings: Callable[..., Settings], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """The demo's three conversations, one whose notify outcome is unknown (its runner was killed
    during the provider call), a hostile one, and another tenant's; all run by fleet runners."""
    settings = make_settings()
    apply_topics(settings)
    running = Stack(settings, tmp_path_factory.mktemp("console-stack")).start()
    try:
        workspace = running.root / "workspace"
        workspace.mkdir(exist_ok=True)
        for i in (1, 2, 3):
            (workspace / f"notes-{i}.txt").write_text(f"Notes {i}: the deploy of service {i} went fine.")
            running.send(f"demo-{i}", "demo", task(i))
        running.send("notify-1", "demo", NOTIFY)
        running.send("hostile-1", "demo", HOSTILE)
        running.send("other-1", "other", "A task of another tenant")
        running.send("tree-1", "demo", FAN_OUT, agent="delegator")
        first = running.start_runner(
            "runner-a", CONVDB_CRASH_AT="after_effect_started", CONVDB_CRASH_TOOL="notify"
        )
        assert first.wait(90) == -9, running.tails()  # SIGKILLed in the middle of the notify call
        running.start_runner("runner-b")
        for conv in ("demo-1", "demo-2", "demo-3", "hostile-1"):
            running.wait_status(conv, "finished")
        running.wait_status("notify-1", "waiting_for_human")
        running.wait_status("other-1", "finished", key="other-key")
        running.wait_status("tree-1", "finished")
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def artifacts(request: pytest.FixtureRequest) -> Path:
    """The screenshot folder (printed once): `--console-artifacts`, else `$CONVDB_ARTIFACTS/console`
    (a folder CI keeps), else tests/console/artifacts (git-ignored)."""
    given = request.config.getoption("--console-artifacts") or os.environ.get("CONVDB_ARTIFACTS")
    if given and not request.config.getoption("--console-artifacts"):
        given = str(Path(given) / "console")
    folder = Path(given) if given else Path(__file__).resolve().parent / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():  # type: ignore[union-attr]
        print(f"\nconsole screenshots: {folder.resolve()}")
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (never a downloaded browser)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: run `bash infra/scripts/chromium.sh` (Debian's chromium)", pytrace=False
        )
    from playwright.sync_api import sync_playwright  # imported here: the failure above names the fix

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def session(browser: Any, stack: Stack) -> Iterator[Any]:
    """A browser context signed in as the demo tenant through the login form; JS errors are collected."""
    context = browser.new_context(base_url=stack.url, viewport={"width": 1366, "height": 900})
    context.errors = []
    context.on("weberror", lambda error: context.errors.append(str(error.error)))
    context.on("console", lambda m: m.type == "error" and context.errors.append(m.text))
    yield context
    context.close()


def shot(page: Any, artifacts: Path, name: str) -> None:
    """Full-page screenshots at 1400 px (desktop) and 420 px (phone) wide, then the size it had."""
    size = page.viewport_size
    for width in (1400, 420):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(artifacts / f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size(size)


def test_list_after_signing_in(session: Any, stack: Stack, artifacts: Path) -> None:
    page = session.new_page()
    page.goto("/")
    assert page.url.endswith("/console/login")
    shot(page, artifacts, "0-login")
    page.get_by_label("API key").fill("demo-key")
    page.get_by_label("Your name").fill("Ada")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(stack.url + "/")
    rows = page.locator("tr[data-conversation-id]")
    ids = {rows.nth(i).get_attribute("data-conversation-id") for i in range(rows.count())}
    children = {c["conversation_id"] for c in stack.api("/conversations/tree-1/children")["children"]}
    assert ids == {"demo-1", "demo-2", "demo-3", "notify-1", "hostile-1", "tree-1", *children}
    waiting = page.locator('tr[data-conversation-id="notify-1"]')
    assert "waiting for human" in waiting.inner_text() and "1 unknown" in waiting.inner_text()
    assert "api_key" not in page.url and "demo-key" not in page.content()
    shot(page, artifacts, "1-conversations")
    page.close()


def test_open_a_conversation_and_its_timeline_is_the_api_view(
    session: Any, stack: Stack, artifacts: Path
) -> None:
    page = session.new_page()
    page.goto("/")
    title = stack.api("/conversations/demo-1")["title"]
    page.get_by_role("link", name=title).click()
    page.wait_for_url("**/console/conversations/demo-1")
    shown = page.locator("#timeline > li.ev").evaluate_all("items => items.map(i => i.dataset.eventId)")
    view = stack.api("/conversations/demo-1/view")["events"]
    assert shown == [e["id"] for e in view] and len(shown) > 5
    facts = page.locator("#facts").inner_text()
    assert "The agent says done: yes" in facts and "Every effect confirmed: yes" in facts
    assert page.locator("#effects article").count() == 2  # write_file and create_issue
    chart = page.locator("figure.chart img")
    assert chart.evaluate("img => img.complete && img.naturalWidth") == 560
    svg = page.request.get(chart.get_attribute("src")).text()
    stats = stack.api("/conversations/demo-1")["stats"]
    assert (
        svg.count("<polyline") == 2
        and f"{stats['prompt_tokens'] + stats['completion_tokens']:,} tokens" in svg
    )
    # write_file and create_issue are one model turn: its thought is shown once, not twice.
    assert (
        page.locator("#timeline > li.kind-action", has_text="Another call of the same model turn").count()
        == 1
    )
    assert page.locator("#timeline > li.kind-action .thought", has_text="Step 2 of 2").count() == 1
    shot(page, artifacts, "2-conversation")
    page.goto("/console/conversations/demo-1/branches")  # one branch: the tree is a single run
    leaf = page.locator(".tree a.leaf.active")
    assert leaf.count() == 1 and leaf.inner_text().startswith("assistant: ")
    shot(page, artifacts, "2b-branches")
    page.close()


def test_resolve_from_the_queue_and_the_conversation_continues_live(
    session: Any, stack: Stack, artifacts: Path
) -> None:
    watching = session.new_page()
    watching.goto("/console/conversations/notify-1")
    watching.evaluate("window.__marker = 'no reload'")
    before = watching.locator("#timeline > li.ev").count()
    # The crash is visible: where the killed runner's call ended, a takeover marker says what happened.
    marker = watching.locator("#timeline > li.marker.takeover")
    assert marker.count() == 1
    assert "stopped during the call" in marker.inner_text() and "handed it to a human" in marker.inner_text()
    headline = watching.locator("#effects article.status-unknown .headline").inner_text()
    assert headline.startswith("Unknown · waiting for a human")
    assert stack.provider is not None and stack.provider.get("/stats")["notifications"] == 0

    queue = session.new_page()
    queue.goto("/")
    queue.get_by_role("link", name="Human queue").click()
    item = queue.locator("article.queue-item", has_text="notify-1")
    assert "the runner stopped during the provider call" in item.inner_text()
    shot(queue, artifacts, "3-human-queue")
    item.get_by_label("Note").fill("ops never got it")
    item.get_by_role("button", name="It did not happen (retry allowed)").click()
    assert "Recorded" in queue.locator(".notice").inner_text()
    # The read side folds the decision a moment later; the queue's live stream then drops the item.
    expect(queue.locator("article.queue-item")).to_have_count(0, timeout=WAIT_MS)

    observation = watching.locator("#timeline > li.kind-observation", has_text="notify")
    observation.wait_for(timeout=WAIT_MS)
    watching.locator("#summary", has_text="finished").wait_for(timeout=WAIT_MS)
    assert watching.evaluate("window.__marker") == "no reload"
    assert watching.locator("#timeline > li.ev").count() > before
    watching.reload()
    settled = watching.locator("#effects article .headline", has_text="decided by a human, Ada")
    assert settled.count() == 1, watching.locator("#effects").inner_text()
    operation = stack.api("/operations", conversation_id="notify-1")["operations"][0]
    assert operation["status"] == "confirmed" and operation["resolution"]["by"] == "human:demo:Ada"
    assert stack.provider.get("/stats")["notifications"] == 1  # retried once, done once
    shot(watching, artifacts, "4-conversation-after-decision")
    watching.close()
    queue.close()


def test_as_of_an_event_shows_the_old_facts_on_every_panel(
    session: Any, stack: Stack, artifacts: Path
) -> None:
    view = stack.api("/conversations/notify-1/view")["events"]
    action = next(e for e in view if e["kind"] == "action")
    page = session.new_page()
    page.goto("/console/conversations/notify-1")
    facts = page.locator("#facts").inner_text()
    assert "The agent says done: yes" in facts and "The run loop stopped: yes" in facts
    page.locator(f"#seq-{action['seq']} a.asof-link").click()
    page.wait_for_url(f"**/console/conversations/notify-1?seq={action['seq']}")
    assert f"As of event #{action['seq']}" in page.locator("#asof-banner").inner_text()
    facts = page.locator("#facts").inner_text()
    assert "The agent says done: no" in facts and "The run loop stopped: no" in facts
    shown = page.locator("#timeline > li.ev").evaluate_all("items => items.map(i => Number(i.dataset.seq))")
    assert shown and max(shown) == action["seq"]
    assert page.locator("#timeline[data-live]").count() == 0  # nothing live in the past
    shot(page, artifacts, "9-as-of")
    page.locator("#asof-banner a", has_text="Back to now").click()
    page.wait_for_url("**/console/conversations/notify-1")
    assert "The agent says done: yes" in page.locator("#facts").inner_text()
    page.close()


def test_a_new_event_appears_live(session: Any, stack: Stack, artifacts: Path) -> None:
    page = session.new_page()
    page.goto("/console/conversations/demo-2")
    page.evaluate("window.__marker = 'no reload'")
    posted = httpx.post(
        f"{stack.url}/conversations/demo-2/messages",
        json={"content": "Thanks, one more check please."},
        headers={"X-API-Key": "demo-key"},
        timeout=10,
    )
    assert posted.status_code == 202, posted.text
    page.locator("#timeline > li.kind-message", has_text="one more check").wait_for(timeout=WAIT_MS)
    assert page.evaluate("window.__marker") == "no reload"
    shot(page, artifacts, "5-live-event")
    page.close()


def test_hostile_text_renders_as_text(session: Any, artifacts: Path) -> None:
    page = session.new_page()
    page.goto("/console/conversations/hostile-1")
    first = page.locator("#timeline > li.kind-message .text").first
    assert first.text_content().startswith("<script>window.__xss = 1</script><img src=x")
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("#timeline img").count() == 0
    shot(page, artifacts, "6-hostile-text")
    page.close()
    assert session.errors == [], session.errors  # no script errors, no CSP violations on any page


def _search(page: Any, q: str, wanted: Callable[[Any], bool]) -> Any:
    """Submit the header's search box until the hits satisfy `wanted` (the index is a consumer: a
    just-written event appears within seconds)."""
    hits = page.locator("#hits > li.hit")
    for _ in range(60):
        page.goto("/")
        page.locator("#top-q").fill(q)
        page.locator("#top-q").press("Enter")
        page.locator("#search-meta").wait_for(timeout=WAIT_MS)
        if wanted(hits):
            return hits
        page.wait_for_timeout(1000)
    raise AssertionError(f"search {q!r} never showed the expected hits: {page.content()[-2000:]}")


def test_search_finds_words_across_the_tenants_conversations_and_within_one(
    session: Any, stack: Stack, artifacts: Path
) -> None:
    planted = "kumquat7 ships on friday"
    for conv, key in (("demo-3", "demo-key"), ("other-1", "other-key")):
        posted = httpx.post(
            f"{stack.url}/conversations/{conv}/messages",
            json={"content": f"Note: {planted}."},
            headers={"X-API-Key": key},
            timeout=10,
        )
        assert posted.status_code == 202, posted.text
    page = session.new_page()
    hits = _search(page, "KUMQUAT7 friday", lambda h: h.count() > 0)
    convs = {hits.nth(i).get_attribute("data-conversation-id") for i in range(hits.count())}
    assert convs == {"demo-3"}, convs  # planted in demo-3 and in the other tenant's other-1
    assert [m.lower() for m in page.locator("#hits mark").all_text_contents()] == ["kumquat7", "friday"]
    shot(page, artifacts, "7-search")
    theirs = stack.api("/events", key="other-key", q=planted)["events"]
    assert theirs and {e["conversation_id"] for e in theirs} == {"other-1"}  # indexed, for its tenant
    assert _search(page, "another tenant", lambda _hits: True).count() == 0
    assert "Nothing found" in page.locator("#hits").text_content()
    # Within one conversation: the conversation page's own box.
    page.goto("/console/conversations/demo-1")
    page.locator("#find-q").fill("report")
    page.locator("#find-q").press("Enter")
    page.locator("#search-meta").wait_for(timeout=WAIT_MS)
    inside = page.locator("#hits > li.hit")
    assert inside.count() > 0
    assert {inside.nth(i).get_attribute("data-conversation-id") for i in range(inside.count())} == {"demo-1"}
    inside.first.locator("a").click()
    page.wait_for_url("**/console/conversations/demo-1#seq-*")
    page.close()


def test_hostile_text_in_search_hits_stays_inert(session: Any, stack: Stack, artifacts: Path) -> None:
    long_word = "zq" + "w" * 400
    hostile = f"<script>window.__xss = 3</script> <b>bold</b> \u202ereversed {long_word}"
    posted = httpx.post(
        f"{stack.url}/conversations/hostile-1/messages",
        json={"content": hostile},
        headers={"X-API-Key": "demo-key"},
        timeout=10,
    )
    assert posted.status_code == 202, posted.text
    page = session.new_page()
    hits = _search(page, long_word, lambda h: h.count() >= 1)  # the message (and the scripted echo)
    assert hits.first.bounding_box()["width"] <= page.viewport_size["width"]  # the long word wraps
    hits = _search(page, "BOLD reversed", lambda h: h.count() >= 1)
    snippet = hits.first.locator(".snippet")
    assert "<script>window.__xss = 3</script> <b>bold</b> \u202ereversed" in snippet.text_content()
    assert page.locator("#hits b, #hits script, #hits img").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    hits = _search(page, "script xss", lambda h: h.count() >= 2)
    assert page.locator("#hits script, #hits img").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    shot(page, artifacts, "8-search-hostile")
    page.close()
    assert session.errors == [], session.errors


def test_another_tenant_sees_none_of_it(browser: Any, stack: Stack) -> None:
    context = browser.new_context(base_url=stack.url)
    page = context.new_page()
    page.goto("/console/login")
    page.get_by_label("API key").fill("other-key")
    page.get_by_role("button", name="Sign in").click()
    rows = page.locator("tr[data-conversation-id]")
    assert [rows.nth(i).get_attribute("data-conversation-id") for i in range(rows.count())] == ["other-1"]
    assert page.goto(f"{stack.url}/console/conversations/demo-1").status == 404
    page.goto("/console/queue")
    assert "Nothing waits for a decision" in page.content()
    cookie = next(c for c in context.cookies() if c["name"] == "convdb_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and "other-key" not in json.dumps(cookie)
    context.close()


def test_fork_and_branch_from_the_timeline(session: Any, stack: Stack, artifacts: Path) -> None:
    """On the hostile conversation, so every new field (the fork page, the tree's leaf labels, the
    notice's link) shows its text inert. The fork shows in the API and the export, the branch in the
    tree, the API's view and the export."""
    page = session.new_page()
    page.goto("/console/conversations/hostile-1")
    view = stack.api("/conversations/hostile-1/view")["events"]
    answer = [e for e in view if e["kind"] == "message"][-1]
    page.locator(f"#seq-{answer['seq']} a.fork-link").click()
    page.wait_for_url(f"**/console/conversations/hostile-1/fork?seq={answer['seq']}")
    assert page.locator("li.kind-message .text").text_content().startswith("Noted: <script>")
    shot(page, artifacts, "10-fork-or-branch")
    page.get_by_label("New conversation id").fill("hostile-fork")
    page.locator("#fork-button").click()
    page.wait_for_url("**/console/conversations/hostile-1?notice=forked&fork=hostile-fork")
    assert page.locator(".notice a", has_text="hostile-fork").count() == 1

    def forked() -> list[Any]:
        try:
            return stack.api("/conversations/hostile-fork/view")["events"]  # type: ignore[no-any-return]
        except httpx.HTTPStatusError:
            return []

    (fork_event,) = wait_until(forked, 60, "the fork in the API", logs=stack.logs())
    assert (fork_event["kind"], fork_event["source_event_id"]) == ("fork", answer["id"])
    page.goto("/console/conversations/hostile-1")
    page.locator("p.small", has_text="Forked into").locator("a", has_text="hostile-fork").wait_for()
    codec = make_codec(None)
    assert isinstance(export.from_kafka(stack.settings, "hostile-fork", codec).events[0], ForkEvent)

    # Branch at the user message: the agent answers it again on a new branch.
    question = next(e for e in view if e["kind"] == "message" and e["role"] == "user")
    page.goto(f"/console/conversations/hostile-1/fork?seq={question['seq']}")
    page.locator("#branch-button").click()
    page.wait_for_url("**/console/conversations/hostile-1?notice=branched")
    before = {e["id"] for e in view}

    def answered_again() -> bool:
        said = [e for e in stack.api("/conversations/hostile-1/view")["events"] if e["kind"] == "message"]
        return bool(said[-1]["role"] == "assistant" and said[-1]["id"] not in before)

    wait_until(
        answered_again,
        WAIT_MS / 1000,
        "the new branch answered",
        logs=stack.logs(),
    )
    page.goto("/console/conversations/hostile-1")
    page.get_by_role("link", name="Branches of this conversation").click()
    page.wait_for_url("**/console/conversations/hostile-1/branches")
    leaves = page.locator(".tree a.leaf")
    assert leaves.count() == 2 and page.locator(".tree a.leaf.active").count() == 1
    labels = leaves.all_inner_texts()
    assert all(text.startswith("assistant: Noted: <script>") for text in labels), labels
    assert page.evaluate("typeof window.__xss") == "undefined" and page.locator("main img").count() == 0
    shot(page, artifacts, "11-branch-tree")
    log = export.from_kafka(stack.settings, "hostile-1", codec).events
    (switch,) = [e for e in log if isinstance(e, ActiveLeafChangedEvent)]
    assert switch.leaf_event_id == question["id"]
    page.close()
    assert session.errors == [], session.errors


def test_the_task_tree_links_parent_and_children_with_rolled_up_stats(
    session: Any, stack: Stack, artifacts: Path
) -> None:
    """A fan-out's parent lists its children (linked, with their status and tokens) and the tree's
    totals, as the API's tree says; a child link opens the child, whose page links back up."""
    tree = stack.api("/conversations/tree-1/root")["tree"]
    kids = [k["conversation_id"] for k in tree["children"]]
    assert len(kids) == 2 and tree["total"]["conversations"] == 3
    page = session.new_page()
    page.goto("/console/conversations/tree-1")
    box = page.locator("#task-tree")
    expect(box).to_contain_text("Delegated to 2 sub-agents", timeout=WAIT_MS)
    items = box.locator("ul.task-children > li")
    assert items.count() == 2
    for item, kid in zip((items.nth(0), items.nth(1)), tree["children"], strict=True):
        assert item.locator("a").get_attribute("href") == f"/console/conversations/{kid['conversation_id']}"
        assert item.locator(".badge").inner_text() == "finished"
        assert f"{kid['total']['tokens']:,} tokens" in item.inner_text()
    total = tree["total"]
    rolled = f"This subtree: 3 conversations, {total['tokens']:,} tokens, ${total['cost']:.4f}"
    assert rolled in box.inner_text() and total["tokens"] > tree["tokens"]  # the children's count too
    shot(page, artifacts, "9-task-tree")
    items.nth(1).locator("a").click()
    page.wait_for_url(f"**/console/conversations/{kids[1]}")
    up = page.locator("#task-tree")
    expect(up).to_contain_text("Delegated by tree-1")
    assert (
        "This subtree: 1 conversation" in up.inner_text()
        and f"the whole tree: 3, {total['tokens']:,}" in (up.inner_text())
    )
    up.get_by_role("link", name="tree-1").click()
    page.wait_for_url("**/console/conversations/tree-1")
    assert session.errors == []
    page.close()
