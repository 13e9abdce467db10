"""The error tree of ``stratalog.server.transactions``: what the transaction coordinator refuses.

Each leaf is one of Kafka's transaction errors (``org.apache.kafka.common.errors``) and carries
``retriable``: whether a client that sends the same request again may succeed without doing
anything else first (Kafka's ``RetriableException``). ``server/rpc/status.py`` maps every leaf to
an ErrorReason of broker.proto; programmer errors are assertions.

    TransactionError
    ├── ConcurrentTransactionsError   retriable: the transactional id is completing a commit or
    │                                 abort whose markers are not all written yet
    ├── CoordinatorLoadInProgressError  retriable: the coordinator is still replaying its log
    ├── NotCoordinatorError           retriable: a cluster server asked about a transactional id
    │                                 whose state partition it does not lead (FindCoordinator)
    ├── CoordinatorNotAvailableError  retriable: the id's partition has no live leader now, or a
    │                                 partition leader could not be told of the transaction
    ├── ProducerFencedError           not retriable: the epoch is not the id's current one (a newer
    │                                 InitProducerId fenced this producer, or a timeout abort did)
    ├── InvalidProducerIdMappingError not retriable: the producer id is not the transactional id's
    ├── TransactionalIdNotFoundError  not retriable: the transactional id has no state (never
    │                                 initialised, or expired)
    ├── InvalidTxnStateError          not retriable: the request does not fit the state (commit
    │                                 after an abort, EndTxn with no partition added)
    ├── InvalidTransactionTimeoutError  not retriable: timeout <= 0 or > transaction.max.timeout.ms
    ├── InvalidTransactionalIdError   not retriable: an empty or oversized transactional id, or a
    │                                 bad partition list
    ├── TransactionsNotSupportedError not retriable: a transactional id sent to a cluster
    │                                 server's own coordinator (it hands out producer ids only)
    ├── ProducerIdsExhaustedError     not retriable: no producer id is left below 2^63 - 1
    └── CorruptTransactionLogError    not retriable: a record of ``__transaction_state`` does not
                                      decode (the server's own files are damaged)

Messages name the transactional id, the producer id and epochs, the state, and for the log the
directory and offset.
"""

from __future__ import annotations

__all__ = [
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CorruptTransactionLogError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "InvalidTransactionalIdError",
    "InvalidTxnStateError",
    "ProducerFencedError",
    "ProducerIdsExhaustedError",
    "TransactionError",
    "TransactionalIdNotFoundError",
    "TransactionsNotSupportedError",
]


class TransactionError(Exception):
    """Base of every operating error of the transaction coordinator."""

    #: Whether the same request, sent again unchanged, may succeed.
    retriable = False


class ConcurrentTransactionsError(TransactionError):
    """Kafka's CONCURRENT_TRANSACTIONS: a commit or abort of this id is still being completed.

    Raised when the markers of a PrepareCommit/PrepareAbort could not all be written yet (a
    partition's write failed); the coordinator retries them, so the request succeeds later.
    """

    retriable = True


class CoordinatorLoadInProgressError(TransactionError):
    """Kafka's COORDINATOR_LOAD_IN_PROGRESS: the state log is not replayed yet, or is closed."""

    retriable = True


class NotCoordinatorError(TransactionError):
    """Kafka's NOT_COORDINATOR: in a cluster, this server does not lead the state partition of
    the transactional id (the client asks FindCoordinator again)."""

    retriable = True


class CoordinatorNotAvailableError(TransactionError):
    """Kafka's COORDINATOR_NOT_AVAILABLE: in a cluster, the id's state partition has no live
    leader now, its topic cannot be made yet, or a partition's leader could not be told that
    the partition joined a transaction (retry)."""

    retriable = True


class ProducerFencedError(TransactionError):
    """Kafka's PRODUCER_FENCED: the producer's epoch is not the transactional id's current one."""


class InvalidProducerIdMappingError(TransactionError):
    """Kafka's INVALID_PRODUCER_ID_MAPPING: the producer id does not belong to the id."""


class TransactionalIdNotFoundError(TransactionError):
    """Kafka's TRANSACTIONAL_ID_NOT_FOUND: no state for the id (never initialised, or expired).

    Kafka answers AddPartitionsToTxn and EndTxn for an unknown id with
    INVALID_PRODUCER_ID_MAPPING; stratalog names the actual problem.
    """


class InvalidTxnStateError(TransactionError):
    """Kafka's INVALID_TXN_STATE: the request is not allowed in the id's current state."""


class InvalidTransactionTimeoutError(TransactionError):
    """Kafka's INVALID_TRANSACTION_TIMEOUT: not in ``1 .. transaction.max.timeout.ms``."""


class InvalidTransactionalIdError(TransactionError):
    """A request the coordinator cannot take as written (Kafka's INVALID_REQUEST): an empty or
    oversized transactional id, an empty or bad partition list, too many partitions."""


class TransactionsNotSupportedError(TransactionError):
    """A transactional id sent to a cluster server's own coordinator (Kafka's INVALID_REQUEST).

    In a cluster that coordinator only hands out producer ids; transactional ids are the
    replicated state partitions' coordinators' (server/transaction_service/), and the front
    ends send them there: this is a programming slip made visible, not a client's error.
    """


class ProducerIdsExhaustedError(TransactionError):
    """No producer id is left to allocate (the next block would pass 2^63 - 1)."""


class CorruptTransactionLogError(TransactionError):
    """A record of the coordinator's ``__transaction_state`` log does not decode.

    Names the log directory, the offset and the reason. The coordinator does not open: its
    state would be incomplete, and answering from it could break a transaction's atomicity.
    """
