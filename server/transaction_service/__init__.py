"""Transactions served in a cluster: the I/O around the transaction coordinator
(server/transactions/) when its state is replicated (docs/cluster.md, "Transactions").

Kafka's ``TransactionCoordinator`` with ``TransactionStateManager`` over ``__transaction_state``
partitions and ``TransactionMarkerChannelManager``, for a cluster of servers:

* :mod:`.cluster_transactions`: :class:`ClusterTransactions`, what both front ends call in
  cluster mode: the coordinators of the state partitions this server leads (made on leadership,
  loaded after the high watermark, writing acks=all), FindCoordinator's answer.
* :mod:`.marker_channel`: markers queued per partition, sent in order, retried until written.
* :mod:`.leader_calls`: the coordinator's calls to partitions' leaders (WriteTxnMarkers,
  AllowTxnAppends), local or over the peer channels, and the leader's side of both.
* :mod:`.verified_partitions`: the producers a leader lets append transactional batches
  (KIP-890 part 1's verification, told by the coordinator).
* :mod:`.append_verifier`: a leader not told asks the producer's coordinator before the
  append (bounded, coalesced, with a timeout).
* :mod:`.opening`: the coordinator a server starts with (the local one, wrapped by
  :class:`ClusterTransactions` in cluster mode) and its config from the settings.

On one server none of this runs: the single coordinator writes its own log and markers in-process.
Below both front ends: it never imports server/rpc, server/kafka or app.py (import-linter).
"""

from __future__ import annotations

from .append_verifier import AppendVerifier
from .cluster_transactions import ClusterTransactions
from .leader_calls import LeaderCalls
from .marker_channel import Marker, TxnMarkerChannel
from .verified_partitions import VerifiedPartitions

__all__ = ["AppendVerifier", "ClusterTransactions", "LeaderCalls", "Marker", "TxnMarkerChannel",
           "VerifiedPartitions"]
