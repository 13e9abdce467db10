"""One member of a consumer group, a process of its own: confluent-kafka (librdkafka) against
the Kafka listener, for tests/kafka/test_kafka_groups.py.

    python confluent_group_member.py BOOTSTRAP TOPIC GROUP STRATEGY NAME

It subscribes to TOPIC in GROUP with ``partition.assignment.strategy`` STRATEGY, commits each
record's offset synchronously once it has printed it, and again the revoked partitions' last
offsets in the revoke callback (a commit between a member's JoinGroup and the group's SyncGroup
is refused REBALANCE_IN_PROGRESS, as by Kafka, which a cooperative member meets while it keeps
consuming: the revoke callback's commit makes sure a partition that moves resumes after the
last record printed). It prints one JSON line per event on stdout:

    {"event": "assigned", "partitions": [..], "t": MONOTONIC}   (at the start of the callback)
    {"event": "revoked", "partitions": [..], "t": MONOTONIC}    (at its end)
    {"event": "record", "partition": P, "offset": O, "value": "...", "t": MONOTONIC}
    {"event": "commit_failed", "partition": P, "offset": O, "error": "...", "revoking": B}
    {"event": "closed", "t": MONOTONIC}

``t`` is ``time.monotonic()``, one clock for every process of the machine: the test checks
that no two members owned a partition at once. A line "stop" on stdin makes it close the
consumer (revoking its partitions and leaving the group) and exit 0; so does end of input.
It exits by itself after 120 s (a bound: a test that forgets it does not leave it running).
"""

from __future__ import annotations

import json
import select
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

LIFETIME_S = 120.0


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def main() -> int:
    bootstrap, topic, group, strategy, name = sys.argv[1:6]
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "partition.assignment.strategy": strategy,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    })

    def on_assign(_consumer: Consumer, partitions: list) -> None:
        emit(event="assigned", partitions=sorted(p.partition for p in partitions),
             t=time.monotonic())

    # Partition -> the offset after the last record printed, not yet committed.
    pending: dict[int, int] = {}

    def commit(partitions: list[int], revoking: bool) -> None:
        offsets = [TopicPartition(topic, p, pending[p]) for p in partitions if p in pending]
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            for tp in offsets:
                emit(event="commit_failed", partition=tp.partition, offset=tp.offset,
                     error=str(exc), revoking=revoking)
            return
        for tp in offsets:
            if pending.get(tp.partition) == tp.offset:
                del pending[tp.partition]

    def on_revoke(_consumer: Consumer, partitions: list) -> None:
        commit([p.partition for p in partitions], revoking=True)
        emit(event="revoked", partitions=sorted(p.partition for p in partitions),
             t=time.monotonic())

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    deadline = time.monotonic() + LIFETIME_S
    try:
        while time.monotonic() < deadline:
            readable, _, _ = select.select([sys.stdin], [], [], 0)
            if readable:
                line = sys.stdin.readline()
                if not line or line.strip() == "stop":
                    break
            message = consumer.poll(0.1)
            if message is None:
                continue
            if message.error() is not None:
                emit(event="error", error=str(message.error()))
                continue
            emit(event="record", partition=message.partition(), offset=message.offset(),
                 value=message.value().decode(), t=time.monotonic())
            pending[message.partition()] = message.offset() + 1
            commit([message.partition()], revoking=False)
    finally:
        consumer.close()
        emit(event="closed", t=time.monotonic())
    return 0


if __name__ == "__main__":
    sys.exit(main())
