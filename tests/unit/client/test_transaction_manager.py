"""Kafka's transaction state machine and the producer's error decisions
(stratalog.client.transaction_manager)."""

from __future__ import annotations

import grpc
import pytest

from stratalog.client import errors
from stratalog.client.transaction_manager import (
    ErrorAction,
    TransactionManager,
    TransactionState,
    TransactionStateError,
    coordinator_error_action,
    produce_error_action,
    unsupported_error,
)
from stratalog.client.types import ProducerIdAndEpoch, TopicPartition

S = TransactionState
P = ProducerIdAndEpoch(5, 0)


def transactional(state: TransactionState = S.UNINITIALIZED) -> TransactionManager:
    """A manager driven to ``state`` through the public steps."""
    manager = TransactionManager("app", 60000)
    if state is S.UNINITIALIZED:
        return manager
    manager.begin_initializing()
    if state is S.INITIALIZING:
        return manager
    manager.initialized(P)
    if state is S.READY:
        return manager
    manager.begin_transaction()
    if state is S.IN_TRANSACTION:
        return manager
    if state is S.COMMITTING:
        assert manager.begin_commit()
    elif state is S.ABORTING:
        manager.begin_abort()
    elif state is S.ABORTABLE_ERROR:
        manager.abortable_error(errors.CorruptRecordError("bad batch"))
    elif state is S.FATAL_ERROR:
        manager.fatal_error(errors.ProducerFencedError("fenced by epoch 3"))
    assert manager.state is state
    return manager


def test_a_whole_transaction_moves_through_kafkas_states() -> None:
    manager = transactional()
    assert not manager.sends_allowed
    manager.begin_initializing()
    assert manager.producer is None and manager.state is S.INITIALIZING
    manager.initialized(P)
    assert manager.state is S.READY and manager.producer == P
    manager.begin_transaction()
    assert manager.sends_allowed
    assert manager.needs_adding(TopicPartition("t", 0))
    assert manager.needs_adding(TopicPartition("t", 0))  # still waiting: asked once, queued once
    assert manager.pending_partitions == {TopicPartition("t", 0)}
    manager.partitions_added([TopicPartition("t", 0)])
    assert not manager.needs_adding(TopicPartition("t", 0)) and not manager.pending_partitions
    assert manager.begin_commit()
    assert manager.state is S.COMMITTING and not manager.sends_allowed
    manager.complete_transaction()
    assert manager.state is S.READY and not manager.partitions


@pytest.mark.parametrize(
    ("state", "call", "message"),
    [
        (S.READY, "commit", "commit_transaction\\(\\) in state READY: no transaction is open"),
        (S.READY, "abort", "abort_transaction\\(\\) in state READY: no transaction is open"),
        (S.IN_TRANSACTION, "begin", "begin_transaction\\(\\) in state IN_TRANSACTION: a "
         "transaction is open: commit or abort it first"),
        (S.ABORTABLE_ERROR, "begin", "in state ABORTABLE_ERROR: the transaction failed and must "
         "be aborted: call abort_transaction\\(\\) \\(last error: CORRUPT_RECORD: bad batch\\)"),
        (S.COMMITTING, "abort", "abort_transaction\\(\\) in state COMMITTING"),
        (S.ABORTING, "commit", "commit_transaction\\(\\) in state ABORTING"),
        (S.ABORTING, "begin", "begin_transaction\\(\\) in state ABORTING"),
        (S.READY, "send", "send\\(\\) outside a transaction in state READY: no transaction is "
         "open: call begin_transaction\\(\\) first"),
        (S.UNINITIALIZED, "send", "send\\(\\) outside a transaction in state UNINITIALIZED"),
        (S.COMMITTING, "send", "send\\(\\) outside a transaction in state COMMITTING"),
    ],
)
def test_wrong_state_calls_raise_naming_the_state(state, call, message) -> None:
    manager = transactional(state)
    calls = {
        "begin": manager.begin_transaction,
        "commit": manager.begin_commit,
        "abort": manager.begin_abort,
        "send": manager.check_send,
    }
    with pytest.raises(TransactionStateError, match=message):
        calls[call]()
    assert manager.state is state  # nothing moved


def test_an_abortable_error_refuses_sends_and_commit_with_the_error_itself() -> None:
    manager = transactional(S.ABORTABLE_ERROR)
    with pytest.raises(errors.CorruptRecordError, match="bad batch"):
        manager.check_send()
    assert not manager.begin_commit()  # the Producer raises last_error
    manager.begin_abort()
    assert manager.state is S.ABORTING
    manager.abortable_error(errors.CorruptRecordError("late"))  # ignored while aborting
    assert manager.state is S.ABORTING
    manager.complete_transaction()
    assert manager.state is S.READY


@pytest.mark.parametrize("state", list(S))
def test_fenced_is_fatal_from_every_state_and_final(state) -> None:
    manager = transactional(state)
    fenced = errors.ProducerFencedError("fenced by epoch 3")
    manager.fatal_error(fenced)
    assert manager.state is S.FATAL_ERROR and not manager.sends_allowed
    for call in (manager.check_send, manager.begin_transaction, manager.begin_commit,
                 manager.begin_abort):
        with pytest.raises(errors.ProducerFencedError, match="fenced by epoch 3"):
            call()
    with pytest.raises(TransactionStateError, match="from FATAL_ERROR to READY"):
        manager.transition(S.READY)


