"""A bare consumer-group member for group tests: `python -m tests.brokers.member TOPIC GROUP`.

Uses convdb's consumer settings (the profile of the broker in CONVDB_*), prints one JSON line per
assignment change, and runs until killed.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition

from convdb.infra.connection import load_settings
from convdb.infra.kafka import make_consumer


def main(topic: str, group: str) -> None:
    """Join `group` on `topic` and report assignments forever."""
    consumer = make_consumer(load_settings(), group)

    def report(event: str) -> object:
        def callback(_c: Consumer, parts: list[TopicPartition]) -> None:
            line = {"at": time.time(), "event": event, "partitions": sorted(p.partition for p in parts)}
            print(json.dumps(line), flush=True)

        return callback

    consumer.subscribe(
        [topic], on_assign=report("assign"), on_revoke=report("revoke"), on_lost=report("lost")
    )
    while True:
        consumer.poll(0.2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
