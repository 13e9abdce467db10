"""A secured cluster's acks=all throughput against an unsecured one's, in the same run.

Issue 24 gave replication a broker identity: a cluster with ACLs has its servers prove who they
are to each other (``broker_principals``), and replication then runs over TLS. What that costs
a producer is measured here on two clusters that run side by side on this machine, each one
etcd and three servers in cluster mode:

  plain     plaintext everywhere, no authentication, no authorizer
  secured   etcd over TLS with a client certificate required (the servers present the etcd
            PKI's client certificate); every server listens with TLS, requires client
            certificates (mTLS) and presents its own (``CN=broker-N``) to its peers when it
            fetches as a follower, ``broker_principals`` names the three, the ACL authorizer is
            on, and the producer is an ordinary user (``CN=alice``) allowed by one ACL (WRITE
            on the topic), so that every Produce is authorized, not passed as a super user's

One topic per cluster, one partition, replication factor 3, ``min.insync.replicas`` 2, created
through CreateTopic; the producer sends to the partition's leader (from Metadata) with
acks=all:

  throughput   ``--in-flight`` Produce calls at once, each one pre-built batch of
               ``--records`` records of ``--value-bytes`` bytes, for ``--seconds`` per turn:
               records/s, and the CPU the three servers spent per MiB (/proc: a figure the
               machine's other load moves far less than the wall-clock one)
  latency      one record per call, one call at a time, ``--latency-calls`` calls: p50, p99

With ``--tls`` a third cluster runs beside them, **tls**: the secured cluster's server
certificates and TLS listeners (so replication runs over TLS), but no client certificates, no
authorizer, no broker principals and plaintext etcd, to tell what TLS alone costs
from what the rest adds.

The clusters take turns, the order rotating every round, for ``--rounds`` rounds (the idle
ones' polling goes on meanwhile, alike for all). Each ratio (secured / plain, tls / plain) is
taken per round; the printed one is the median with an approximately 95% confidence interval for it
(``bench_limits.median_interval``).

On this 2-core machine the client, six (nine) servers and two (three) etcd members share the
cores, so the
throughput is the CPU the cluster spends per record, not what a network allows.

Run: ``.venv/bin/python -m benchmarks.bench_secured_cluster [--rounds 7] [--seconds 3] [--records 100]
[--tls]``.
Figures: docs/performance.md ("Issue 24: the cost of the limits"). The clusters and their
directories are removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import grpc.aio

from benchmarks.bench_limits import median_interval
from benchmarks.peer_harness import ServerCpu, percentile
from stratalog.records.builder import build_batch
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.cluster.conftest import EtcdProcess
from tests.cluster.test_broker_identity import BrokerPki, make_broker_pki
from tests.conftest import make_test_pki
from tests.integration.conftest import ServerProcess, launch_server

NODES = (1, 2, 3)
TOPIC = "bench"
READY_TIMEOUT_S = 120.0
# What a producer may be told while the topic's leader and ISR settle (or, on the secured
# cluster, while the leader's poll of etcd has not yet brought it the ACL).
_SETTLING = frozenset({
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.DEADLINE_EXCEEDED,
})


@dataclass
class Cluster:
    """One etcd, three servers and how a client reaches them: ``credentials`` None is
    plaintext; ``admin`` and ``producer`` are channel credentials of those two identities."""

    name: str
    etcd: EtcdProcess
    servers: dict[int, ServerProcess] = field(default_factory=dict)
    admin: grpc.ChannelCredentials | None = None
    producer: grpc.ChannelCredentials | None = None
    pki: BrokerPki | None = None

    def channel(self, node_id: int, credentials: grpc.ChannelCredentials | None,
                aio: bool = False) -> grpc.Channel | grpc.aio.Channel:
        target = self.servers[node_id].target
        if credentials is None:
            return (grpc.aio.insecure_channel if aio else grpc.insecure_channel)(target)
        return (grpc.aio.secure_channel if aio else grpc.secure_channel)(target, credentials)

    def cpu_samples(self) -> list[tuple[float, float]]:
        return [ServerCpu(s.process.pid).sample() for s in self.servers.values()]

    def cpu_s(self, before: list[tuple[float, float]]) -> float:
        return sum(ServerCpu(s.process.pid).delta_s(b)
                   for s, b in zip(self.servers.values(), before, strict=True))

    def stop(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(AssertionError):  # a slow stop was killed: go on
                server.stop()
        self.etcd.stop()


def _credentials(ca: Path, cert: tuple[Path, Path]) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(ca.read_bytes(), cert[1].read_bytes(),
                                        cert[0].read_bytes())


def plain_cluster(root: Path) -> Cluster:
    return Cluster("plain", EtcdProcess(root / "etcd"))


def start_plain(cluster: Cluster, root: Path) -> None:
    cluster.etcd.start()
    for n in NODES:
        cluster.servers[n] = launch_server(root / f"node-{n}", "--cluster", cluster.etcd.url,
                                           "--node-id", str(n))


def secured_cluster(root: Path) -> Cluster:
    """The secured cluster's certificates made, nothing started."""
    brokers = make_broker_pki(root / "pki", NODES)
    (root / "etcd-pki").mkdir()
    cluster = Cluster("secured", EtcdProcess(root / "etcd", make_test_pki(root / "etcd-pki")),
                      admin=_credentials(brokers.ca, brokers.admin),
                      producer=_credentials(brokers.ca, brokers.alice))
    cluster.pki = brokers
    return cluster


