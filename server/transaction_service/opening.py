"""The transaction coordinator a server starts with: its config from the settings, its state
log opened, and in cluster mode the replicated coordinators' front over it (module docstring of
the package; docs/transactions.md, docs/cluster.md "Transactions").

Crash behaviour: opening the state log recovers it (server/transactions/transaction_log.py);
nothing is written here. Concurrency: :func:`open_transactions` runs the blocking open in the
executor given; call it on the event loop.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING

from stratalog.server.transactions import TransactionConfig, TransactionCoordinator

from .cluster_transactions import ClusterTransactions

if TYPE_CHECKING:
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.settings import Settings

__all__ = ["open_transactions", "transaction_config"]


def transaction_config(settings: Settings) -> TransactionConfig:
    """The coordinator's config from the server's settings (already range-checked)."""
    return TransactionConfig(
        transaction_max_timeout_ms=settings.transaction_max_timeout_ms,
        transactional_id_expiration_ms=settings.transactional_id_expiration_ms,
        abort_timed_out_interval_ms=(
            settings.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        remove_expired_interval_ms=(
            settings.transaction_remove_expired_transaction_cleanup_interval_ms),
        transaction_partitions_max=settings.transaction_partitions_max,
    )


async def open_transactions(
    settings: Settings, replica_manager: ReplicaManager, executor: Executor,
    clean_log_dirs: list[Path],
) -> TransactionCoordinator | ClusterTransactions:
    """This server's transaction coordinator: the local one over its own state log (in
    ``clean_log_dirs`` it opens without recovery); in cluster mode wrapped by the replicated
    coordinators, the local one then handing out producer ids only.

    Raises:
        what TransactionCoordinator.open raises (the state log would not load).
    """
    config = transaction_config(settings)
    local = await asyncio.get_running_loop().run_in_executor(
        executor,
        lambda: TransactionCoordinator.open(
            settings.log_dirs, replica_manager.write_txn_markers, config=config,
            clean_log_dirs=clean_log_dirs,
            # Cluster mode: ids carry the node id, transactional ids are refused.
            cluster_node_id=settings.node_id if settings.cluster else None,
        ),
    )
    if not settings.cluster:
        return local
    # Transactional ids are the state partitions' coordinators' (the local one hands out
    # producer ids): cluster_transactions.py.
    return ClusterTransactions(local, replica_manager, settings, executor, config)
