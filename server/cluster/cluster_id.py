"""The cluster's id (Kafka's ``cluster.id``): made once by the first server of a cluster, kept in
etcd, the same on every server.

Kafka clients read it from Metadata and DescribeCluster and take servers that answer different
ids for members of different clusters; each server's meta.properties has an id of its own, so
a cluster answers the one in etcd::

    <prefix>/cluster_id     Kafka's Uuid as text (22 characters of URL-safe base64, as
                            meta.properties' cluster.id and Kafka's Uuid.toString); no lease,
                            never changed once written

The first server to join writes it with a transaction that succeeds only if the key does not
exist (create revision 0), and reads the winner's value in the same transaction when it lost: of
servers starting at once, one id wins and all of them answer it. Nothing deletes the key:
an id outlives every server, as Kafka's outlives every broker of its cluster.

Crash behaviour: the write is one etcd transaction; a server that dies before or after it
leaves either no key (the next server writes one) or the key.

Concurrency: event-loop only; called once per server start (node.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aetcd

from stratalog.server.storage.meta_properties import (
    random_kafka_uuid,
    uuid_from_kafka_string,
    uuid_to_kafka_string,
)

from .errors import ClusterConfigError, CoordinationUnavailableError

if TYPE_CHECKING:
    from .layout import ClusterKeys
    from .session import EtcdSession

__all__ = ["ensure_cluster_id"]

logger = logging.getLogger(__name__)


async def ensure_cluster_id(session: EtcdSession, keys: ClusterKeys,
                            candidate: str | None = None) -> str:
    """The cluster's id: etcd's, or ``candidate`` (a new random Kafka Uuid unless given)
    written now if the cluster has none yet.

    Raises:
        ClusterConfigError: etcd's value is not a Kafka Uuid (names the key).
        CoordinationUnavailableError: etcd did not answer.
    """
    client = session.client
    key = keys.cluster_id
    proposed = candidate if candidate is not None else uuid_to_kafka_string(random_kafka_uuid())
    try:
        created, responses = await client.transaction(
            compare=[client.transactions.create(key) == 0],
            success=[client.transactions.put(key, proposed.encode())],
            failure=[client.transactions.get(key)],
        )
    except (TimeoutError, aetcd.ClientError, OSError) as exc:
        raise CoordinationUnavailableError(
            f"cannot read or write the cluster id ({key.decode()}) in etcd"
            f" {session.endpoint}: {exc or type(exc).__name__}") from None
    if created:
        logger.info("the cluster's id is %s (made by this server, the first of the cluster;"
                    " %s)", proposed, key.decode())
        return proposed
    stored = responses[0][0][0] if responses and responses[0] else b""
    return _decode(stored, key.decode())


def _decode(value: bytes, key: str) -> str:
    try:
        text = value.decode("ascii")
        uuid_from_kafka_string(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ClusterConfigError(
            f"etcd's {key} is {value[:40]!r}, not a cluster id (a Kafka Uuid: 22 characters of"
            f" URL-safe base64): {exc}; delete the key with etcdctl and restart a server to"
            " make a new one") from None
    return text
