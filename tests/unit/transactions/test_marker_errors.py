"""A partition leader's answer to a coordinator's call and back: what the leader raised
(server/rpc/transaction_markers_service.py's table) is what the coordinator's side raises
(server/transaction_service/leader_calls.py), so the marker channel judges a remote partition
as it judges a local one."""

from __future__ import annotations

import pytest

from stratalog.server.cluster.errors import LeaderNotAvailableError, NotLeaderOrFollowerError
from stratalog.server.rpc.transaction_markers_service import _answer
from stratalog.server.storage.errors import (
    InvalidProducerEpochError,
    LogClosedError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from stratalog.server.transaction_service.leader_calls import raise_partition_error
from stratalog.server.transactions import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
    NotCoordinatorError,
)
from stratalog.v1 import transaction_markers_pb2 as pb

ITEM = pb.TxnPartition(topic="orders", partition=3)


@pytest.mark.parametrize(("raised", "seen"), [
    (NotLeaderOrFollowerError("orders", 3), NotLeaderOrFollowerError),
    (LeaderNotAvailableError("orders", 3, "no leader"), NotLeaderOrFollowerError),
    (UnknownTopicOrPartitionError("orders-3 is gone"), UnknownTopicOrPartitionError),
    (TransactionCoordinatorFencedError("epoch 4 < 5", producer_id=7),
     TransactionCoordinatorFencedError),
    (InvalidProducerEpochError("epoch 1 < 2", producer_id=7), InvalidProducerEpochError),
    (LogClosedError("stopping"), CoordinatorNotAvailableError),
    (OSError("disk full"), CoordinatorNotAvailableError),
    # VerifyTxnAppend, the coordinator's answer to a leader's question.
    (InvalidTxnStateError("orders-3 was not added"), InvalidTxnStateError),
    (NotCoordinatorError("moved"), CoordinatorNotAvailableError),
    (ConcurrentTransactionsError("being committed"), CoordinatorNotAvailableError),
])
def test_a_leaders_error_is_raised_again_at_the_coordinator(raised: Exception,
                                                            seen: type[Exception]) -> None:
    result = _answer(ITEM, raised)
    assert result.partition == ITEM
    with pytest.raises(seen) as caught:
        raise_partition_error(result)
    if seen is not NotLeaderOrFollowerError:
        assert str(raised) in str(caught.value)  # the leader's reason travels along


def test_success_raises_nothing() -> None:
    result = _answer(ITEM, None)
    assert result.error == pb.TXN_PARTITION_ERROR_NONE
    raise_partition_error(result)
