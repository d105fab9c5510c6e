"""What the runner checks of the events an OpenHands payload maps to, before it stages them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from convdb.producers.errors import RecordTooLargeError
from convdb.producers.fleet.external import check_extensions, origin_of
from convdb.producers.fleet.limits import check_sizes
from convdb.projections.errors import ForeignRecordError
from convdb.projections.view import fold, initial
from convdb.schemas import MessageEvent, SingleObjectCodec

AT = datetime(2026, 5, 2, tzinfo=UTC)


def message(extension: str | None, content: str = "hi") -> MessageEvent:
    return MessageEvent(
        id="m1", conversation_id="c1", tenant_id="t", seq=1, timestamp=AT, source="user", role="user",
        content=content, extension=extension,
    )  # fmt: skip


def test_an_extension_redaction_left_unreadable_is_refused_and_never_read_as_a_crash() -> None:
    mapped = [message('{"openhands":{"patch":"sk-..."}}'), message(None)]
    check_extensions(mapped, mapped, "inbox record r1")  # unchanged by the redaction: not read again
    check_extensions([message('{"openhands":{}}'), message(None)], mapped, "inbox record r1")
    with pytest.raises(ForeignRecordError, match="no JSON once credentials are redacted"):
        redacted = [message('{"openhands":{"patch":"<secret:detected.x>'), message(None)]
        check_extensions(redacted, mapped, "inbox record r1")
    broken = fold(initial("c1"), message('{"openhands": not json'))
    assert origin_of(broken) is None  # an older log with such a record still restores


def test_an_event_too_large_to_write_is_refused_before_staging() -> None:
    codec = SingleObjectCodec()
    check_sizes(codec, 10_000, [message(None, "x" * 5_000)], "inbox record r1")
    with pytest.raises(RecordTooLargeError, match="would be a record of"):
        check_sizes(codec, 10_000, [message(None, "x" * 9_500)], "inbox record r1")
