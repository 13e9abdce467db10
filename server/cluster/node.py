"""This server as a cluster member: session, registration, election, started and stopped together.

Start (``--cluster`` set). The server connects first, before it opens its logs
(:func:`connect`: a wrong etcd setting must not cost a recovery pass), then joins after the
gRPC port is bound, so that the advertised address carries the real port::

    connect to etcd, grant the lease, read      CoordinationUnavailableError: no etcd answered
        <prefix>/controller_epoch               EtcdTlsError, EtcdAuthenticationError
    (the server reads the cluster's ACLs: cluster_acls.py)
    read <prefix>/cluster_id, or write it       (cluster_id.py: the first server makes it)
    register <prefix>/brokers/<node_id>         NodeIdInUseError: a live server has the id
    read the broker list, campaign if no controller is known, read the topics and partitions
    start the keep-alive, the broker list poll, the election poll, the view's poll and the
    controller's duties (leader_election.py, preferred_leader.py's automatic rebalance and
    reassignment.py's passes: they act only while this server is controller)
    start the watches that wake them (below)

Watches (watches.py; docs/cluster.md, "Watches"): one etcd watch stream per watched key or
prefix, each waking the parts that read it, so that a part's step runs as soon as etcd changes
and the polls (every ``cluster_poll_fallback_ms``) are only the fallback::

    <prefix>/brokers/      the broker list; the controller's leader elections (a dead broker)
    <prefix>/controller    the election (campaign when the key is gone)
    <prefix>/partitions/   one watch over both prefixes: its events are applied to the view
      .. <prefix>/topics/  (cluster_view.py); it wakes the leader elections (a new topic's
                           first states; a write that lost a race is retried) and the
                           reassignments

(the ACLs' key has its watch in cluster_acls.py). With ``cluster_watches_enable`` false there
are no watches, and the polls alone follow etcd.

Stop: first, while the server still serves, its controlled shutdown
(:meth:`ClusterNode.controlled_shutdown`, controlled_shutdown.py: marked as shutting down, its
leaderships moved to other in-sync replicas and itself taken out of the ISRs, at most
``controlled_shutdown_timeout_ms``); then the watches and the polls end, and the server closes
the session: the lease is revoked (the broker key and, on the controller, the controller key
are deleted at once, so another server takes over without waiting a TTL).

Concurrency: event-loop only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cluster_id import ensure_cluster_id
from .cluster_view import ClusterView
from .controlled_shutdown import ControlledShutdown
from .controller import ControllerElection, ControllerState
from .endpoints import parse_cluster_url
from .etcd_client import EtcdSecurity
from .layout import ClusterKeys
from .leader_election import LeaderElector
from .membership import BrokerInfo, Membership
from .preferred_leader import PreferredLeaders
from .reassignment import Reassignments
from .session import EtcdSession
from .watches import KeyWatch

if TYPE_CHECKING:
    from .cluster_view import PartitionKey

__all__ = ["POLL_INTERVALS_PER_SESSION", "ClusterNode", "connect"]

#: Lease checks per session timeout (replica_roles.py): with the default 3 s, every 250 ms. Until
#: issue 29 every part polled etcd this often; watches replaced those polls.
POLL_INTERVALS_PER_SESSION = 12


class ClusterNode:
    """The cluster parts of one server; :meth:`start` once, then :meth:`close` once."""

    def __init__(self, session: EtcdSession, membership: Membership,
                 election: ControllerElection, view: ClusterView, keys: ClusterKeys,
                 elector: LeaderElector | None = None,
                 preferred: PreferredLeaders | None = None, cluster_id: str = "",
                 watches: tuple[KeyWatch, ...] = (),
                 reassignments: Reassignments | None = None,
                 shutdown: ControlledShutdown | None = None) -> None:
        self.session = session
        #: The controlled shutdown (controlled_shutdown.py); None: this node has none.
        self.shutdown = shutdown
        #: Partition reassignments and drains: requests and the controller's passes
        #: (reassignment.py).
        self.reassignments = reassignments
        #: Preferred-leader elections: on demand and automatic (preferred_leader.py).
        self.preferred = preferred
        #: The cluster's id (Kafka's cluster.id, etcd's <prefix>/cluster_id: cluster_id.py).
        self.cluster_id = cluster_id
        #: The etcd watches that wake the parts (module docstring); () without watches.
        self.watches = watches
        #: The controller's duties (leader_election.py): passes only while this is controller.
        self.elector = elector
        self.membership = membership
        self.election = election
        #: The replicated topics and partition states (cluster_view.py).
        self.view = view
        #: The cluster's etcd keys.
        self.keys = keys

    @classmethod
    async def start(cls, session: EtcdSession, prefix: str, node_id: int, address: str, *,
                    unclean_leader_election_enable: bool = False,
                    principal: str = "", kafka_address: str = "",
                    rack: str = "", auto_leader_rebalance_enable: bool = True,
                    leader_imbalance_check_interval_s: float = 300.0,
                    leader_imbalance_per_broker_percentage: int = 10,
                    poll_fallback_ms: int = 5_000,
                    watches_enable: bool = True) -> ClusterNode:
        """Join the cluster through ``session`` (module docstring; :func:`connect` made it).
        Nothing is started before the last read succeeded; on failure the caller closes the
        session, which revokes the lease and so deletes the registration.

        ``principal`` is who this server proves to be to its peers, registered with its
        address (broker_identity.py); "" registers none. ``kafka_address`` is where Kafka
        clients reach this server's Kafka listener (membership.py); "" registers none. ``rack``:
        its ``broker_rack`` (membership.py), "" for none. The ``leader_*`` and
        ``auto_leader_rebalance_enable`` arguments are the automatic preferred-leader
        rebalance's (preferred_leader.py).
        ``poll_fallback_ms`` is how often each part reads etcd by itself; ``watches_enable``
        whether watches wake them in between (module docstring).

        Raises:
            NodeIdInUseError: a live server holds ``node_id``.
            ClusterConfigError: etcd's cluster id is not one (cluster_id.py).
            What the etcd client raises when etcd stops answering meanwhile.
        """
        poll_interval_s = poll_fallback_ms / 1000
        keys = ClusterKeys(prefix)
        membership = Membership(session, keys, node_id, address, poll_interval_s, principal,
                                kafka_address, rack)
        election = ControllerElection(session, keys, node_id, poll_interval_s)
        view = ClusterView(session, keys, poll_interval_s)
        elector = LeaderElector(session, keys, election, membership, view, poll_interval_s,
                                unclean_leader_election_enable)
        election.on_elected(elector.wake)
        preferred = PreferredLeaders(
            session, keys, election, membership, view, elector,
            auto_rebalance=auto_leader_rebalance_enable,
            check_interval_s=leader_imbalance_check_interval_s,
            imbalance_percentage=leader_imbalance_per_broker_percentage,
        )
        cluster_id = await ensure_cluster_id(session, keys)
        view.expect_cluster_id(cluster_id)
        reassignments = Reassignments(session, keys, election, membership, view, elector,
                                      poll_interval_s)
        await membership.register()
        await membership.refresh()
        await election.maybe_campaign()
        await view.refresh()
        session.on_new_lease(membership.reregister)
        membership.start()
        election.start()
        view.start()
        elector.start()
        preferred.start()
        reassignments.start()
        watches = _watches(session, keys, membership, election, view, elector,
                           reassignments) if watches_enable else ()
        for watch in watches:
            watch.start()
        shutdown = ControlledShutdown(session, membership, election, view, elector,
                                      poll_interval_s)
        return cls(session, membership, election, view, keys, elector, preferred, cluster_id,
                   watches, reassignments, shutdown)

    @property
    def node_id(self) -> int:
        return self.membership.node_id

    @property
    def brokers(self) -> list[BrokerInfo]:
        """The live brokers as last read from etcd, by node id."""
        return list(self.membership.brokers.values())

    @property
    def controller(self) -> ControllerState:
        return self.election.state

    async def controlled_shutdown(self, timeout_s: float) -> list[PartitionKey]:
        """Move this server's leaderships away before it stops (controlled_shutdown.py), at
        most ``timeout_s`` (0: not at all); what was left to move. Call before anything stops
        serving, and before :meth:`close`; never raises for etcd."""
        if self.shutdown is None:
            return []
        return await self.shutdown.run(timeout_s)

    async def close(self) -> None:
        for watch in self.watches:
            await watch.stop()
        if self.reassignments is not None:
            await self.reassignments.close()
        if self.preferred is not None:
            await self.preferred.close()
        if self.elector is not None:
            await self.elector.close()
        await self.view.close()
        await self.election.close()
        await self.membership.close()


def _watches(session: EtcdSession, keys: ClusterKeys, membership: Membership,
             election: ControllerElection, view: ClusterView,
             elector: LeaderElector, reassignments: Reassignments) -> tuple[KeyWatch, ...]:
    """One watch per key or prefix, each waking the parts that read it (module docstring)."""
    return (
        KeyWatch(session, keys.brokers_prefix, [membership.wake, elector.wake],
                 "stratalog-watch-brokers", prefix=True),
        KeyWatch(session, keys.controller, [election.wake], "stratalog-watch-controller"),
        view.watch([elector.wake, reassignments.wake]),  # topics/ and partitions/, applied
    )


async def connect(url: str, prefix: str, session_timeout_ms: int,
                  security: EtcdSecurity | None = None) -> EtcdSession:
    """Connect to etcd (the first endpoint of ``url`` that answers), grant this server's
    lease and start keeping it alive; check that this server may read ``prefix``'s keys.

    Raises:
        ClusterConfigError: ``url`` does not parse.
        CoordinationUnavailableError, EtcdTlsError, EtcdAuthenticationError: session.py.
    """
    session = await EtcdSession.open(
        parse_cluster_url(url), session_timeout_ms, security,
        access_check_key=ClusterKeys(prefix).controller_epoch,
    )
    session.start()
    return session
