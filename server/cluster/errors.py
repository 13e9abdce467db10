"""The cluster package's errors: one base, a leaf per failure.

At start (ClusterConfigError, CoordinationUnavailableError, EtcdTlsError,
EtcdAuthenticationError, NodeIdInUseError) they stop the server (app.py turns them into StartupError: exit 1). On a request they reach the client
through server/rpc/status.py's table, Kafka's error names: who leads a partition
(NotLeaderOrFollowerError carries the leader this server knows of, so that a client can go
there without another Metadata call), whether enough replicas hold a record, whether a
replication request's leader epoch is current, and whether etcd answered an operation that
needs it (CreateTopic, DeleteTopic in cluster mode).
"""

from __future__ import annotations

__all__ = [
    "ClusterConfigError",
    "ClusterError",
    "CoordinationUnavailableError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "EtcdAuthenticationError",
    "EtcdTlsError",
    "FencedLeaderEpochError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "LeaderNotAvailableError",
    "NoReassignmentInProgressError",
    "NodeIdInUseError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderOrFollowerError",
    "PreferredLeaderNotAvailableError",
    "ReplicationTimeoutError",
    "UnknownLeaderEpochError",
    "UnregisteredReplicaError",
    "UnsupportedInClusterError",
]


class ClusterError(Exception):
    """Base of the cluster package's errors."""


class ClusterConfigError(ClusterError):
    """A cluster setting that cannot work: a --cluster URL that does not parse."""


class CoordinationUnavailableError(ClusterError):
    """etcd did not answer (no endpoint reachable, or a call timed out)."""


class EtcdTlsError(ClusterError):
    """No TLS connection to etcd: a certificate that does not verify (etcd's against
    ``etcd_ca_file``, or ours refused by etcd's ``--client-cert-auth``), or TLS on one side
    only (``etcd://`` to a TLS port, ``etcds://`` to a plaintext one)."""


class EtcdAuthenticationError(ClusterError):
    """etcd refused this server's etcd user: wrong user or password, no credentials while
    etcd's auth is enabled, or a user whose roles do not allow ``cluster_prefix``."""


class NodeIdInUseError(ClusterError):
    """Another live server holds this node id: its registration is under a lease that has not
    expired. Raised at start, before this server registers."""

    def __init__(self, node_id: int, holder: str, ttl_s: int) -> None:
        self.node_id = node_id
        self.holder = holder
        super().__init__(
            f"node id {node_id} is already registered by a live server at {holder} (its etcd "
            f"lease expires in {ttl_s} s if that server is gone); give this server another "
            "--node-id, or stop the other one"
        )


class PartitionError(ClusterError):
    """A request about one partition that its replication state refuses; names the partition."""

    def __init__(self, topic: str, partition: int, message: str) -> None:
        self.topic = topic
        self.partition = partition
        # No topic: a refusal of every partition at once (a replication stream to a server
        # that has not joined the cluster, or is stopping).
        super().__init__(f"{topic}-{partition}: {message}" if topic else message)


class NotLeaderOrFollowerError(PartitionError):
    """This server is not the partition's leader (Kafka's NOT_LEADER_OR_FOLLOWER): produce and
    fetch go to the leader. ``leader_id`` (-1: unknown), ``leader_epoch`` and
    ``leader_address`` ("" when unknown) are this server's view, sent to the client as hints."""

    def __init__(self, topic: str, partition: int, leader_id: int = -1, leader_epoch: int = -1,
                 leader_address: str = "") -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.leader_address = leader_address
        where = (f"the leader is node {leader_id} at {leader_address or 'an unknown address'} "
                 f"(leader epoch {leader_epoch})" if leader_id >= 0 else "no leader is known")
        what = ("this server is not the partition's leader" if topic else
                "this server leads no partition now (it has not joined the cluster, or it is"
                " stopping)")
        super().__init__(topic, partition, f"{what}; {where}: refresh the metadata and retry"
                                           " there")


class LeaderNotAvailableError(PartitionError):
    """The partition has no leader now: an election is pending, or no in-sync replica lives
    (``unclean.leader.election.enable=false`` keeps it offline rather than lose records)."""


