"""Partitions added to a replicated topic (CreatePartitions in cluster mode, issue 29): etcd and
three real servers on 127.0.0.1.

* ``stratalog topics alter --partitions`` under a librdkafka producer (acks=all, idempotent):
  etcd holds the grown assignment, continuing the topic's round robin, and the new
  partitions' first states; every server lists them in Metadata with a leader and holds their
  logs; the producer starts writing to them, and every acknowledged record is read back once.
* The Kafka API (confluent-kafka's AdminClient.create_partitions): ``validate_only`` writes
  nothing, a count not above the topic's is INVALID_PARTITIONS.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.cluster.conftest import AcksAllLoad, metadata, read_back, wait_for
from tests.cluster.test_controller import as_tuple, etcd_records
from tests.cluster.test_faults import create_topic, start_cluster
from tests.integration.conftest import ServerProcess

#: Records the background producer sends at most (a bound, not a target).
RECORDS_MAX = 20_000


def _partitions_everywhere(servers: dict[int, ServerProcess], topic: str) -> list[dict]:
    return [{p.partition: p for t in metadata(s).topics if t.name == topic for p in t.partitions}
            for s in servers.values()]


def test_partitions_added_under_a_producer_are_replicated_and_used(start_member, etcd) -> None:
    servers = start_cluster(start_member)
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=2, min_insync=2)
    before, _ = etcd_records(etcd, topic)

    with AcksAllLoad(servers, topic, None, RECORDS_MAX) as load:
        load.more(200, "the producer under way")
        grown = subprocess.run(
            [sys.executable, "-m", "stratalog.cli", "--target", servers[2].target, "topics",
             "alter", topic, "--partitions", "4"],
            capture_output=True, text=True, timeout=60,
        )
        assert grown.returncode == 0, grown.stderr

        assignment, states = etcd_records(etcd, topic)
        replicas = {int(p): tuple(n) for p, n in assignment["partitions"].items()}
        old = {int(p): tuple(n) for p, n in before["partitions"].items()}
        assert {p: replicas[p] for p in old} == old  # the existing partitions untouched
        assert sorted(replicas) == [0, 1, 2, 3]
        # Continuing the round robin: each new partition starts one broker further on.
        ordered = [1, 2, 3]
        first = ordered.index(old[0][0])
        for p in (2, 3):
            assert replicas[p] == tuple(ordered[(first + p + r) % 3] for r in range(3))
            assert states[p].leader == replicas[p][0]
            assert states[p].isr == replicas[p]

        wait_for(lambda: all(sorted(view) == [0, 1, 2, 3]
                             and all(m.leader >= 1 for m in view.values())
                             for view in _partitions_everywhere(servers, topic)),
                 "every server lists four led partitions")
        wait_for(lambda: {2, 3} <= {p for p, _ in list(load.delivered)},
                 "the producer writing to the new partitions")
        wait_for(lambda: all(as_tuple(view[p])[3] == replicas[p]
                             for view in _partitions_everywhere(servers, topic) for p in (2, 3)),
                 "the new partitions fully in sync")
    assert load.failed == []

    read = read_back(servers, topic, 4, len(load.delivered))
    assert sorted(read) == sorted(load.delivered)  # every acknowledged record, once


def test_create_partitions_over_kafka_validates_and_refuses(start_member, etcd) -> None:
    servers = start_cluster(start_member)
    topic = f"grow-{uuid.uuid4().hex[:6]}"
    create_topic(servers[1], topic, partitions=1, min_insync=1)
    admin = AdminClient({"bootstrap.servers": servers[3].kafka_bootstrap})

    admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)[topic].result(30)
    assignment, _ = etcd_records(etcd, topic)
    assert list(assignment["partitions"]) == ["0"]  # validate_only: nothing written

    try:
        admin.create_partitions([NewPartitions(topic, 1)])[topic].result(30)
    except KafkaException as exc:
        assert exc.args[0].name() == "INVALID_PARTITIONS"
        assert "cannot have 1" in exc.args[0].str()
    else:
        raise AssertionError("a count not above the topic's was accepted")

    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    assignment, states = etcd_records(etcd, topic)
    assert sorted(states) == [0, 1, 2]
    wait_for(lambda: all(sorted(view) == [0, 1, 2] for view in _partitions_everywhere(servers,
                                                                                        topic)),
             "three partitions listed by every server")
