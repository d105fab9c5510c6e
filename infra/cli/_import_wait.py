"""`convdb import --wait`: what became of each inbox record an import wrote.

A record is done when the runners' group committed an offset past it; it was refused when the
DLQ holds a dead letter of it (the runner's headers name its inbox partition and offset), else
it was appended (or held already: importing twice adds nothing).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from confluent_kafka import Consumer, TopicPartition

from convdb.infra.dlq import ERROR_CLASS, ERROR_MESSAGE, ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC
from convdb.infra.kafka import common_config
from convdb.infra.partitioner import partition_for
from convdb.infra.reader import partition_extents, read_to_end
from convdb.infra.records import header_items
from convdb.infra.settings import Settings
from convdb.schemas.topics import DLQ, INBOX

Sent = list[tuple[int, int]]
"""Where an import's records of one conversation landed in the inbox: (partition, offset)."""


class InboxWatch:
    """Waits for the runners to handle what an import sent, and says what they did with it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.inbox = INBOX.name(settings.namespace)
        self.dlq = DLQ.name(settings.namespace)
        # Dead letters of this import come after these ends (read before anything is sent).
        self.dlq_from = {p: high for p, (_, high) in partition_extents(settings, self.dlq).items()}
        self.sent: dict[str, Sent] = {}

    def wait(self, seconds: float) -> int:
        """Print `appended` or `refused: <reasons>` per conversation as the runners handle it;
        0 when every one was appended, 1 when one was refused or is still queued at the deadline."""
        deadline = time.monotonic() + seconds
        pending, failed = dict(self.sent), False
        consumer = Consumer({**common_config(self.settings), "group.id": self.settings.group("runner")})
        try:
            while pending:
                done = self._handled(consumer, pending)
                for cid, reasons in self._refusals(done).items():
                    failed = failed or bool(reasons)
                    print(f"{cid}: refused: {'; '.join(reasons)}" if reasons else f"{cid}: appended")
                    del pending[cid]
                if not pending or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        finally:
            consumer.close()
        for cid in pending:
            print(
                f"convdb: {cid} is queued but not appended yet: is a `convdb runner` running?",
                file=sys.stderr,
            )
        return 1 if pending or failed else 0

    def _handled(self, consumer: Consumer, pending: dict[str, Sent]) -> dict[str, Sent]:
        """The conversations whose every record is behind the runners' committed offset."""
        parts = sorted({p for sent in pending.values() for p, _ in sent})
        found = consumer.committed([TopicPartition(self.inbox, p) for p in parts], timeout=10)
        committed = {tp.partition: tp.offset for tp in found}
        return {cid: sent for cid, sent in pending.items() if all(committed.get(p, -1) > o for p, o in sent)}

    def _refusals(self, done: dict[str, Sent]) -> dict[str, list[str]]:
        """Per conversation in `done`, the runner's reasons for every record of it it refused."""
        reasons: dict[str, list[str]] = {cid: [] for cid in done}
        if not done:
            return reasons
        owner = {(p, o): cid for cid, sent in done.items() for p, o in sent}
        parts = {partition_for(cid, self.settings.partitions) for cid in done}
        starts = [TopicPartition(self.dlq, p, self.dlq_from.get(p, 0)) for p in sorted(parts)]
        letters = defaultdict(list)
        for read in read_to_end(self.settings, starts, purpose="import-wait").values():
            for msg in read.records:
                headers = {k: (v or b"").decode(errors="replace") for k, v in header_items(msg)}
                if headers.get(ORIGINAL_TOPIC) != self.inbox:
                    continue
                at = (int(headers.get(ORIGINAL_PARTITION, -1)), int(headers.get(ORIGINAL_OFFSET, -1)))
                if at in owner:
                    letters[owner[at]].append(f"{headers.get(ERROR_CLASS)}: {headers.get(ERROR_MESSAGE)}")
        for cid, found in letters.items():
            reasons[cid] = found
        return reasons