class NotEnoughReplicasError(PartitionError):
    """acks=all and fewer in-sync replicas than ``min.insync.replicas``: nothing was written."""

    def __init__(self, topic: str, partition: int, isr_size: int, min_insync: int) -> None:
        self.isr_size = isr_size
        self.min_insync = min_insync
        super().__init__(topic, partition,
                         f"the in-sync replica set has {isr_size} member(s), below "
                         f"min.insync.replicas={min_insync}; nothing was written")


class NotEnoughReplicasAfterAppendError(PartitionError):
    """acks=all: the leader wrote the records but the ISR shrank below ``min.insync.replicas``
    before they were replicated; a retry with the idempotent producer is answered as a
    duplicate if they survive."""


class FencedLeaderEpochError(PartitionError):
    """A replication request (or an append) carries a leader epoch older than this server's:
    its sender acts on a stale view and must refresh it. ``leader_id`` and ``leader_epoch``
    are the leader's, set only when the leader raised it (a hint for the client; absent, the
    error names no leader, and the gRPC answer's metadata carries none)."""

    def __init__(self, topic: str, partition: int, message: str, leader_id: int = -1,
                 leader_epoch: int = -1) -> None:
        if leader_id >= 0:
            self.leader_id = leader_id
            self.leader_epoch = leader_epoch
        super().__init__(topic, partition, message)


class UnknownLeaderEpochError(PartitionError):
    """A replication request carries a leader epoch newer than this server's: this server has
    not yet seen the election; retriable."""


class UnregisteredReplicaError(PartitionError):
    """A replication request names a node (``replica_id``) that has no registration in etcd:
    not a live server of the cluster, so its fetch is not served and it never joins the ISR
    (Kafka's leader refuses a fetch from a replica it does not know, and lets only registered,
    unfenced replicas join the ISR). Retriable: a server that has just registered is seen
    within a poll."""

    def __init__(self, topic: str, partition: int, replica_id: int) -> None:
        self.replica_id = replica_id
        super().__init__(topic, partition,
                         f"node {replica_id} is not a live server of the cluster (it has no "
                         "registration in etcd): its fetch is not served")


class InvalidReplicationFactorError(ClusterError):
    """CreateTopic asked for a replication factor below 1 or above the live brokers."""


class ElectionNotNeededError(ClusterError):
    """ElectLeaders: the partition is led by its preferred replica already (PREFERRED), or has a
    live leader (UNCLEAN); nothing written (Kafka's ELECTION_NOT_NEEDED)."""


class PreferredLeaderNotAvailableError(ClusterError):
    """ElectLeaders (PREFERRED): the preferred replica is not live or not in the ISR, so the
    leadership cannot move to it without losing records (Kafka's
    PREFERRED_LEADER_NOT_AVAILABLE); nothing written."""


class EligibleLeadersNotAvailableError(ClusterError):
    """ElectLeaders (UNCLEAN): no replica of the partition is live (Kafka's
    ELIGIBLE_LEADERS_NOT_AVAILABLE); nothing written."""


class InvalidReplicaAssignmentError(ClusterError):
    """AlterPartitionReassignments (issue 29): the target replicas name no broker, one twice,
    or a broker that is not live; a drain finds no broker to take a replica (Kafka's
    INVALID_REPLICA_ASSIGNMENT)."""


class NoReassignmentInProgressError(ClusterError):
    """AlterPartitionReassignments: a cancellation of a partition that is not being
    reassigned (Kafka's NO_REASSIGNMENT_IN_PROGRESS)."""


class UnsupportedInClusterError(ClusterError):
    """A request a cluster member does not serve yet (CreatePartitions: the controller does
    not assign new partitions' replicas yet); refused whole, nothing changed."""


class ReplicationTimeoutError(PartitionError):
    """acks=all: the in-sync replicas did not all reach the records within the request's
    timeout (Kafka's REQUEST_TIMED_OUT). The records are in the leader's log and may yet be
    replicated: retry with the idempotent producer."""
