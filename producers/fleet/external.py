"""Conversations run elsewhere (an OpenHands agent-server), appended by the runner that owns them.

The API and `convdb import` put OpenHands payloads in the inbox (`ExternalBatch`); the owning
runner is still the conversation's only writer: it maps the payload (`convdb.projections.openhands`,
pure), assigns the seqs and commits the events with the inbox offset in one transaction (shared
with the other records of its batch, `convdb.producers.fleet.batch`). Ids the
conversation already holds are skipped, so a retried webhook batch or a repeated import appends
nothing. convdb never runs its own agent on such a conversation, and refuses (DLQ) user messages
to it and OpenHands payloads for a conversation convdb runs or another tenant owns.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from convdb.producers.conversation import Conversation
from convdb.producers.errors import RecordRefusedError
from convdb.projections.errors import ForeignRecordError
from convdb.projections.openhands import ORIGIN, OpenHandsState, Received, ingest, marks_of, resume
from convdb.projections.view import ViewState
from convdb.schemas import AvroModel, ExternalBatch, InboxMessage

logger = logging.getLogger(__name__)


def origin_of(view: ViewState) -> str | None:
    """The foreign system a conversation comes from ('openhands'), None when convdb runs it.

    Every event mapped from OpenHands carries an `extension` keyed by its origin, convdb's own
    events none, so the first event decides.
    """
    if not view.log:
        return None
    return ORIGIN if marks_of(view.log[0].extension) is not None else None


def check_extensions(records: Sequence[AvroModel], mapped: Sequence[AvroModel], where: str) -> None:
    """Refuse records whose `extension` the secret redaction left unreadable (a match that spanned
    JSON quotes): written, they would lose the OpenHands record they carry. Only extensions the
    redaction changed (`records` against the `mapped` ones before it) are read again.

    Raises:
        ForeignRecordError: one such record (nothing is staged).
    """
    for record, before in zip(records, mapped, strict=True):
        extension = getattr(record, "extension", None)
        if extension is None or extension is getattr(before, "extension", None):
            continue
        if marks_of(extension) is None:
            raise ForeignRecordError(
                f"{where}: event {getattr(record, 'id', '')[:80]}: its OpenHands record is no JSON once "
                "credentials are redacted"
            )


def refuse(conv: Conversation, record: InboxMessage | ExternalBatch) -> None:
    """Raise `RecordRefusedError` when `record` may not go to `conv` (the DLQ takes it).

    An OpenHands payload needs a conversation that is empty or comes from OpenHands; a user
    message or command needs one convdb runs (send it to the agent-server instead).
    """
    foreign = origin_of(conv.state.view)
    if isinstance(record, ExternalBatch):
        if conv.state.view.log and foreign is None:
            raise RecordRefusedError(
                f"conversation {record.conversation_id} is run by convdb: {record.origin} events cannot "
                "be appended to it"
            )
    elif foreign is not None:
        raise RecordRefusedError(
            f"conversation {conv.conversation_id} runs in OpenHands: send messages there"
        )


def stage(
    conv: Conversation,
    known: OpenHandsState | None,
    batch: ExternalBatch,
    check: Callable[[Sequence[AvroModel], Sequence[AvroModel]], object],
) -> tuple[OpenHandsState, list[AvroModel]]:
    """Map `batch` onto `conv`'s next events, folded into `conv` for the runner's batch to commit.

    `known` is the mapping state after the conversation's last batch (None: rebuilt from its
    log); `check` refuses records that could not be written (given them redacted, then as
    mapped: `PartitionOwner.stage_external`). Returns the
    new mapping state and the staged records (none when every event is held). All or nothing:
    a payload refused for any reason leaves `conv` as it was.

    Raises:
        ForeignRecordError: the payload is not valid OpenHands data, or mapping it failed.
        RecordTooLargeError: an event it maps to is larger than the broker takes.
    """
    try:
        state = known or (
            resume(conv.state.view, conv.tenant_id)
            if conv.state.view.log
            else OpenHandsState(conv.state.view, batch.tenant_id)
        )
        payload = json.loads(batch.payload)
        mapped, events = ingest(state, Received(batch.payload_kind, payload, batch.timestamp))
        staged = conv.stage(lambda: events, lambda records: check(records, events)) if events else []
    except (ForeignRecordError, RecordRefusedError):
        raise
    except Exception as exc:  # noqa: BLE001 - pure mapping and fold, nothing written: this payload's fault
        # Whatever the mapping of a foreign payload raises (a case its checks did not foresee) is a
        # data error of this record, never a reason to stop the partition.
        raise ForeignRecordError(f"inbox record {batch.id}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    if mapped.duplicates > state.duplicates:
        logger.info(
            "conversation %s: %d OpenHands event(s) already held, skipped",
            conv.conversation_id,
            mapped.duplicates - state.duplicates,
        )
    # The staged events are the mapped ones after secret redaction: keep the view that holds them.
    return mapped._replace(view=conv.state.view), staged
