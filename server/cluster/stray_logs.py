"""Stray logs: a replicated topic's local logs that no partition assigned to this server needs
any more, found and deleted at start and whenever the cluster view changes.

A topic deleted while this server was down never leaves its view while it runs (it was never
in it), so the replica roles (replica_roles.py), which delete a topic when it leaves the view,
never delete it: its logs would stay on disk for ever. Kafka has the same problem and solves it
in ``LogManager`` (KAFKA-14616: ``findStrayReplicas`` in
``core/src/main/scala/kafka/log/LogManager.scala``, called as the broker applies its metadata):
a log whose topic id the metadata does not know is *stray*, renamed with a ``-stray`` suffix and
deleted. Our topics have no ids, and a server may hold topics the cluster never knew (created
before it joined one, served unreplicated: docs/cluster.md), which must never be taken for
stray. So this module remembers which local topics were the cluster's::

    <first log dir>/cluster-replicated-topics.json
        {"version": 1, "controller_epoch": 7, "topics": ["orders", "payments"]}

* **Recorded**: a topic the view has with a partition assigned to this server (the replica
  roles create its log). ``controller_epoch``: the highest controller epoch seen.
* **Stray**: a recorded topic this server holds that the view does not have, or whose
  partitions are all assigned elsewhere now. Its logs are deleted through the serving layer
  (:meth:`ReplicaEvents.delete_partitions`: appends in flight finish first; the storage renames
  the partition directories to ``-delete`` and removes them in the background, Kafka's
  ``-stray`` then delete in one step), it is dropped from the record, and each deletion is
  logged at WARNING with the topic and why.
* **Never stray**: a topic the record does not name (a local topic of the single-server days;
  a replicated topic created by a server of an older version is recorded at its first start
  with this one, when the view has it), and a topic with a partition assigned here. A partition
  moved away from a topic that keeps another partition here is not deleted: the storage holds
  topics whole (docs/cluster.md, "Differences").
* **Only on a loaded view**: a pass runs after the view was read from etcd (at start, after the
  replica roles applied it; then as a view listener, after theirs), never on an empty view
  that was not read. If etcd's controller epoch is *below* the recorded one, the etcd is not
  the one the record was made with (wiped, restored from an old backup, another cluster on
  the same prefix): nothing is deleted, and the server says so at ERROR on every pass.

Crash behaviour: the record is written atomically (storage/durable.py's ``atomic_write``: a
reader sees the old or the new file) after the logs it adds exist and before it forgets a
deleted topic's name only once the deletion was done; a crash in between leaves a recorded
topic that is gone (dropped at the next pass) or a created topic not yet recorded (recorded at
the next pass while the view has it; if it is deleted from etcd before that, its logs stay:
a leak, never a loss). A record that cannot be read is logged at ERROR and treated as empty:
nothing is deleted, and it is rewritten with the topics assigned here.

Concurrency: event-loop only; passes run one at a time (a lock); the file is read and written
in the executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aetcd

from stratalog.server.storage.durable import atomic_write
from stratalog.server.storage.errors import UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from stratalog.server.storage.log_manager import LogManager

    from .cluster_view import PartitionKey
    from .node import ClusterNode
    from .replica import ReplicaEvents

__all__ = ["RECORD_FILE_NAME", "StrayLogs", "stray_topics"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The record's file name, in the first log directory.
RECORD_FILE_NAME = "cluster-replicated-topics.json"
_VERSION = 1


def stray_topics(recorded: set[str], held: set[str],
                 assigned_here: dict[str, bool]) -> dict[str, str]:
    """The recorded topics held here that are stray, each with why (module docstring).
    ``assigned_here``: every topic of the view -> whether a partition of it is assigned to this
    server."""
    stray = {}
    for topic in sorted(recorded & held):
        if topic not in assigned_here:
            stray[topic] = "it is not in the cluster any more (deleted while this server was away)"
        elif not assigned_here[topic]:
            stray[topic] = "none of its partitions is assigned to this server any more"
    return stray


class StrayLogs:
    """Finds and deletes this server's stray logs (module docstring); :meth:`start` once the
    replica roles applied the view, :meth:`close` at shutdown."""

    def __init__(self, node: ClusterNode, log_manager: LogManager, events: ReplicaEvents,
                 executor: Executor) -> None:
        self._node = node
        self._log_manager = log_manager
        self._events = events
        self._executor = executor
        self._path = Path(log_manager.log_dirs[0]) / RECORD_FILE_NAME
        self._lock = asyncio.Lock()
        self._closed = False

    async def start(self) -> None:
        """A pass on the view as loaded, then one after every view change. A failed pass (the
        record not written: a disk error) is logged; it does not stop the server."""
        try:
            await self.maybe_run_pass()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("stray logs: the pass at start failed; the next change of the"
                             " topics tries again")
        self._node.view.add_listener(self._on_view_change)

    def close(self) -> None:
        """No pass from now on (the server stops)."""
        self._closed = True

    async def _on_view_change(self, changed_topics: set[str],
                              changed_partitions: set[PartitionKey]) -> None:
        if changed_topics:
            await self.maybe_run_pass()

    async def maybe_run_pass(self) -> list[str]:
        """Record the topics assigned here, delete the stray ones; the topics deleted."""
        async with self._lock:
            if self._closed:
                return []
            node_id = self._node.node_id
            view = self._node.view.topics
            try:
                # The view is read; the epoch is read after it: a newer etcd state, never an
                # older one, so a view of the right etcd always passes the check below.
                stored = await self._node.session.client.get(self._node.keys.controller_epoch)
            except (TimeoutError, aetcd.ClientError, OSError) as exc:  # the next change retries
                logger.info("stray logs not looked for: etcd did not answer (%s)", exc)
                return []
            epoch = int(stored.value or b"0") if stored is not None else 0
            assigned_here = {topic: any(node_id in nodes for nodes in a.replicas.values())
                             for topic, a in view.items()}
            recorded, recorded_epoch = await self._blocking(self._read)
            held = {d.name for d in await self._blocking(self._log_manager.list_topics)}
            if epoch < recorded_epoch:
                logger.error(
                    "stray logs not deleted: etcd's controller epoch %d is below %d, the one this"
                    " server recorded in %s: this etcd is not the one its topics were"
                    " replicated with (wiped, restored, or another cluster on cluster_prefix"
                    " %r?)", epoch, recorded_epoch, self._path, self._node.keys.prefix)
                return []
            stray = stray_topics(recorded, held, assigned_here)
            keep = {t for t in recorded if t in held and t not in stray}
            keep |= {t for t, here in assigned_here.items() if here and t in held}
            new_epoch = max(epoch, recorded_epoch)
            # The names of topics about to be deleted stay recorded until they are.
            if keep | set(stray) != recorded or new_epoch != recorded_epoch:
                await self._blocking(self._write, keep | set(stray), new_epoch)
            deleted = []
            for topic, why in stray.items():
                logger.warning("topic %s: deleting its local logs (stray: %s)", topic, why)
                with contextlib.suppress(UnknownTopicOrPartitionError):
                    await self._events.delete_partitions(topic)
                deleted.append(topic)
            if deleted:
                await self._blocking(self._write, keep, new_epoch)
            return deleted

    # ---------------------------------------------------------------- the record

    def _read(self) -> tuple[set[str], int]:
        """Blocking: the recorded topics and controller epoch (empty, 0 without a file)."""
        try:
            decoded = json.loads(self._path.read_bytes())
        except FileNotFoundError:
            return set(), 0
        except (OSError, ValueError) as exc:
            logger.error("%s cannot be read (%s): no stray log is deleted; it is rewritten"
                         " with the topics assigned here", self._path, exc)
            return set(), 0
        topics, epoch = decoded.get("topics"), decoded.get("controller_epoch", 0)
        if (decoded.get("version") != _VERSION or not isinstance(topics, list)
                or not all(isinstance(t, str) for t in topics) or not isinstance(epoch, int)):
            logger.error("%s is not a record of version %d: no stray log is deleted; it is"
                         " rewritten with the topics assigned here", self._path, _VERSION)
            return set(), 0
        return set(topics), epoch

    def _write(self, topics: set[str], controller_epoch: int) -> None:
        """Blocking: replace the record (atomically, durably)."""
        atomic_write(self._path, json.dumps({
            "version": _VERSION, "controller_epoch": controller_epoch,
            "topics": sorted(topics)}).encode())

    async def _blocking(self, function: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, function, *args)
