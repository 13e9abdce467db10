"""The transaction coordinator: producer ids, transactional ids and their transactions.

Kafka's ``TransactionCoordinator``, ``TransactionStateManager``, ``TransactionLog`` and
``ProducerIdManager`` for a single server (docs/transactions.md)::

    coordinator = TransactionCoordinator.open(log_dirs, write_markers)
    pid, epoch = coordinator.init_producer_id("orders-writer", 60_000)
    coordinator.add_partitions_to_txn("orders-writer", pid, epoch, [("orders", 0)])
    coordinator.end_txn("orders-writer", pid, epoch, commit=True)   # markers, then complete
    coordinator.run_maintenance()                                    # timeouts, expiry

* :mod:`.coordinator`: the requests and the maintenance pass.
* :mod:`.transaction_metadata`: the state machine of one transactional id.
* :mod:`.transaction_log`: the key/value formats of ``__transaction_state`` (sans-IO).
* :mod:`.transaction_state_manager`: the state log, its replay and compaction.
* :mod:`.producer_ids`: producer id blocks. :mod:`.config`: settings. :mod:`.errors`.
"""

from __future__ import annotations

from .config import DEFAULT_TRANSACTION_TIMEOUT_MS, TransactionConfig
from .coordinator import (
    COORDINATOR_EPOCH,
    CoordinatorMaintenanceReport,
    ProducerIdAndEpoch,
    TransactionCoordinator,
    WriteMarkers,
)
from .errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    CorruptTransactionLogError,
    InvalidProducerIdMappingError,
    InvalidTransactionalIdError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    ProducerIdsExhaustedError,
    TransactionalIdNotFoundError,
    TransactionError,
    TransactionsNotSupportedError,
)
from .producer_ids import ProducerIdManager
from .transaction_metadata import TransactionMetadata, TransactionState
from .transaction_state_manager import TransactionStateManager

__all__ = [
    "COORDINATOR_EPOCH",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorMaintenanceReport",
    "CoordinatorNotAvailableError",
    "CorruptTransactionLogError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "InvalidTransactionalIdError",
    "InvalidTxnStateError",
    "NotCoordinatorError",
    "ProducerFencedError",
    "ProducerIdAndEpoch",
    "ProducerIdManager",
    "ProducerIdsExhaustedError",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionError",
    "TransactionMetadata",
    "TransactionState",
    "TransactionStateManager",
    "TransactionalIdNotFoundError",
    "TransactionsNotSupportedError",
    "WriteMarkers",
]