def start_secured(cluster: Cluster, root: Path) -> None:
    brokers = cluster.pki
    assert brokers is not None
    cluster.etcd.start()
    principals = ";".join(f"User:CN=broker-{n}" for n in NODES)
    for n in NODES:
        cluster.servers[n] = launch_server(
            root / f"node-{n}", "--cluster", cluster.etcd.url, "--node-id", str(n),
            *cluster.etcd.server_tls_flags(),
            "--tls-cert-file", str(brokers.brokers[n][0]),
            "--tls-key-file", str(brokers.brokers[n][1]),
            "--tls-ca-file", str(brokers.ca), "--tls-client-auth", "required",
            "--authorizer", "acl", "--super-users", "User:CN=admin",
            "--broker-principals", principals)
    with cluster.channel(1, cluster.admin) as channel:
        broker_pb2_grpc.BrokerStub(channel).CreateAcls(pb.CreateAclsRequest(creations=[
            pb.AclBinding(resource_type=pb.RESOURCE_TYPE_TOPIC, resource_name=TOPIC,
                          pattern_type=pb.PATTERN_TYPE_LITERAL, principal="User:CN=alice",
                          host="*", operation=pb.ACL_OPERATION_WRITE,
                          permission_type=pb.ACL_PERMISSION_TYPE_ALLOW)]), timeout=60)


def tls_cluster(root: Path) -> Cluster:
    """The TLS-only cluster's certificates made, nothing started."""
    brokers = make_broker_pki(root / "pki", NODES)
    cluster = Cluster("tls", EtcdProcess(root / "etcd"),
                      admin=_credentials(brokers.ca, brokers.admin),
                      producer=_credentials(brokers.ca, brokers.alice))
    cluster.pki = brokers
    return cluster


def start_tls(cluster: Cluster, root: Path) -> None:
    """TLS on every server's listener, so replication runs over TLS too (each follower trusts
    the CA: ``tls_ca_file``); but no client certificates asked for (that is authentication,
    which a cluster allows only with broker principals), plaintext etcd and no authorizer:
    what TLS alone costs."""
    brokers = cluster.pki
    assert brokers is not None
    cluster.etcd.start()
    for n in NODES:
        cluster.servers[n] = launch_server(
            root / f"node-{n}", "--cluster", cluster.etcd.url, "--node-id", str(n),
            "--tls-cert-file", str(brokers.brokers[n][0]),
            "--tls-key-file", str(brokers.brokers[n][1]),
            "--tls-ca-file", str(brokers.ca), "--tls-client-auth", "none")


#: The clusters by name: (make it, start it).
CLUSTERS = {
    "plain": (plain_cluster, start_plain),
    "secured": (secured_cluster, start_secured),
    "tls": (tls_cluster, start_tls),
}


