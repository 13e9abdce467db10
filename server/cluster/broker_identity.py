"""The broker identity: which callers are the cluster's servers, and which node each one is.

A follower's fetch moves its leader's high watermark and puts it into the ISR, so a caller
that could pose as a follower could make the leader acknowledge acks=all writes that no other
replica holds, and read every topic's raw batches whatever its ACLs. Kafka keeps such requests
to its brokers: they authenticate on the inter-broker listener as a principal of their own,
and the follower's replica id is checked against the metadata. Here:

**Who a server is.** ``broker_principals`` (a setting, the same on every server) lists the
principals the cluster's servers authenticate as, by the certificate each presents (mTLS) or
the user or token each sends (``inter_broker_*``, peer_channels.py). When a server joins, it
asks itself who it is: WhoAmI over its own inter-broker channel to its own advertised address
(:func:`own_principal`), so the answer is exactly what its peers' authentication will make of
it. The start fails unless that principal is one of ``broker_principals`` (its fetches would
all be refused), and the server registers it in etcd beside its address (membership.py).

**Which node a server is.** The registration ``<prefix>/brokers/<node_id>`` is the mapping:
written by the server itself, under its own lease, gone with it. A fetch from principal P
naming ``replica_id`` N is a fetch of node N only if N's live registration names P. etcd is
already what the cluster trusts most (whoever may write it may move leaders and ISRs), so the
mapping adds no trust a static table would avoid; a static node -> principal table in every
server's settings would instead have to be edited on every server for each new one.
With one principal shared by all servers (one user for all), the check still keeps out every
caller that is not a server, but a server may pose as another: give each server a certificate
or user of its own to bind each to its node.

What the leader checks on every Replication call, before it looks at the partition::

    broker_principals set ("authenticated"):
      1. the caller's principal is one of them          else PERMISSION_DENIED, NotABrokerError
                                                        (whatever the ACLs say, even with no
                                                        authorizer configured)
      2. node replica_id is registered                  else NOT_LEADER_OR_FOLLOWER,
                                                        UnregisteredReplicaError (retriable)
      3. ... with the caller's principal                else PERMISSION_DENIED, NotABrokerError
    broker_principals empty (a cluster that trusts its network: docs/cluster.md):
      2. node replica_id is registered                  else NOT_LEADER_OR_FOLLOWER

and then (server/rpc/replication_service.py) that replica_id is an assigned replica of the partition and
not the leader itself. Step 2 is Kafka's rule that only a live, unfenced broker's replica
joins the ISR (``isReplicaIsrEligible`` in ``core/src/main/scala/kafka/cluster/Partition.scala``)
made stricter: the fetch itself is refused, so a node that is gone moves no high watermark
either. Kafka answers a fetch from a replica it does not know NOT_LEADER_OR_FOLLOWER
(``followerReplicaOrThrow``, same file): so does this, and a follower that registered a
moment ago, before the leader's broker list (polled) saw it, asks again within 100 ms as after
an election.

Concurrency: immutable; the broker list it is given is the membership's, read on the loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from stratalog.server.security.errors import NotABrokerError, SecurityConfigError
from stratalog.server.security.principal import Principal

from .errors import UnregisteredReplicaError

if TYPE_CHECKING:
    from .membership import BrokerInfo
    from .peer_channels import PeerChannels

__all__ = ["BrokerIdentity", "own_principal"]

#: How long the WhoAmI a joining server sends itself may take.
WHO_AM_I_TIMEOUT_S = 10.0


class BrokerIdentity:
    """The broker principals and the checks of the module docstring. Immutable."""

    __slots__ = ("principals",)

    def __init__(self, broker_principals: Iterable[str]) -> None:
        #: Empty: replication is not authenticated (the network is trusted).
        self.principals = frozenset(Principal.parse(p) for p in broker_principals)

    @property
    def authenticated(self) -> bool:
        """Whether only broker principals may make server-to-server calls."""
        return bool(self.principals)

    def check_caller(self, principal: Principal) -> None:
        """Step 1. O(1).

        Raises:
            NotABrokerError: broker principals are set and ``principal`` is not one.
        """
        if self.principals and principal not in self.principals:
            raise NotABrokerError(
                f"not authorized: {principal} is not a server of this cluster (it is not one"
                " of broker_principals): the Replication service is for the cluster's"
                " servers only"
            )

    def check_replica(self, principal: Principal, replica_id: int,
                      brokers: Mapping[int, BrokerInfo], topic: str, partition: int) -> None:
        """Steps 2 and 3: ``principal`` may fetch as node ``replica_id`` of ``brokers`` (the
        live registrations). O(1).

        Raises:
            UnregisteredReplicaError: no live server registered ``replica_id``.
            NotABrokerError: broker principals are set and ``replica_id`` registered another
                principal.
        """
        registration = brokers.get(replica_id)
        if registration is None:
            raise UnregisteredReplicaError(topic, partition, replica_id)
        if self.principals and registration.principal != str(principal):
            raise NotABrokerError(
                f"not authorized: {principal} may not fetch as replica {replica_id}: node"
                f" {replica_id} registered as {registration.principal or 'no principal'}"
            )


async def own_principal(peers: PeerChannels, address: str, identity: BrokerIdentity) -> str:
    """Who this server is to its peers: WhoAmI to itself at ``address`` (its advertised
    address) over its inter-broker channel; checked to be a broker principal.

    Raises:
        SecurityConfigError: the answer is not one of the broker principals (a start-up
            failure: the settings or the certificate are wrong).
        grpc.aio.AioRpcError: the call failed (the TLS handshake, the credentials).
    """
    principal = Principal.parse(await peers.who_am_i(address, WHO_AM_I_TIMEOUT_S))
    if principal not in identity.principals:
        raise SecurityConfigError(
            f"this server authenticates to its peers as {principal}, which is not one of"
            f" broker_principals ({'; '.join(sorted(map(str, identity.principals)))}): they"
            " would refuse its fetches. Give it the certificate or the inter_broker_* user or"
            " token of a broker principal, or add the principal to broker_principals on"
            " every server"
        )
    return str(principal)
