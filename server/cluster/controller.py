"""The controller election, and the controller epoch that will fence a deposed controller.

The recipe (etcd's election, written with a transaction so that the epoch moves with it)::

    campaign, when <prefix>/controller is absent:
        read <prefix>/controller_epoch: E (0 if absent), at mod revision R (0 if absent)
        txn  if   create_revision(<prefix>/controller) == 0       nobody is controller
             and  mod_revision(<prefix>/controller_epoch) == R     nobody won in between
             then put <prefix>/controller = {"node_id": me, "epoch": E+1}  under my lease
                  put <prefix>/controller_epoch = E+1                    (no lease)
             else get <prefix>/controller                          who won
        a failed txn is a lost race: the winner is read, nothing retried

So every election increments the epoch exactly once, and the key names the epoch it won. The
controller key lives under the winner's lease: when the controller dies (or is frozen, or cut
off from etcd) for ``cluster_session_timeout_ms``, etcd deletes the key, and every other server
campaigns as soon as its watch of the key sees the deletion (watches.py; its poll, every
``poll_interval_s``, if the watch is broken). A takeover takes the session timeout plus the
watch's latency.

A server is controller (:attr:`ControllerElection.state` ``is_self``) while the key names it and
its lease is held as far as it knows (session.py's :meth:`held`): a controller cut off from etcd
stops acting as one a TTL after its last confirmed renewal, which is no later than etcd expires
the key, so two servers never both believe they control with the same epoch. What it does as
controller (leader_election.py, started at once through :meth:`on_elected`) writes etcd with
transactions that compare the epoch, so a deposed controller's writes fail.

Concurrency: event-loop only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from .layout import ClusterKeys, decode_json
from .polling import Poller

if TYPE_CHECKING:
    from .session import EtcdSession

__all__ = ["NO_CONTROLLER", "ControllerElection", "ControllerState"]

logger = logging.getLogger(__name__)


class ControllerState(NamedTuple):
    """Who is controller and since which election: node id -1 and epoch 0 when none is known."""

    node_id: int
    epoch: int


NO_CONTROLLER = ControllerState(-1, 0)


class ControllerElection:
    """This server's part in the controller election; :meth:`start` after registering."""

    def __init__(self, session: EtcdSession, keys: ClusterKeys, node_id: int,
                 poll_interval_s: float) -> None:
        self._session = session
        self._keys = keys
        self.node_id = node_id
        #: The controller as last read from etcd (or won here).
        self.known = NO_CONTROLLER
        # The lease the controller key was under when it last named this server: controller
        # only while that is the session's lease now (a lease that expired and was replaced
        # took the key with it, whatever ``known`` still says).
        self._key_lease = 0
        self._poller = Poller(self._check, poll_interval_s, "stratalog-controller",
                              "controller not checked")
        self._on_elected: list[Callable[[], None]] = []

    def on_elected(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (event-loop, not awaited) each time this server wins an election:
        the controller's duties start at once (leader_election.py)."""
        self._on_elected.append(callback)

    @property
    def is_controller(self) -> bool:
        """Whether this server is controller now (module docstring)."""
        return (self.known.node_id == self.node_id and self._session.held()
                and self._key_lease == self._session.lease_id)

    @property
    def state(self) -> ControllerState:
        """The controller to tell clients about (this server's view)."""
        if self.known.node_id == self.node_id and not self.is_controller:
            return NO_CONTROLLER  # no longer sure of its own lease: not controller
        return self.known

    async def maybe_campaign(self) -> ControllerState:
        """Read the controller key; campaign if it is absent. Returns the controller now.

        Raises what the etcd client raises when etcd does not answer.
        """
        client, keys = self._session.client, self._keys
        current = await client.get(keys.controller)
        if current is not None:
            self.known = self._decode(current.value)
            self._key_lease = current.lease
            return self.known
        epoch_kv = await client.get(keys.controller_epoch)
        epoch, revision = 0, 0
        if epoch_kv is not None:
            epoch, revision = int(epoch_kv.value or b"0"), epoch_kv.mod_revision
        new_epoch = epoch + 1
        value = json.dumps({"node_id": self.node_id, "epoch": new_epoch}).encode()
        succeeded, responses = await client.transaction(
            compare=[
                client.transactions.create(keys.controller) == 0,
                client.transactions.mod(keys.controller_epoch) == revision,
            ],
            success=[
                client.transactions.put(keys.controller, value, lease=self._session.lease_id),
                client.transactions.put(keys.controller_epoch, str(new_epoch).encode()),
            ],
            failure=[client.transactions.get(keys.controller)],
        )
        if succeeded:
            self.known = ControllerState(self.node_id, new_epoch)
            self._key_lease = self._session.lease_id
            logger.info("elected controller, epoch %d", new_epoch)
            for callback in self._on_elected:
                callback()
        elif responses and responses[0]:
            stored, kv = responses[0][0]
            self.known = self._decode(stored)
            self._key_lease = kv.lease
        else:
            self.known = NO_CONTROLLER  # the epoch moved but the winner is gone already
        return self.known

    @staticmethod
    def _decode(value: bytes) -> ControllerState:
        decoded = decode_json(value)
        node_id, epoch = decoded.get("node_id"), decoded.get("epoch")
        if isinstance(node_id, int) and isinstance(epoch, int):
            return ControllerState(node_id, epoch)
        return NO_CONTROLLER

    def start(self) -> None:
        """Campaign now and whenever the controller key is found absent."""
        self._poller.start()

    def wake(self) -> None:
        """Check the controller key now (a watch saw it change: node.py, watches.py)."""
        self._poller.wake()

    async def _check(self) -> None:
        previous = self.known
        await self.maybe_campaign()
        if self.known != previous and self.known.node_id != self.node_id:
            logger.info("controller is node %d, epoch %d", *self.known)

    async def close(self) -> None:
        """Stop campaigning (the controller key goes with the session's lease)."""
        await self._poller.stop()
