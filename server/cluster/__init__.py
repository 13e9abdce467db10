"""Cluster membership and the controller, coordinated by etcd (issue 17; docs/cluster.md).

A server started with ``--cluster etcd://HOST:PORT`` and ``--node-id N`` holds one etcd lease
(:mod:`.session`), registers itself under it (:mod:`.membership`) and campaigns for the
controller role under the same lease (:mod:`.controller`); the etcd keys are laid out in
:mod:`.layout`. Without ``--cluster`` nothing here runs and no etcd is needed; this package's ``__init__``
imports no etcd client (node.py, session.py, etcd_client.py, watches.py, cluster_view.py, cluster_acls.py and topic_admin.py do:
import them only in cluster mode).

Modules, one concept each::

    endpoints.py    the --cluster URL: etcd://host:port[,host:port...], etcds:// for TLS
    etcd_client.py  the etcd client of one endpoint: TLS, etcd credentials, start errors named
    layout.py       the etcd keys of a cluster and the values stored under them
    session.py      the etcd client and this server's lease, kept alive; endpoint failover
    cluster_acls.py the cluster's ACLs: one etcd key, updated by transactions, watched
    membership.py   /<prefix>/brokers/<node_id> and the view of the live brokers
    controller.py   the controller election and its epoch
    partition_state.py  what etcd stores per replicated topic and partition
    cluster_view.py the topics and partition states, read from etcd and kept by its watch events
    view_state.py   the view's decoded state: loaded whole, or changed by events (sans-IO)
    topic_admin.py  CreateTopic, DeleteTopic and CreatePartitions written to etcd, the listings
    replica_placement.py  which brokers hold a new partition's replicas (racks; pure)
    leader_election.py  the controller's duties: leaders elected, dead brokers out of ISRs
    preferred_leader.py  leadership back to preferred replicas: ElectLeaders, auto rebalance
    controlled_shutdown.py  a stopping server's leaderships moved away before its lease goes
    stray_logs.py   local logs of topics deleted or moved away, found and deleted
    reassignment.py partition reassignment and draining: requests, the controller's steps
    replication_throttle.py  the token bucket that throttles reassignment fetches (sans-IO)
    producer_ids.py cluster-unique producer ids: the node id above a server's counter
    node.py         session, membership and controller started and stopped together
    polling.py      the step-every-interval loop the parts share, woken by the watches
    watches.py      one etcd watch stream per key or range, waking the parts that read it
    isr.py          the leader's follower states, high watermark and ISR decisions (pure)
    divergence.py   where a follower's log leaves its leader's, where it truncates (pure)
    replica.py      one replicated partition here: its role, ISR and high watermark
    replica_roles.py     this server's replicas made leaders and followers as etcd says
    replica_fetcher.py   a follower's copy loop, one fetch session per leader
    fetch_session.py     the leader's side of a fetch session: partitions, checks, progress
    fetch_session_wire.py  a fetch session's answer on the wire, batches not copied
    (the ReplicaFetchSession servicer, translating only, is server/rpc/replication_service.py)
    errors.py       this package's errors
"""

from .controller import NO_CONTROLLER, ControllerState
from .endpoints import parse_cluster_url
from .errors import (
    ClusterConfigError,
    ClusterError,
    CoordinationUnavailableError,
    EtcdAuthenticationError,
    EtcdTlsError,
    NodeIdInUseError,
)
from .membership import BrokerInfo

__all__ = [
    "NO_CONTROLLER",
    "BrokerInfo",
    "ClusterConfigError",
    "ClusterError",
    "ControllerState",
    "CoordinationUnavailableError",
    "EtcdAuthenticationError",
    "EtcdTlsError",
    "NodeIdInUseError",
    "parse_cluster_url",
]
