"""Broker registration and the view of the live brokers.

Registration: ``<prefix>/brokers/<node_id>`` = ``{"node_id": N, "address": "HOST:PORT",
"principal": "User:...", "kafka_address": "HOST:PORT", "rack": "r1"}`` under this server's lease
(session.py); ``rack`` is the server's ``broker_rack`` (Kafka's ``broker.rack``, left out when
empty: replica_placement.py spreads replicas over racks);
``principal`` is who the server proves to be to its peers (broker_identity.py), left out in a
cluster without ``broker_principals``; ``kafka_address`` is where Kafka clients reach the
server's Kafka listener (server/kafka/: Metadata's brokers), left out by a server without one.
Both are optional: a registration without them (an older server's) reads as "none".
``"shutting_down": true`` is added by a server in a controlled shutdown
(:meth:`Membership.mark_shutting_down`, controlled_shutdown.py; KRaft's
``BrokerRegistration.inControlledShutdown``): the controller moves its leaderships away and
takes it out of every ISR, and no leader lets it back in. The mark belongs to the process (a
lease replaced during its shutdown is registered with it again); the key goes with the
lease at the stop, and the process that starts again registers without it.
The registration is written by a transaction that succeeds only if the key
does not exist (``create_revision == 0``). If it exists, another server holds the node id under
a lease of its own that has not expired, and the start is refused (:class:`NodeIdInUseError`)
rather than take the id over: two servers with one id would corrupt each other's replicas once
replication exists. Kafka does the same with its ephemeral ``/brokers/ids/<id>`` znode. A server
killed without a clean stop holds its id until its lease expires (``cluster_session_timeout_ms``);
a clean stop revokes the lease and frees it at once.

A lease that expired while the server lived (frozen, cut off) is replaced by the session, which
then calls :meth:`Membership.register` again; if the id was taken meanwhile, the server logs it
and stays unregistered (it cannot stop serving the data path it has from here).

The view: the broker keys are read (one range request) into :attr:`Membership.brokers`, which
Metadata answers from, as soon as an etcd watch on the broker prefix sees a change
(:meth:`Membership.wake`; node.py wires the watch, watches.py) and every ``poll_interval_s``
(``cluster_poll_fallback_ms``) in case the watch is broken. While etcd is down the last view
stays.

Concurrency: event-loop only.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import TYPE_CHECKING, NamedTuple

from .errors import NodeIdInUseError
from .layout import ClusterKeys, decode_json
from .polling import Poller

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["BrokerInfo", "Membership"]

logger = logging.getLogger(__name__)


class BrokerInfo(NamedTuple):
    """A registered broker: its node id, the (gRPC) address it advertised, the principal it
    authenticates as to its peers ("" when it registered none) and its Kafka listener's
    advertised address ("" when it has no Kafka listener)."""

    node_id: int
    address: str
    principal: str = ""
    kafka_address: str = ""
    #: Its ``broker_rack`` ("" for none).
    rack: str = ""
    #: In a controlled shutdown (module docstring): live, but no candidate for leadership or
    #: for an ISR.
    shutting_down: bool = False


class Membership:
    """This server's registration and the brokers etcd lists; :meth:`register` first."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, node_id: int, address: str,
                 poll_interval_s: float, principal: str = "", kafka_address: str = "",
                 rack: str = "") -> None:
        self._session = session
        self._keys = keys
        self.node_id = node_id
        self.address = address
        #: Who this server is to its peers (its registration says so); "" for nobody.
        self.principal = principal
        #: Where Kafka clients reach this server (its registration says so); "" for nowhere.
        self.kafka_address = kafka_address
        #: The rack this server is on (its registration says so); "" for none.
        self.rack = rack
        #: The live brokers by node id, as last read from etcd (this server's own included
        #: from registration on).
        self.brokers: dict[int, BrokerInfo] = {}
        #: Whether this server's registration carries the controlled shutdown's mark.
        self.shutting_down = False
        self._registered = False
        self._poller = Poller(self.refresh, poll_interval_s, "stratalog-membership",
                              "broker list not refreshed")

    async def register(self) -> None:
        """Put this server's broker key under the session's lease, if the id is free.

        Raises:
            NodeIdInUseError: another live server holds the node id.
            what the etcd client raises when etcd does not answer.
        """
        client, key = self._session.client, self._keys.broker(self.node_id)
        value = self._registration()
        succeeded, responses = await client.transaction(
            compare=[client.transactions.create(key) == 0],
            success=[client.transactions.put(key, value, lease=self._session.lease_id)],
            failure=[client.transactions.get(key)],
        )
        if not succeeded:
            holder, ttl_s = "an unknown address", self._session.ttl_s
            if responses and responses[0]:
                stored, kv = responses[0][0]
                holder = str(decode_json(stored).get("address", holder))
                with contextlib.suppress(Exception):
                    info = await client.get_lease_info(kv.lease, keys=False)
                    ttl_s = max(0, info.TTL)
            raise NodeIdInUseError(self.node_id, holder, ttl_s)
        self.brokers[self.node_id] = self._own_info()
        self._registered = True
        logger.info("registered as broker %d at %s", self.node_id, self.address)

    def _registration(self) -> bytes:
        """This server's broker key's value (module docstring)."""
        registration: dict[str, object] = {"node_id": self.node_id, "address": self.address}
        if self.principal:
            registration["principal"] = self.principal
        if self.kafka_address:
            registration["kafka_address"] = self.kafka_address
        if self.rack:
            registration["rack"] = self.rack
        if self.shutting_down:
            registration["shutting_down"] = True
        return json.dumps(registration).encode()

    def _own_info(self) -> BrokerInfo:
        return BrokerInfo(self.node_id, self.address, self.principal, self.kafka_address,
                          self.rack, self.shutting_down)

    async def mark_shutting_down(self) -> bool:
        """Rewrite this server's registration with the controlled shutdown's mark (module
        docstring), under the same lease; whether it was written (False: not registered, or
        the key is gone). The mark stays until the lease goes: a shutdown is not undone.

        Raises what the etcd client raises when etcd does not answer.
        """
        self.shutting_down = True
        if not self._registered:
            return False
        client, key = self._session.client, self._keys.broker(self.node_id)
        succeeded, _ = await client.transaction(
            # Only over our own registration: a key that is gone (deleted by hand, a lease
            # lost) is register()'s to write again, not this put's.
            compare=[client.transactions.create(key) != 0],
            success=[client.transactions.put(key, self._registration(),
                                             lease=self._session.lease_id)],
            failure=[],
        )
        if succeeded:
            self.brokers[self.node_id] = self._own_info()
            logger.info("broker %d marked as shutting down in etcd: the controller moves its"
                        " leaderships away", self.node_id)
        return bool(succeeded)

    def shutting_down_brokers(self) -> set[int]:
        """The live brokers in a controlled shutdown, as last read."""
        return {node_id for node_id, broker in self.brokers.items() if broker.shutting_down}

    def leader_candidates(self) -> set[int]:
        """The live brokers that may be elected leader or join an ISR: not shutting down."""
        return {node_id for node_id, broker in self.brokers.items() if not broker.shutting_down}

    async def reregister(self) -> None:
        """After a new lease (session.py): register again; a taken id is logged, not fatal."""
        try:
            await self.register()
        except NodeIdInUseError as exc:
            logger.error("cannot register again after the lease expired: %s", exc)

    async def refresh(self) -> None:
        """Read the broker keys into :attr:`brokers` (raises what the etcd client raises)."""
        found = await self._session.client.get_prefix(self._keys.brokers_prefix)
        brokers = {}
        for kv in found:
            value = decode_json(kv.value)
            node_id, address = value.get("node_id"), value.get("address")
            principal = value.get("principal", "")
            kafka_address = value.get("kafka_address", "")
            rack = value.get("rack", "")
            shutting_down = value.get("shutting_down", False)
            if (isinstance(node_id, int) and isinstance(address, str)
                    and isinstance(principal, str) and isinstance(kafka_address, str)
                    and isinstance(rack, str) and isinstance(shutting_down, bool)):
                brokers[node_id] = BrokerInfo(node_id, address, principal, kafka_address, rack,
                                              shutting_down)
        if self._registered and self.node_id not in brokers and self._session.held():
            # Our key is gone under a live lease: deleted by hand, or etcd's keys wiped and
            # restored. Without it the controller counts this server dead: register again.
            logger.warning("broker %d's registration is gone from etcd while its lease lives:"
                           " registering again", self.node_id)
            await self.reregister()
            if self.node_id in self.brokers:
                brokers[self.node_id] = self.brokers[self.node_id]
        self.brokers = dict(sorted(brokers.items()))

    def start(self) -> None:
        """Start refreshing the view every ``poll_interval_s``, and at each :meth:`wake`."""
        self._poller.start()

    def wake(self) -> None:
        """Refresh the view now (the broker keys changed: a watch saw it)."""
        self._poller.wake()

    async def close(self) -> None:
        """Stop refreshing (the registration goes with the session's lease)."""
        await self._poller.stop()
