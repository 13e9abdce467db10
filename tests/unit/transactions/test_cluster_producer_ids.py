"""Cluster producer ids: the node id above a server's 40-bit counter."""

from __future__ import annotations

import pytest

from stratalog.server.settings import NODE_ID_MAX
from stratalog.server.transactions.errors import ProducerIdsExhaustedError
from stratalog.server.transactions.producer_ids import LOCAL_ID_BITS, cluster_producer_id


def test_cluster_producer_ids_carry_the_node_id() -> None:
    assert cluster_producer_id(0, 5) == 5  # node 0: the single-server ids
    assert cluster_producer_id(3, 5) == 3 << 40 | 5
    # The largest node id and counter give the largest int64, no more.
    assert cluster_producer_id(NODE_ID_MAX, 2**LOCAL_ID_BITS - 1) == 2**63 - 1
    with pytest.raises(ProducerIdsExhaustedError, match="node 3"):
        cluster_producer_id(3, 1 << LOCAL_ID_BITS)
