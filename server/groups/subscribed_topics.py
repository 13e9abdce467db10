"""The topics a classic group's members subscribe to, read from their JoinGroup metadata.

Kafka's ``ClassicGroup.computeSubscribedTopics`` and ``isSubscribedToTopic``
(``group-coordinator/src/main/java/org/apache/kafka/coordinator/group/classic/ClassicGroup.java``):
OffsetDelete refuses a topic the group uses. Only a group of protocol type ``"consumer"`` has
metadata the coordinator can read: each member's metadata for the group's chosen protocol is a
version-prefixed ConsumerProtocolSubscription (records/consumer_offsets.py's schema), read as
version 0, the prefix of every version (its first field is the topic list)::

    version  int16           >= 0 (below: not a subscription)
    topics   [string]        what the member subscribes to
    ...                      later fields (user data, owned partitions, ...): not read

The answer is None when the coordinator cannot know: no protocol chosen yet, another protocol
type, or a member's metadata that does not decode (logged). Then a ``"consumer"`` group counts
as subscribed to every topic, another as subscribed to none, as Kafka decides.

Pure functions; no state.
"""

from __future__ import annotations

import logging

from stratalog.records.consumer_offsets import CONSUMER_PROTOCOL_SUBSCRIPTION
from stratalog.records.errors import CorruptMessageError

from .classic_group import ClassicGroup

__all__ = ["CONSUMER_PROTOCOL_TYPE", "is_subscribed_to_topic", "subscribed_topics"]

logger = logging.getLogger(__name__)

#: The protocol type of Kafka's consumers (``ConsumerProtocol.PROTOCOL_TYPE``).
CONSUMER_PROTOCOL_TYPE = "consumer"
#: The version prefix of the consumer protocol's messages: a big-endian int16.
_VERSION_BYTES = 2


def subscribed_topics(group: ClassicGroup) -> frozenset[str] | None:
    """Every topic a member of ``group`` subscribes to, or None when that cannot be known
    (module docstring). O(members × topics)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None
    if not group.members:
        return frozenset()
    if group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        data = member.metadata(group.protocol_name)
        problem = None
        if len(data) < _VERSION_BYTES:
            problem = f"{len(data)} bytes, no version"
        elif int.from_bytes(data[:_VERSION_BYTES], "big", signed=True) < 0:
            problem = "a negative version"
        else:
            try:
                values, _ = CONSUMER_PROTOCOL_SUBSCRIPTION.decode(data, 0, _VERSION_BYTES)
            except CorruptMessageError as exc:
                problem = str(exc)
        if problem is not None:
            logger.warning("group %s: member %s's %s metadata is not a consumer subscription"
                           " (%s): the coordinator does not know the group's topics",
                           group.group_id, member.member_id, group.protocol_name, problem)
            return None
        topics.update(values["topics"])
    return frozenset(topics)


def is_subscribed_to_topic(group: ClassicGroup, topic: str) -> bool:
    """Whether ``group`` uses ``topic`` (module docstring: the unknown case)."""
    topics = subscribed_topics(group)
    if topics is None:
        return group.protocol_type == CONSUMER_PROTOCOL_TYPE
    return topic in topics