def _wait(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` every 100 ms; RuntimeError naming ``what`` after READY_TIMEOUT_S."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {READY_TIMEOUT_S:.0f} s: {what}")
        time.sleep(0.1)


def create_topic(cluster: Cluster) -> int:
    """The benchmark's RF=3 topic; its leader's node id once all three replicas are in sync
    and the producer's acks=all Produce is accepted."""
    with cluster.channel(1, cluster.admin) as channel:
        broker = broker_pb2_grpc.BrokerStub(channel)
        broker.CreateTopic(pb.CreateTopicRequest(
            name=TOPIC, partitions=1, replication_factor=3,
            configs={"min.insync.replicas": "2"}), timeout=60)
        partition: list[pb.PartitionMetadata] = []

        def in_sync() -> bool:
            topics = broker.Metadata(pb.MetadataRequest(topics=[TOPIC]), timeout=60).topics
            if not topics or not topics[0].partitions:
                return False
            partition[:] = [topics[0].partitions[0]]
            return partition[0].leader in NODES and sorted(partition[0].isr) == list(NODES)

        _wait(in_sync, f"{cluster.name}: {TOPIC} led with all three replicas in sync")
    leader = partition[0].leader

    def accepted() -> bool:
        with cluster.channel(leader, cluster.producer) as channel:
            try:
                broker_pb2_grpc.BrokerStub(channel).Produce(pb.ProduceRequest(
                    topic=TOPIC, partition=0, acks=-1, records=[pb.Record(value=b"warm-up")]),
                    timeout=30)
            except grpc.RpcError as exc:
                if exc.code() not in _SETTLING:
                    raise
                return False
        return True

    _wait(accepted, f"{cluster.name}: an acks=all Produce to node {leader} accepted")
    return leader


async def throughput(cluster: Cluster, leader: int, batch: bytes, records: int,
                     in_flight: int, seconds: float) -> tuple[float, float]:
    """Records per second over ``seconds`` with ``in_flight`` calls outstanding, and the three
    servers' CPU milliseconds per MiB of batches."""
    async with cluster.channel(leader, cluster.producer, aio=True) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        request = pb.ProduceRequest(topic=TOPIC, partition=0, record_batches=batch, acks=-1)
        calls = 0
        deadline = time.monotonic() + seconds

        async def sender() -> None:
            nonlocal calls
            while time.monotonic() < deadline:
                await stub.Produce(request, timeout=60)
                calls += 1

        cpu = cluster.cpu_samples()
        started = time.monotonic()
        await asyncio.gather(*(sender() for _ in range(in_flight)))
        wall_s = time.monotonic() - started
        cpu_s = cluster.cpu_s(cpu)
    return calls * records / wall_s, cpu_s * 1e3 / (calls * len(batch) / (1 << 20))


async def latencies(cluster: Cluster, leader: int, calls: int) -> list[float]:
    """Seconds of each of ``calls`` acks=all Produce calls of one 100-byte record, in turn."""
    async with cluster.channel(leader, cluster.producer, aio=True) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        request = pb.ProduceRequest(topic=TOPIC, partition=0, acks=-1,
                                    records=[pb.Record(value=b"x" * 100)])
        taken = []
        for _ in range(calls):
            started = time.perf_counter()
            await stub.Produce(request, timeout=60)
            taken.append(time.perf_counter() - started)
    return sorted(taken)


def _ratio_cell(secured: list[float], plain: list[float]) -> str:
    median, low, high = median_interval([s / p for s, p in zip(secured, plain, strict=True)])
    return f"x{median:.3f} ({low:.2f}-{high:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--latency-calls", type=int, default=200)
    parser.add_argument("--tls", action="store_true",
                        help="a third cluster with TLS alone (no ACLs, plaintext etcd)")
    args = parser.parse_args()
    batch = build_batch([(int(time.time() * 1000), None, b"v" * args.value_bytes, ())]
                        * args.records)
    print(f"# bench_secured_cluster: {args.rounds} rounds of {args.seconds:.0f} s, "
          f"{args.in_flight} calls in flight of {args.records} records of {args.value_bytes} B; "
          f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-secured-cluster-") as tmp:
        clusters: list[Cluster] = []
        try:
            for name in ("plain", "secured", *(["tls"] if args.tls else [])):
                make, start = CLUSTERS[name]
                root = Path(tmp) / name
                root.mkdir()
                # Kept before it starts: a failed start still stops what it started.
                clusters.append(make(root))
                start(clusters[-1], root)
            leaders = {cluster.name: create_topic(cluster) for cluster in clusters}
            figures: dict[str, dict[str, list[float]]] = {
                c.name: {"records/s": [], "servers CPU ms/MiB": [], "p50 ms": [], "p99 ms": []}
                for c in clusters}
            for cluster in clusters:  # connections, the followers' first fetches: not timed
                asyncio.run(throughput(cluster, leaders[cluster.name], batch, args.records,
                                       args.in_flight, 1.0))
            for round_index in range(args.rounds):
                order = clusters[round_index % len(clusters):] + clusters[
                    :round_index % len(clusters)]
                for cluster in order:
                    rate, cpu = asyncio.run(throughput(
                        cluster, leaders[cluster.name], batch, args.records, args.in_flight,
                        args.seconds))
                    figures[cluster.name]["records/s"].append(rate)
                    figures[cluster.name]["servers CPU ms/MiB"].append(cpu)
                for cluster in order:
                    taken = asyncio.run(latencies(cluster, leaders[cluster.name],
                                                  args.latency_calls))
                    figures[cluster.name]["p50 ms"].append(percentile(taken, 0.5) * 1e3)
                    figures[cluster.name]["p99 ms"].append(percentile(taken, 0.99) * 1e3)
                print(f"# round {round_index + 1}/{args.rounds} done", flush=True)
        finally:
            for cluster in clusters:
                cluster.stop()
    print(f"# load average {os.getloadavg()[0]:.1f} at the end")
    others = [c.name for c in clusters if c.name != "plain"]
    print(f"{'RF 3, acks=all':<22}" + "".join(f"{c.name:>12}" for c in clusters)
          + "".join(f"{name + ' / plain':>24}" for name in others))
    for key in figures["plain"]:
        print(f"{key:<22}"
              + "".join(f"{statistics.median(figures[c.name][key]):>12,.2f}" for c in clusters)
              + "".join(f"{_ratio_cell(figures[name][key], figures['plain'][key]):>24}"
                        for name in others))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
