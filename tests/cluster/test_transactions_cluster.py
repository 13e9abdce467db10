"""Transactions in a cluster (issue 29, item 1): etcd and three real servers, librdkafka's
transactional producer and read_committed consumer over the Kafka listeners.

* A transactional producer commits and aborts transactions across partitions led by different
  servers: a read_committed consumer sees exactly the committed records, once each, and every
  partition's last stable offset reaches its high watermark.
* FindCoordinator(key_type=1) names the leader of the id's __cluster_transaction_state
  partition, from every server alike.
* Consume-transform-produce: offsets committed in a transaction reach the group's coordinator
  with the transaction's COMMIT, and not with an ABORT.
* kill -9 of the transaction coordinator's server under a transactional loop: every committed
  transaction read exactly once, no aborted record, nothing torn, every LSO moving again.
* A coordinator killed after it logged PrepareCommit, before the marker was written (the
  partition's leader frozen): the next coordinator completes the commit, once.
* A transactional Produce after its transaction ended is refused by the partition's leader
  (INVALID_TXN_STATE: KIP-890 part 1), and the partition's LSO is not held back by it.
"""

from __future__ import annotations

import signal
import threading
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import ProduceRequest

from stratalog.client import SyncClient
from stratalog.server.transactions.state_partitions import (
    CLUSTER_TRANSACTION_STATE_TOPIC,
    partition_for_transactional_id,
)
from tests.cluster.conftest import metadata, wait_for
from tests.cluster.test_cluster_acls import acl_flags  # noqa: F401  (a fixture)
from tests.cluster.test_faults import FAILOVER_BOUND_S, create_topic, start_cluster
from tests.integration.conftest import ServerProcess
from tests.kafka.kafka_wire import KafkaWire, ask

PARTITIONS = 3
INVALID_TXN_STATE = 48
#: The state topic's partitions in these tests: few, so that its creation is quick.
STATE_PARTITIONS = 5
TXN_FLAGS = ("--transaction-state-log-num-partitions", str(STATE_PARTITIONS))


def bootstrap(servers: dict[int, ServerProcess]) -> str:
    return ",".join(s.kafka_bootstrap for s in servers.values())


def transactional_producer(servers: dict[int, ServerProcess], transactional_id: str,
                           **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap(servers),
                     "transactional.id": transactional_id, "acks": "all",
                     "enable.idempotence": True, "linger.ms": 5,
                     "transaction.timeout.ms": 20_000, **extra})


def leaders(server: ServerProcess, topic: str) -> dict[int, int]:
    answer = metadata(server, topic)
    return {p.partition: p.leader for t in answer.topics for p in t.partitions}


