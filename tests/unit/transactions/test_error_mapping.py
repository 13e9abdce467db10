"""Every coordinator error has its ErrorReason and status code in server/rpc/status.py, and the
server's own trouble does not leak its message."""

from __future__ import annotations

import grpc
import pytest

from stratalog.server.rpc import status
from stratalog.server.transactions import errors

C = grpc.StatusCode


@pytest.mark.parametrize(("error", "reason", "code"), [
    (errors.ConcurrentTransactionsError, "CONCURRENT_TRANSACTIONS", C.ABORTED),
    (errors.CoordinatorLoadInProgressError, "COORDINATOR_LOAD_IN_PROGRESS", C.UNAVAILABLE),
    (errors.ProducerFencedError, "PRODUCER_FENCED", C.FAILED_PRECONDITION),
    (errors.InvalidProducerIdMappingError, "INVALID_PRODUCER_ID_MAPPING", C.FAILED_PRECONDITION),
    (errors.TransactionalIdNotFoundError, "TRANSACTIONAL_ID_NOT_FOUND", C.NOT_FOUND),
    (errors.InvalidTxnStateError, "INVALID_TXN_STATE", C.FAILED_PRECONDITION),
    (errors.InvalidTransactionTimeoutError, "INVALID_TRANSACTION_TIMEOUT", C.INVALID_ARGUMENT),
    (errors.InvalidTransactionalIdError, "INVALID_REQUEST", C.INVALID_ARGUMENT),
    (errors.TransactionsNotSupportedError, "INVALID_REQUEST", C.INVALID_ARGUMENT),
    (errors.CorruptTransactionLogError, "STORAGE_ERROR", C.UNAVAILABLE),
    (errors.ProducerIdsExhaustedError, "STORAGE_ERROR", C.UNAVAILABLE),
])
def test_each_error_has_its_reason_and_code(error, reason, code) -> None:
    assert status.classify(error("x")) == status.ErrorMapping(code, reason)


def test_client_errors_carry_their_message_and_server_errors_do_not() -> None:
    fenced = status.to_rpc_status(errors.ProducerFencedError("epoch 3 is not 4"))
    assert fenced.message == "epoch 3 is not 4"
    corrupt = status.to_rpc_status(errors.CorruptTransactionLogError("/data/__transaction_state-0"))
    assert "/data" not in corrupt.message


def test_a_new_leaf_gets_its_base_mapping() -> None:
    class NewTransactionError(errors.TransactionError):
        pass

    assert status.classify(NewTransactionError("x")).reason == "INVALID_REQUEST"
