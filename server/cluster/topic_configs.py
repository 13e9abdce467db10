"""A topic's config overrides in cluster mode: kept in etcd with its assignment, applied by
every server that holds the topic.

A single server keeps a topic's overrides in its catalog (LogManager.alter_topic_configs). In a
cluster the overrides are part of the topic's assignment (``<prefix>/topics/<t>``,
partition_state.py's TopicAssignment), written by CreateTopic; an alteration, on whichever
server receives it, rewrites them there, as ZooKeeper-era Kafka wrote ``/config/topics/<t>``
from any broker (``core/src/main/scala/kafka/zk/AdminZkClient.scala``: ``changeTopicConfig``)
and each broker's ``TopicConfigHandler`` applied it::

    read <prefix>/topics/<t> (value, mod revision)     UnknownTopicOrPartitionError if none
    new overrides = old - delete + set                 deleting an unknown name, or a name both
                                                       set and deleted: InvalidConfigError
    check them as CreateTopic does                     LogManager.check_new_topic: both paths
                                                       refuse the same values
    one txn  if  mod_revision(<prefix>/topics/<t>) == the one read
             then put the assignment with the new overrides
             else read again and retry (at most ALTER_ATTEMPTS_MAX: an alteration racing
                  another, or a partition count change, is redone on the new value)

Every server applies what its cluster view shows (:func:`apply_overrides`, called by the
replica roles whenever a topic of the view changed): the local catalog's overrides become the
assignment's, so that rolls, retention, compaction and validation follow them on every replica.
A server that was down when the configs changed applies them when it sees its first view.

Crash behaviour: the etcd write is the alteration (atomic); a server that dies before applying
it applies it on its next start. Concurrency: :func:`alter_overrides` on the event loop;
:func:`apply_overrides` blocking (in the executor, as every LogManager write).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from stratalog.server.storage.config import TOPIC_CONFIG_NAMES
from stratalog.server.storage.errors import InvalidConfigError, UnknownTopicOrPartitionError
from stratalog.server.storage.log_manager import SERVER_WRITTEN_TOPICS

from .partition_state import TopicAssignment

if TYPE_CHECKING:
    from stratalog.server.storage.log_manager import LogManager

    from .node import ClusterNode

__all__ = ["ALTER_ATTEMPTS_MAX", "alter_overrides", "apply_overrides", "new_overrides"]

logger = logging.getLogger(__name__)

#: How many times an alteration that lost a race on the topic key is redone before it gives up
#: (each loss means another change of the same topic was written in between).
ALTER_ATTEMPTS_MAX = 5


def new_overrides(log_manager: LogManager, name: str, current: Mapping[str, str],
                  set: Mapping[str, str], delete: Iterable[str]) -> dict[str, str]:
    """``current`` with ``delete`` removed and ``set`` applied, checked and in Kafka's
    canonical form, as LogManager.alter_topic_configs computes them on a single server.

    Raises:
        InvalidConfigError: an unknown name deleted, a name both set and deleted, a bad value.
    """
    delete_names = list(delete)
    for key in delete_names:
        if key not in TOPIC_CONFIG_NAMES:
            raise InvalidConfigError(
                f"cannot delete unknown config {key!r} of topic {name}; known configs: "
                + ", ".join(TOPIC_CONFIG_NAMES))
        if key in set:
            raise InvalidConfigError(f"config {key!r} of topic {name} is both set and deleted")
    overrides = {key: value for key, value in current.items() if key not in delete_names}
    overrides.update(set)
    return log_manager.check_new_topic(name, 1, overrides,
                                       internal=name in SERVER_WRITTEN_TOPICS)


async def alter_overrides(node: ClusterNode, log_manager: LogManager, name: str,
                          set: Mapping[str, str], delete: Iterable[str], *,
                          validate_only: bool = False) -> TopicAssignment:
    """Rewrite topic ``name``'s overrides in etcd (module docstring); the assignment as
    written (or as it would be, ``validate_only``). Waits for etcd without a bound of its own:
    the caller bounds it and maps etcd's errors.

    Raises:
        UnknownTopicOrPartitionError: etcd has no such topic.
        InvalidConfigError: as :func:`new_overrides`; or the topic changed under every one of
            :data:`ALTER_ATTEMPTS_MAX` attempts.
    """
    client, key = node.session.client, node.keys.topic(name)
    delete_names = list(delete)
    for _ in range(ALTER_ATTEMPTS_MAX):
        stored = await client.get(key)
        assignment = TopicAssignment.decode(stored.value) if stored is not None else None
        if stored is None or assignment is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        altered = dataclasses.replace(  # replicas and reassignments kept as they are
            assignment,
            configs=new_overrides(log_manager, name, assignment.configs, set, delete_names))
        if validate_only or altered == assignment:
            return altered
        succeeded, _ = await client.transaction(
            compare=[client.transactions.mod(key) == stored.mod_revision],
            success=[client.transactions.put(key, altered.encode())],
            failure=[],
        )
        if succeeded:
            logger.info("altered configs of topic %s: now %s", name, altered.configs)
            return altered
    raise InvalidConfigError(
        f"configs of topic {name} not altered: the topic changed in etcd under each of"
        f" {ALTER_ATTEMPTS_MAX} attempts; try again")


def apply_overrides(log_manager: LogManager, name: str, overrides: Mapping[str, str]) -> None:
    """Blocking: make this server's overrides of topic ``name`` the cluster's ``overrides``
    (those the storage knows); nothing when they are already, or the topic is not held here.
    A value the local checks refuse (a server of another version) is logged and skipped: the
    others still apply."""
    try:
        local = log_manager.describe_topic(name)
    except UnknownTopicOrPartitionError:
        return
    wanted = {key: value for key, value in overrides.items() if key in TOPIC_CONFIG_NAMES}
    stale = [key for key in local.overridden_configs if key not in wanted]
    changed = {key: value for key, value in wanted.items()
               if key not in local.overridden_configs or local.configs.get(key) != value}
    if not stale and not changed:
        return
    try:
        log_manager.alter_topic_configs(name, changed, stale)
    except InvalidConfigError as exc:
        logger.error("topic %s: the cluster's configs %s do not apply here: %s", name,
                     dict(overrides), exc)