def read_committed(servers: dict[int, ServerProcess], topic: str, partitions: int,
                   timeout_s: float = 60.0) -> list[bytes]:
    """Every record a read_committed consumer sees in ``topic``, once each partition's position
    reached its high watermark (so its last stable offset did: nothing is left open)."""
    consumer = Consumer({"bootstrap.servers": bootstrap(servers), "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        assigned = [TopicPartition(topic, p, 0) for p in range(partitions)]
        consumer.assign(assigned)
        values: list[bytes] = []

        def caught_up() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if message is not None:
                return False
            for p in range(partitions):
                high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position < high:
                    return False
            return True

        wait_for(caught_up, f"a read_committed consumer reached the end of {topic}", timeout_s)
        return values
    finally:
        consumer.close()


def test_commits_and_aborts_across_partitions_led_by_different_servers(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=PARTITIONS)
    wait_for(lambda: len(set(leaders(servers[1], topic).values()) - {-1}) >= 2,
             f"{topic}'s partitions led by at least two servers")
    producer = transactional_producer(servers, "orders-writer")
    producer.init_transactions(60)
    expected: list[bytes] = []
    for number, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        batch = [f"t{number}-p{p}-r{r}".encode() for p in range(PARTITIONS) for r in range(3)]
        for value in batch:
            producer.produce(topic, value=value, partition=int(value.split(b"-p")[1][0:1]))
        producer.flush(30)
        if commit:
            producer.commit_transaction(60)
            expected.extend(batch)
        else:
            producer.abort_transaction(60)
    seen = read_committed(servers, topic, PARTITIONS)
    assert sorted(seen) == sorted(expected)
    assert len(seen) == len(set(seen))


def test_offsets_committed_in_a_transaction_reach_the_groups_coordinator(start_member):
    """Consume-transform-produce: AddOffsetsToTxn at the transaction's coordinator,
    TxnOffsetCommit at the group's, the marker at the group's partition leader."""
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    source, sink = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], source)
    create_topic(servers[1], sink)
    plain = Producer({"bootstrap.servers": bootstrap(servers), "acks": "all"})
    for i in range(10):
        plain.produce(source, value=f"in-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bootstrap(servers), "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = transactional_producer(servers, "transformer")
    producer.init_transactions(60)
    try:
        consumer.assign([TopicPartition(source, 0, 0)])
        taken: list[bytes] = []
        wait_for(lambda: (lambda m: m is not None and m.error() is None
                          and taken.append(m.value()))(consumer.poll(0.2)) or len(taken) >= 10,
                 "the ten input records")
        for committed, chunk in ((True, taken[:6]), (False, taken[6:])):
            producer.begin_transaction()
            for value in chunk:
                producer.produce(sink, value=value.replace(b"in", b"out"), partition=0)
            position = 6 if committed else 10
            producer.send_offsets_to_transaction([TopicPartition(source, 0, position)],
                                                 consumer.consumer_group_metadata(), 60)
            if committed:
                producer.commit_transaction(60)
            else:
                producer.abort_transaction(60)
        # The committed transaction's offset is the group's; the aborted one's is not.
        found = consumer.committed([TopicPartition(source, 0)], timeout=30)
        assert found[0].offset == 6
    finally:
        consumer.close()
    assert sorted(read_committed(servers, sink, 1)) == sorted(
        v.replace(b"in", b"out") for v in taken[:6])


def test_find_coordinator_names_the_state_partitions_leader(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    producer = transactional_producer(servers, "finder")
    producer.init_transactions(60)  # FindCoordinator made the topic; InitProducerId served
    partition = partition_for_transactional_id("finder", STATE_PARTITIONS)
    state_leaders = leaders(servers[1], CLUSTER_TRANSACTION_STATE_TOPIC)
    assert sorted(state_leaders) == list(range(STATE_PARTITIONS))
    for server in servers.values():
        with KafkaWire(server.kafka_bootstrap) as sock:
            answer = ask(sock, FindCoordinatorRequest(key="finder", key_type=1), 3)
        assert answer.error_code == 0, answer
        assert answer.node_id == state_leaders[partition]
        assert answer.port == servers[answer.node_id].kafka_port


class TransactionLoop:
    """A librdkafka transactional producer writing numbered transactions of one record per
    partition and record slot, committing all but every fourth (aborted), and what became of
    each: ``committed`` (commit_transaction returned), ``aborted`` (abort_transaction was called:
    nothing of it may ever be read), ``unknown`` (the commit failed: all or nothing of it)."""

    def __init__(self, servers: dict[int, ServerProcess], topic: str, transactional_id: str
                 ) -> None:
        self._servers = servers
        self._topic = topic
        self._transactional_id = transactional_id
        self.committed: dict[int, list[bytes]] = {}
        self.aborted: dict[int, list[bytes]] = {}
        self.unknown: dict[int, list[bytes]] = {}
        self.errors: list[str] = []
        self._number = 0
        self._producer = self._start()

    def _start(self) -> Producer:
        producer = transactional_producer(self._servers, self._transactional_id,
                                          **{"transaction.timeout.ms": 10_000,
                                             "message.timeout.ms": 9_000})
        producer.init_transactions(60)
        return producer

    def one(self) -> None:
        """One transaction; a producer left in a fatal state is replaced (InitProducerId
        aborts what it left open)."""
        number, self._number = self._number, self._number + 1
        commit = number % 4 != 3
        values = [f"t{number}-p{p}-r{r}".encode() for p in range(PARTITIONS) for r in range(2)]
        producer = self._producer
        try:
            producer.begin_transaction()
            for value in values:
                producer.produce(self._topic, value=value,
                                 partition=int(value.split(b"-p")[1][:1]))
            producer.flush(30)
            if commit:
                producer.commit_transaction(60)
                self.committed[number] = values
            else:
                producer.abort_transaction(60)
                self.aborted[number] = values
        except KafkaException as exc:
            error = exc.args[0]
            self.errors.append(f"t{number}: {error}")
            if commit:
                self.unknown[number] = values
            else:
                self.aborted[number] = values
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(60)
                    if commit:
                        # Aborted by us: never visible.
                        self.aborted[number] = self.unknown.pop(number)
                    return
                except KafkaException as again:
                    self.errors.append(f"t{number} abort: {again.args[0]}")
            self._producer = self._start()


def test_kill_9_of_the_transaction_coordinator_under_a_transactional_producer(start_member):
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"txk-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=PARTITIONS)
    loop = TransactionLoop(servers, topic, "killed-coordinator")
    state_partition = partition_for_transactional_id("killed-coordinator", STATE_PARTITIONS)
    coordinator = leaders(servers[1], CLUSTER_TRANSACTION_STATE_TOPIC)[state_partition]
    for _ in range(4):
        loop.one()
    assert len(loop.committed) == 3 and not loop.errors, loop.errors
    # The loop goes on in its own thread: the kill lands wherever a transaction is then.
    stop = threading.Event()
    worker = threading.Thread(target=lambda: [loop.one() for _ in iter(stop.is_set, True)],
                              name="transaction-loop")
    worker.start()
    try:
        wait_for(lambda: len(loop.committed) >= 6, "three more transactions committed")
        servers[coordinator].kill()
        survivors = {n: s for n, s in servers.items() if n != coordinator}
        wait_for(lambda: leaders(next(iter(survivors.values())),
                                 CLUSTER_TRANSACTION_STATE_TOPIC).get(state_partition)
                 in survivors,
                 "a surviving server leads the transactional id's state partition",
                 FAILOVER_BOUND_S)
        before = len(loop.committed)
        wait_for(lambda: len(loop.committed) >= before + 6,
                 f"six more transactions committed after the kill ({loop.errors[-3:]})",
                 FAILOVER_BOUND_S * 4)
    finally:
        stop.set()
        worker.join(120)

    seen = read_committed(survivors, topic, PARTITIONS, timeout_s=FAILOVER_BOUND_S * 2)
    assert len(seen) == len(set(seen)), "a record read twice"
    seen_set = set(seen)
    for number, values in loop.committed.items():
        assert seen_set >= set(values), f"committed transaction t{number} not all visible"
    for number, values in loop.aborted.items():
        assert not seen_set & set(values), f"aborted transaction t{number} visible"
    for number, values in loop.unknown.items():
        shown = seen_set & set(values)
        assert not shown or shown == set(values), f"transaction t{number} torn: {shown}"
    expected = {v for vs in [*loop.committed.values(), *loop.unknown.values()] for v in vs}
    assert seen_set <= expected, "a record of no transaction"


def _transactional_batch(producer_id: int, epoch: int, sequence: int, value: bytes) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=sequence, batch_size=1 << 20)
    builder.append(0, timestamp=1_700_000_000_000, key=None, value=value, headers=[])
    return bytes(builder.build())


def _produce_code(server: ServerProcess, transactional_id: str, topic: str, records: bytes
                  ) -> int:
    data = ProduceRequest.TopicProduceData
    with KafkaWire(server.kafka_bootstrap) as sock:
        answer = ask(sock, ProduceRequest(
            transactional_id=transactional_id, acks=-1, timeout_ms=10_000, topic_data=[
                data(name=topic, partition_data=[
                    data.PartitionProduceData(index=0, records=records)])]), 8)
    return answer.responses[0].partition_responses[0].error_code


def test_a_late_transactional_produce_is_refused_by_the_partitions_leader(start_member):
    """Jepsen's anomaly: a Produce of a transaction that already ended must not open a
    transaction in the partition (its last stable offset would stay behind it for ever)."""
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"late-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    leader = servers[leaders(servers[1], topic)[0]]
    transactional_id = "late-producer"
    producer = transactional_producer(servers, transactional_id)
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(60)
    # The producer's id and epoch, as its coordinator describes them (gRPC, on any server's
    # answer of where the coordinator is).
    coordinator = servers[leaders(servers[1], CLUSTER_TRANSACTION_STATE_TOPIC)[
        partition_for_transactional_id(transactional_id, STATE_PARTITIONS)]]
    with SyncClient(coordinator.target) as client:
        described = client.describe_transaction(transactional_id)
    late = _transactional_batch(described.producer_id, described.producer_epoch, 1, b"late")
    assert _produce_code(leader, transactional_id, topic, late) == INVALID_TXN_STATE
    # Nothing was appended: the last stable offset is the high watermark.
    seen = read_committed(servers, topic, 1)
    assert seen == [b"committed"]


def test_transactions_on_a_cluster_with_acls_and_broker_principals(
        start_member, acl_flags):  # noqa: F811  (the fixture imported above)
    """The coordinators' calls to the leaders go as the broker principal, which the
    authorizer lets through (CLUSTER_ACTION: the brokers are super users)."""
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS,
                                                              *acl_flags))
    topic = f"txa-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic, partitions=PARTITIONS)
    producer = transactional_producer(servers, "secured-writer")
    producer.init_transactions(60)
    producer.begin_transaction()
    values = [f"s-{p}".encode() for p in range(PARTITIONS)]
    for p, value in enumerate(values):
        producer.produce(topic, value=value, partition=p)
    producer.commit_transaction(60)
    assert sorted(read_committed(servers, topic, PARTITIONS)) == sorted(values)


