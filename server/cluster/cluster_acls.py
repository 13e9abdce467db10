"""The cluster's ACLs: one etcd key every server reads and writes, as Kafka keeps its ACLs in
the metadata log every broker follows (its controller's
``metadata/src/main/java/org/apache/kafka/controller/AclControlManager.java`` writes them there).

In cluster mode with ``authorizer = "acl"`` the ACLs are the cluster's, not a node's: they are
``<prefix>/acls``, whose value is an ``acls.json`` document (server/security/acl_store.py has
the format; the same bytes a single server keeps in its file). One key, so that a change of any
number of bindings is one atomic write and every server sees the whole set or the old one.

Updates (CreateAcls, DeleteAcls through any server; :meth:`EtcdAclStore.update`): the change
is applied to the set this server last read, and written by one transaction that succeeds only
if the key's mod revision is still the one read. When another server wrote meanwhile, the
transaction's failure branch returns the newer value, and the change is applied to that and
tried again (at most :data:`UPDATE_ATTEMPTS` times): two servers adding bindings at once both
keep theirs.

Propagation (:meth:`EtcdAclStore.refresh`, by a :class:`~.polling.Poller`): as soon as an
etcd watch on the key sees it change (watches.py), and every ``poll_interval_s``
(``cluster_poll_fallback_ms``, 5 s by default) in case the watch is broken, one transaction
compares the key's mod revision with the one this server holds, and returns the value only when
it moved, so an unchanged set costs a few bytes. A change made through one server is therefore
in force on every server within the watch's latency plus one etcd read of its commit (the writer
applies it before it answers); within one fallback interval while a watch is broken. While etcd
does not answer, the ACLs last read stay in force.

Size: the whole set travels in one etcd request, within etcd's ``--max-request-bytes`` (1.5 MiB
by default; about 7,000 bindings of 200 bytes). etcd refusing a larger one is answered as
RESOURCE_LIMIT_EXCEEDED naming that etcd setting.

A node's own ``acls.json`` when it joins (:meth:`EtcdAclStore.open`): etcd holds no ACLs key
yet -> the file's bindings are imported (a transaction that creates the key only if it still
does not exist: of two nodes importing at once, one wins and the other compares with it); etcd
holds the same set -> nothing to do; etcd holds another set -> the start is refused, naming both
counts and what to do. An imported or matching file is then renamed ``acls.json.imported``: it
is no longer in force, and a restart must not compare it with ACLs changed since.

A value that does not decode (written by hand with etcdctl) refuses the start; found by a poll,
it is logged and the ACLs in force stay as they were (dropping an ACL would silently open or
close access).

Concurrency: event-loop only; the authorizer serialises :meth:`update` calls on one server, the
transaction's compare serialises them across servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING

import aetcd

from stratalog.server.security.acl_store import AclChange, AclStore, decode_acls, encode_acls
from stratalog.server.security.acls import AclBinding
from stratalog.server.security.errors import AclLimitError, SecurityConfigError

from .errors import ClusterConfigError, CoordinationUnavailableError
from .polling import Poller
from .watches import KeyWatch

if TYPE_CHECKING:
    from .layout import ClusterKeys
    from .session import EtcdSession

__all__ = ["UPDATE_ATTEMPTS", "EtcdAclStore"]

logger = logging.getLogger(__name__)

#: Transactions one update tries before it gives up (each lost only to another server's
#: write of the ACLs in between): COORDINATION_UNAVAILABLE, retriable.
UPDATE_ATTEMPTS = 8

_TOO_LARGE = "request is too large"


class EtcdAclStore:
    """The cluster's ACLs as this server last read or wrote them, and the poll that follows
    etcd's key: an :class:`~stratalog.server.security.acl_store.AclStorage`.

    Holds ``bindings``, the key's mod revision they were read at (0: no key), and ``revision``,
    which grows by one whenever ``bindings`` change. Crash behaviour: nothing is kept on this
    server; etcd holds the set. Concurrency: see the module docstring.
    """

    def __init__(self, session: EtcdSession, keys: ClusterKeys, poll_interval_s: float,
                 bindings: Sequence[AclBinding] = (), mod_revision: int = 0, *,
                 watch: bool = True) -> None:
        self._session = session
        self._key = keys.acls
        self.bindings: tuple[AclBinding, ...] = tuple(bindings)
        self.revision = 0
        self._mod_revision = mod_revision
        self._poller = Poller(self.refresh, poll_interval_s, "stratalog-cluster-acls",
                              "cluster ACLs not refreshed")
        #: The watch that wakes the poll when the key changes; None without watches.
        self.watch = KeyWatch(session, self._key, [self._poller.wake],
                              "stratalog-watch-acls") if watch else None
        self._bad_value_logged_at = -1  # the mod revision of an undecodable value, logged once

    @classmethod
    async def open(cls, session: EtcdSession, keys: ClusterKeys, poll_interval_s: float,
                   local: AclStore, executor: Executor | None = None, *,
                   watch: bool = True) -> EtcdAclStore:
        """Read the cluster's ACLs, after importing or checking this node's ``acls.json``
        (module docstring). Does not start the poll nor, with ``watch``, the watch
        (:meth:`start`).

        Raises:
            ClusterConfigError: the node's file holds other ACLs than etcd, or etcd's value does
                not decode.
            CoordinationUnavailableError: etcd did not answer.
        """
        store = cls(session, keys, poll_interval_s, watch=watch)
        key_text = store._key.decode()
        try:
            await store.refresh(strict=True)
            if local.bindings and not store._mod_revision:
                client = session.client
                succeeded, _ = await client.transaction(
                    compare=[client.transactions.create(store._key) == 0],
                    success=[client.transactions.put(store._key, encode_acls(local.bindings))],
                    failure=[],
                )
                if succeeded:
                    logger.info("imported %d ACL bindings from %s into etcd (%s): the"
                                " cluster's ACLs", len(local.bindings), local.path, key_text)
                await store.refresh(strict=True)
        except (TimeoutError, aetcd.ClientError, OSError) as exc:
            raise CoordinationUnavailableError(
                f"cannot read the cluster's ACLs ({key_text}) from etcd"
                f" {session.endpoint}: {exc or type(exc).__name__}") from None
        except SecurityConfigError as exc:
            raise ClusterConfigError(
                f"{exc}; fix the key with etcdctl (docs/security.md, \"ACLs in a cluster\")"
            ) from None
        if local.bindings:
            if set(local.bindings) != set(store.bindings):
                raise ClusterConfigError(
                    f"{local.path} holds {len(local.bindings)} ACL bindings and the cluster's"
                    f" ACLs in etcd ({key_text}) hold {len(store.bindings)} others: in cluster"
                    " mode only etcd's apply. Add the ones you need through any cluster member"
                    f" (stratalog acls add), then move {local.path} away"
                )
            loop = asyncio.get_running_loop()
            try:
                moved = await loop.run_in_executor(executor, local.set_aside)
            except OSError as exc:
                raise ClusterConfigError(
                    f"cannot rename {local.path} after its ACLs were found in etcd: {exc}"
                ) from None
            logger.info("%s is now %s: the cluster's ACLs are in etcd (%s)", local.path,
                        moved, key_text)
        logger.info("cluster ACLs: %d bindings (%s)", len(store.bindings), key_text)
        return store

    def start(self) -> None:
        """Follow etcd's key: every poll interval, and when the watch sees it change."""
        self._poller.start()
        if self.watch is not None:
            self.watch.start()

    async def close(self) -> None:
        if self.watch is not None:
            await self.watch.stop()
        await self._poller.stop()

    async def refresh(self, *, strict: bool = False) -> None:
        """Read the key if its mod revision moved since the last read, and take its value.

        Raises what the etcd client raises when etcd does not answer (nothing changes then);
        with ``strict``, SecurityConfigError for a value that does not decode (otherwise it
        is logged and the ACLs in force stay).
        """
        # A plain get, not a transaction comparing the mod revision: etcd 3.5.0-3.5.4 panics
        # when a read-only transaction's call is cancelled (etcd-io/etcd#14110), which a
        # server's stop or a timeout does.
        found = await self._session.client.get(self._key)
        if found is None:
            if self._mod_revision != 0:
                self._take([], strict=strict)
        elif found.mod_revision != self._mod_revision:
            self._take([(found.value, found)], strict=strict)

    def _take(self, found: list[tuple[bytes, object]], *, strict: bool) -> None:
        """Take a transaction's get of the key: ``[(value, meta)]``, or ``[]`` (no key)."""
        if not found:
            self._set((), 0)
            return
        value, meta = found[0]
        mod_revision = int(meta.mod_revision)  # type: ignore[attr-defined]
        if mod_revision < self._mod_revision:
            # A poll's answer that arrived after this server's own newer write: older, so
            # taking it would briefly undo that write here (a key's mod revision only grows).
            return
        try:
            bindings = decode_acls(value, self._key.decode(), "etcd key")
        except SecurityConfigError:
            if strict:
                raise
            if self._bad_value_logged_at != mod_revision:
                logger.exception("the cluster's ACLs in etcd do not decode; the ACLs in force"
                                 " stay as they were until the key is fixed")
                self._bad_value_logged_at = mod_revision
            return
        self._set(tuple(bindings), mod_revision)

    def _set(self, bindings: tuple[AclBinding, ...], mod_revision: int) -> None:
        self._mod_revision = mod_revision
        if bindings != self.bindings:
            self.bindings = bindings
            self.revision += 1

    async def update(self, change: AclChange, executor: Executor | None = None) -> None:
        """:meth:`~stratalog.server.security.acl_store.AclStorage.update` through etcd
        (module docstring: a transaction on the mod revision, retried on a concurrent write).

        Raises:
            AclLimitError: etcd refused the set as larger than its --max-request-bytes (or
                ``change`` refused it).
            CoordinationUnavailableError: etcd did not answer, or the ACLs changed under every
                one of :data:`UPDATE_ATTEMPTS` attempts; the message says whether the update
                may have been written.
        """
        del executor  # the writes are etcd calls, on the event loop
        for _ in range(UPDATE_ATTEMPTS):
            updated = change(self.bindings)
            if updated is None:
                return
            value = encode_acls(updated)
            client = self._session.client
            try:
                succeeded, responses = await client.transaction(
                    compare=[client.transactions.mod(self._key) == self._mod_revision],
                    success=[client.transactions.put(self._key, value),
                             client.transactions.get(self._key)],
                    failure=[client.transactions.get(self._key)],
                )
            except (TimeoutError, aetcd.ClientError, OSError) as exc:
                text = str(exc) or type(exc).__name__
                if _TOO_LARGE in text:
                    raise AclLimitError(
                        f"the cluster's ACLs would be {len(value)} bytes in etcd, more than"
                        f" etcd accepts in one request ({text}; etcd's --max-request-bytes)",
                        limit="acl_bindings_max",
                    ) from None
                with contextlib.suppress(Exception):
                    await self.refresh()  # the write may have happened: show what etcd holds
                raise CoordinationUnavailableError(
                    f"the ACL update needs etcd, which did not answer ({self._session.endpoint}:"
                    f" {text}); it may or may not have been written: describe the ACLs, then"
                    " retry"
                ) from None
            self._take(responses[-1] if responses else [], strict=False)
            if succeeded:
                return
        raise CoordinationUnavailableError(
            f"the cluster's ACLs changed {UPDATE_ATTEMPTS} times while this update was tried"
            " (other servers' updates); nothing was written: retry"
        )