def test_transitions_outside_kafkas_table_are_refused() -> None:
    manager = transactional(S.READY)
    with pytest.raises(TransactionStateError, match="from READY to COMMITTING"):
        manager.transition(S.COMMITTING)
    manager = transactional(S.IN_TRANSACTION)
    with pytest.raises(TransactionStateError, match="from IN_TRANSACTION to READY"):
        manager.transition(S.READY)


def test_an_epoch_bump_after_abort_goes_through_initializing() -> None:
    manager = transactional(S.IN_TRANSACTION)
    manager.abortable_error(errors.OutOfOrderSequenceError("gap"), sequence_gap=True)
    assert manager.epoch_bump_required
    manager.begin_abort()
    manager.clear_transaction()
    manager.begin_initializing()
    assert manager.state is S.INITIALIZING and manager.producer is None
    manager.initialized(ProducerIdAndEpoch(5, 1))
    assert manager.state is S.READY and not manager.epoch_bump_required
    # A timed-out InitProducerId goes back to UNINITIALIZED, to be asked again.
    manager = transactional(S.INITIALIZING)
    manager.initialization_failed()
    assert manager.state is S.UNINITIALIZED


def test_an_idempotent_manager_allows_sends_until_fatal_and_has_no_transactions() -> None:
    manager = TransactionManager(None, 60000)
    assert manager.sends_allowed and not manager.is_transactional
    manager.check_send()
    manager.begin_initializing()
    manager.initialized(P)
    manager.begin_initializing()  # a new producer id, from READY
    manager.initialized(ProducerIdAndEpoch(6, 0))
    with pytest.raises(TransactionStateError, match="needs a transactional producer"):
        manager.begin_transaction()
    manager.fatal_error(errors.InvalidProducerEpochError("old epoch"))
    assert not manager.sends_allowed
    with pytest.raises(errors.InvalidProducerEpochError):
        manager.check_send()


def _error(cls: type[errors.StratalogError]) -> errors.StratalogError:
    return cls("x")


@pytest.mark.parametrize(
    ("error", "transactional", "is_head", "action"),
    [
        (errors.OutOfOrderSequenceError, False, False, ErrorAction.RESEND_IN_TURN),
        (errors.OutOfOrderSequenceError, True, False, ErrorAction.RESEND_IN_TURN),
        (errors.OutOfOrderSequenceError, False, True, ErrorAction.RESTART_SEQUENCES),
        (errors.OutOfOrderSequenceError, True, True, ErrorAction.ABORTABLE),
        (errors.UnknownProducerIdError, False, True, ErrorAction.RESTART_SEQUENCES),
        (errors.UnknownProducerIdError, False, False, ErrorAction.RESTART_SEQUENCES),
        (errors.UnknownProducerIdError, True, True, ErrorAction.ABORTABLE),
        (errors.InvalidProducerEpochError, False, True, ErrorAction.FATAL),
        (errors.ProducerFencedError, True, False, ErrorAction.FATAL),
        (errors.ShuttingDownError, False, False, ErrorAction.RETRY),
        (errors.BrokerUnavailableError, True, True, ErrorAction.RETRY),
        (errors.RequestTimeoutError, False, True, ErrorAction.RETRY),
        (errors.RecordTooLargeError, False, True, ErrorAction.FAIL),
        (errors.RecordTooLargeError, True, True, ErrorAction.ABORTABLE),
        (errors.InvalidTxnStateError, True, True, ErrorAction.ABORTABLE),
    ],
)
def test_produce_error_actions(error, transactional, is_head, action) -> None:
    assert produce_error_action(
        _error(error), transactional=transactional, is_head=is_head) is action


@pytest.mark.parametrize(
    ("error", "rpc", "action"),
    [
        (errors.ConcurrentTransactionsError, "EndTxn", ErrorAction.RETRY),
        (errors.CoordinatorLoadInProgressError, "InitProducerId", ErrorAction.RETRY),
        (errors.BrokerUnavailableError, "AddPartitionsToTxn", ErrorAction.RETRY),
        (errors.ProducerFencedError, "AddPartitionsToTxn", ErrorAction.FATAL),
        (errors.InvalidProducerEpochError, "EndTxn", ErrorAction.FATAL),
        (errors.InvalidTxnStateError, "EndTxn", ErrorAction.FATAL),
        (errors.TransactionalIdNotFoundError, "AddPartitionsToTxn", ErrorAction.FATAL),
        (errors.InvalidTransactionTimeoutError, "InitProducerId", ErrorAction.FATAL),
        (errors.InvalidProducerIdMappingError, "AddPartitionsToTxn", ErrorAction.ABORTABLE),
        (errors.UnknownTopicOrPartitionError, "AddPartitionsToTxn", ErrorAction.ABORTABLE),
        (errors.UnknownProducerIdError, "EndTxn", ErrorAction.ABORTABLE),
        (errors.InvalidRequestError, "EndTxn", ErrorAction.FATAL),
    ],
)
def test_coordinator_error_actions(error, rpc, action) -> None:
    assert coordinator_error_action(_error(error), rpc) is action


def test_a_server_without_the_rpcs_gets_a_message_that_says_what_to_do() -> None:
    error = errors.StratalogError("Method not found!", code=grpc.StatusCode.UNIMPLEMENTED)
    clearer = unsupported_error(error, "127.0.0.1:9")
    assert "does not implement InitProducerId" in str(clearer)
    assert "idempotent=False" in str(clearer)
    other = errors.ShuttingDownError("bye")
    assert unsupported_error(other, "x") is other