def test_a_coordinator_killed_in_the_middle_of_a_commit_completes_it(start_member):
    """PrepareCommit logged, the marker not written (the partition's leader frozen), then the
    coordinator's server is killed: the next coordinator finds the decision and commits."""
    servers = start_cluster(lambda node, *flags: start_member(node, *flags, *TXN_FLAGS))
    topic = f"mid-{uuid.uuid4().hex[:8]}"
    create_topic(servers[1], topic)
    probe = transactional_producer(servers, "probe")
    probe.init_transactions(60)  # the state topic made
    data_leader = leaders(servers[1], topic)[0]
    state = leaders(servers[1], CLUSTER_TRANSACTION_STATE_TOPIC)
    transactional_id = next(
        name for name in (f"mid-{i}" for i in range(1000))
        if state[partition_for_transactional_id(name, STATE_PARTITIONS)] not in (
            data_leader, -1))
    coordinator = state[partition_for_transactional_id(transactional_id, STATE_PARTITIONS)]
    producer = transactional_producer(servers, transactional_id)
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, value=b"decided", partition=0)
    producer.flush(30)
    frozen = servers[data_leader]
    frozen.process.send_signal(signal.SIGSTOP)
    outcome: list[object] = []
    committer = threading.Thread(target=lambda: outcome.append(_commit(producer)))
    try:
        committer.start()
        with SyncClient(servers[coordinator].target) as client:
            wait_for(lambda: client.describe_transaction(transactional_id).state
                     == "PrepareCommit", "the commit decided (PrepareCommit logged)")
        servers[coordinator].kill()
    finally:
        frozen.process.send_signal(signal.SIGCONT)
    committer.join(FAILOVER_BOUND_S * 6)
    assert outcome == [None], outcome
    survivors = {n: s for n, s in servers.items() if n != coordinator}
    assert read_committed(survivors, topic, 1, timeout_s=FAILOVER_BOUND_S * 3) == [b"decided"]
    # The next coordinator found the decision when it loaded, and completed it.
    assert any("completing 1 decided transactions" in s.log_text()
               for s in survivors.values())


def _commit(producer: Producer) -> object:
    try:
        producer.commit_transaction(FAILOVER_BOUND_S * 5)
    except KafkaException as exc:
        return exc.args[0]
    return None
