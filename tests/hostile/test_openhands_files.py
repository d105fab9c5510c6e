"""OpenHands files and the API's event loop under attack (issue 21: finding 10 and the low ones).

`convdb import openhands` never follows a symlink out of the directory it is given, caps what it
reads, refuses JSON too deep with a usage error, and hides credentials before anything reaches
the inbox; `--wait` says what the runner did (appended, or refused and why). `convdb export
--format openhands` refuses ids that cannot name its files before writing anything. A webhook
post whose redaction is slow never holds the API's event loop.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convdb.infra.reader import read_topic
from convdb.schemas import ExternalBatch
from tests.conftest import BrokerInfo, wait_until
from tests.hostile.runner_stack import ACME, CODEC, RunnerStack, openhands_id, runner_settings
from tests.projections.openhands_mutations import nested_list
from tests.projections.test_openhands import SAMPLE

pytestmark = [pytest.mark.kafka, pytest.mark.brokers]

REGISTERED = ("CUSTOMER_DB_PASSWORD", "registered-value-Qx71-never-written")
PLANTED = ("sk-proj-" + "Pl4nted" * 6, "AKIAZ7QWERTYUIOP1234", REGISTERED[1])


@pytest.fixture(scope="module")
def stack(broker: BrokerInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerStack]:
    root = tmp_path_factory.mktemp(f"openhands-files-{broker.name}")
    settings = runner_settings(broker, root, secrets={REGISTERED[0]: REGISTERED[1]})
    running = RunnerStack(settings, root).start()
    try:
        yield running
    finally:
        running.stop()


def conversation_dir(root: Path, cid: str, events: list[dict[str, Any]]) -> Path:
    """An OpenHands conversation directory as the SDK writes it."""
    path = root / uuid.UUID(cid).hex
    (path / "events").mkdir(parents=True)
    (path / "base_state.json").write_text(json.dumps({"id": uuid.UUID(cid).hex, "execution_status": "idle"}))
    for idx, event in enumerate(events):
        (path / "events" / f"event-{idx:05d}-{event['id']}.json").write_text(json.dumps(event))
    return path


def inbox_payloads(stack: RunnerStack, cid: str) -> list[str]:
    return [
        CODEC.decode(m.value(), expect=(ExternalBatch,)).payload
        for m in read_topic(stack.settings, stack.settings.topic("inbox"))
        if m.key() == cid.encode()
    ]


def refused(done: Any, message: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_import_stays_in_its_directory_caps_its_reads_and_redacts_before_the_inbox(
    stack: RunnerStack, tmp_path: Path
) -> None:
    cid = openhands_id(1, stack.settings)
    events = json.loads(json.dumps(SAMPLE))
    events[1]["llm_message"]["content"][0]["text"] = "keys: " + " ".join(PLANTED)
    path = conversation_dir(tmp_path / "in", cid, events)
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"title": "read from outside the directory"}))
    (path / "meta.json").symlink_to(outside)
    refused(stack.cli("import", "openhands", str(path)), "a symlink out of")
    (path / "meta.json").unlink()

    padded = path / "events" / f"event-00004-{uuid.uuid4()}.json"
    os.mkfifo(padded)  # read as a file, it would block the import for ever
    refused(stack.cli("import", "openhands", str(path)), "not a regular file")
    padded.unlink()
    padded.write_text(json.dumps({**events[1], "id": padded.name[12:-5], "pad": "p" * 30_000}))
    refused(
        stack.cli("import", "openhands", str(path), env={"CONVDB_OPENHANDS__MAX_BODY_BYTES": "20000"}),
        "larger than 20000 bytes",
    )
    padded.write_text("[" * 100_000 + "]" * 100_000)
    refused(stack.cli("import", "openhands", str(path)), "nested too deep")
    padded.write_text(json.dumps({**events[1], "id": padded.name[12:-5], "deep": nested_list(100)}))
    refused(stack.cli("import", "openhands", str(path)), "nested more than 64")
    padded.unlink()
    assert inbox_payloads(stack, cid) == []  # nothing of any refused import

    done = stack.cli("import", "openhands", str(path), "--tenant", "acme", "--wait", "90")
    assert done.returncode == 0 and f"{cid}: appended" in done.stdout, (done.stdout, done.stderr)
    payloads = inbox_payloads(stack, cid)
    assert payloads and not any(secret in p for secret in PLANTED for p in payloads)
    assert f"<secret:{REGISTERED[0]}>" in payloads[0] and "<secret:detected." in payloads[0]
    assert all(json.loads(p) for p in payloads)  # still JSON


def test_import_wait_says_refused_and_why(stack: RunnerStack, tmp_path: Path) -> None:
    cid = openhands_id(2, stack.settings)
    path = conversation_dir(tmp_path, cid, json.loads(json.dumps(SAMPLE)))
    first = stack.cli("import", "openhands", str(path), "--tenant", "acme", "--wait", "90")
    assert first.returncode == 0 and f"{cid}: appended" in first.stdout, (first.stdout, first.stderr)
    again = stack.cli("import", "openhands", str(path), "--tenant", "umbrella", "--wait", "90")
    assert again.returncode == 1, (again.stdout, again.stderr)
    assert f"{cid}: refused: TenantMismatchError" in again.stdout and "another tenant" in again.stdout


def test_export_refuses_ids_that_cannot_name_files_before_writing_anything(
    stack: RunnerStack, tmp_path: Path
) -> None:
    cid = openhands_id(3, stack.settings)
    events = json.loads(json.dumps(SAMPLE[:2]))
    events[1]["id"] = "../../escaped/" + uuid.uuid4().hex
    url = f"/openhands/webhooks/events/{uuid.UUID(cid).hex}"
    assert stack.call("POST", url, ACME, content=json.dumps(events)).status_code == 200
    wait_until(lambda: len(stack.events(cid)) >= 2, 90, "the batch appended", logs=stack.logs())
    out = tmp_path / "export"
    done = stack.cli("export", cid, "--format", "openhands", str(out))
    refused(done, "holds no '/'")
    assert not out.exists() or not any(out.rglob("*"))
    assert not (tmp_path / "escaped").exists()


def test_a_large_webhook_post_never_holds_the_api_event_loop(stack: RunnerStack) -> None:
    """An 8 MB batch of a thousand events with millions of JSON values: parsing, checking, splitting
    and redacting it take the better part of a second of CPU, on a worker thread, while the
    API's event loop goes on answering."""
    cid = openhands_id(0, stack.settings)

    def large_batch() -> str:
        batch = []
        for _ in range(1000):
            event = json.loads(json.dumps(SAMPLE[1]))
            event.update(id=str(uuid.uuid4()), parent_id=None, extended_content=[[0] * 2500])
            batch.append(event)
        body = json.dumps(batch, separators=(",", ":"))
        assert len(body) < stack.settings.openhands.max_body_bytes
        return body

    url = f"/openhands/webhooks/events/{uuid.UUID(cid).hex}"

    def post_while_polling() -> tuple[float, float]:
        """Post the batch while /healthz is asked in a loop: (slowest /healthz, the post's seconds)."""
        answers: list[tuple[httpx.Response, float]] = []
        body = large_batch()

        def post() -> None:
            started = time.monotonic()
            answer = stack.call("POST", url, ACME, content=body)
            answers.append((answer, time.monotonic() - started))

        worker = threading.Thread(target=post)
        worker.start()
        slowest = 0.0
        while worker.is_alive():
            started = time.monotonic()
            assert httpx.get(f"{stack.api_url}/healthz", timeout=30).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
        worker.join()
        ((answer, seconds),) = answers
        assert answer.status_code == 200 and answer.json()["events"] == 1000, answer.text
        return slowest, seconds

    # A worker thread still holds the GIL for each C call (json.loads of the 8 MB takes a few
    # hundred ms, more on a loaded machine), so the bound scales with the post; with the work on
    # the event loop, /healthz waited for all of it (1.06 s of a 3 s post on an idle machine), on
    # every post. A loaded machine can stretch one C call past the bound, so a second post of a
    # thousand new events decides.
    for _attempt in range(2):
        slowest, seconds = post_while_polling()
        bound = max(0.5, seconds / 4)
        if slowest < bound:
            break
    assert slowest < bound, f"/healthz took {slowest:.2f}s during a {seconds:.2f}s webhook post"
