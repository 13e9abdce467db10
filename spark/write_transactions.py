"""Transactional writes: every task's rows in a transaction that the driver commits.

Intuition: with ``transactionalIdPrefix``, each write task produces its rows inside one
transaction of its own, with transactional id ``<prefix>-<partition id>`` (Spark's partition
id: the same for every attempt of a task, and for the same partition of every micro-batch). The
task does **not** commit: it flushes (every record acknowledged), leaves the transaction open
and reports its producer id and epoch in its commit message. The driver commits every task's
transaction (EndTxn) in ``commit()``, which Spark calls only once every task succeeded, and in
``abort()`` aborts the transactions of every partition, finished or not. This is Spark's own
commit protocol carried over to the log:

* A task that fails, wherever the error comes from, commits nothing. That includes an error
  upstream in the same Spark task (a UDF raising): Spark then ends the writer's input as if it
  were complete, so a task that committed at the end of its input would commit a part of its
  rows. Its open transaction is aborted by the driver's ``abort()``, by the retried attempt
  (InitProducerId with the same id bumps the epoch, which fences the failed attempt and aborts
  what it left open, Kafka's rule), or by the server after ``transactionTimeoutMs``. Spark may
  let a failed task's writer run on for a while: the fencing refuses its later batches.
* A job (or micro-batch) whose tasks all succeeded becomes visible to read_committed readers
  when the driver commits, all its tasks together, except if the driver fails in the middle of
  its commit loop: the tasks committed by then stay committed, the others are aborted (by the
  timeout, or by the next attempt of the same ids).
* A streaming query restarted after a failure replays the micro-batch that was not recorded as
  committed in its checkpoint: its tasks fence and abort what the failed run left open and
  write again, so the replay duplicates nothing, unless the failure fell between the driver's
  first EndTxn and Spark's commit log entry (then what was committed is written again).

Transactions stay open from a task's first batch until the driver's commit: the whole job. The
timeout (``transactionTimeoutMs``, 15 minutes by default, the server's default maximum) must
cover it; a transaction that the server aborted on timeout makes the driver's commit fail,
naming the task, and nothing of that task is visible.

Every call here blocks (the task's Producer runs on an event loop of its own). The driver's
calls retry retriable errors (a transaction still completing, the server restarting) until the
request deadline (``requestTimeoutMs``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pyspark.sql.datasource import WriterCommitMessage

from stratalog.client import Producer, StratalogError

from .errors import TransactionCommitError
from .options import WriteOptions

__all__ = [
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "WriteCommitMessage",
    "abort_transactions",
    "commit_transactions",
    "produce_in_transaction",
]

logger = logging.getLogger(__name__)

#: The transaction timeout of a transactional write unless ``transactionTimeoutMs`` is given:
#: the server's default ``transaction.max.timeout.ms`` (a transaction spans the whole job).
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000

_T = TypeVar("_T")


@dataclass
class WriteCommitMessage(WriterCommitMessage):
    """What one write task reports to the driver: the records it produced, and for a
    transactional write the open transaction holding them (id, producer id and epoch)."""

    records: int
    transactional_id: str | None = None
    producer_id: int = -1
    producer_epoch: int = -1


async def produce_in_transaction(
    producer: Producer, send_all: Callable[[], Awaitable[int]]
) -> tuple[int, int, int]:
    """Begin the transaction of ``producer`` (transactional), run ``send_all`` (which returns
    once every record is acknowledged) and leave the transaction open for the driver.

    Returns ``(records, producer_id, producer_epoch)``. If ``send_all`` raises, the transaction
    is aborted before the error propagates (so read_committed readers are not held back until
    the timeout).
    """
    await producer.begin_transaction()
    try:
        records = await send_all()
    except BaseException as exc:
        try:
            await producer.abort_transaction()
        except Exception as abort_error:  # the first error is the one that matters
            logger.warning("aborting the transaction of %s after %r failed too: %s",
                           producer.transactional_id, exc, abort_error)
        raise
    ids = producer.producer_id_and_epoch
    assert ids is not None, "begin_transaction() got the producer id"
    return records, ids.producer_id, ids.producer_epoch


def _retrying(call: Callable[[], _T], timeout_s: float) -> _T:
    """``call()``, again after retriable errors, until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    backoff_s = 0.05
    while True:
        try:
            return call()
        except StratalogError as exc:
            if not exc.retriable or time.monotonic() + backoff_s > deadline:
                raise
            time.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 1.0)


def commit_transactions(
    options: WriteOptions, messages: Sequence[WriterCommitMessage | None], what: str
) -> int:
    """Commit the open transaction of every task (driver side); return the records committed.

    ``what`` names the write in messages ("micro-batch 7"). Tasks that wrote nothing have no
    transaction to commit.

    Raises:
        TransactionCommitError: a transaction could not be committed.
    """
    committed: list[str] = []
    records = 0
    with options.connection.sync_client() as client:
        for message in messages:
            if not isinstance(message, WriteCommitMessage) or message.transactional_id is None:
                continue
            if message.records == 0:
                continue
            try:
                _retrying(lambda m=message: client.end_txn(
                    m.transactional_id, m.producer_id, m.producer_epoch, True
                ), options.connection.timeout_s)
            except StratalogError as exc:
                raise TransactionCommitError(
                    f"{what}: could not commit the transaction of {message.transactional_id} "
                    f"(producer id {message.producer_id}, epoch {message.producer_epoch}; "
                    f"{message.records} records): {exc}. Transactions committed before it: "
                    f"{', '.join(committed) or 'none'}. If it timed out, raise the option "
                    "transactionTimeoutMs above the time the write takes."
                ) from exc
            committed.append(message.transactional_id)
            records += message.records
    return records


def abort_transactions(
    options: WriteOptions, messages: Sequence[WriterCommitMessage | None], what: str
) -> None:
    """Abort the transactions of every task of a failed write (driver side), best effort.

    ``messages`` has one slot per Spark partition (None for a task that failed). Each
    partition's transactional id gets a new epoch (InitProducerId), which aborts whatever that
    id left open, a task that failed included, and fences its attempts still running.
    Failures are logged: the server aborts what is left when the transactions time out.
    """
    assert options.transactional_id_prefix is not None
    timeout_ms = options.transaction_timeout_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
    try:
        with options.connection.sync_client() as client:
            for partition_id in range(len(messages)):
                transactional_id = options.transactional_id(partition_id)
                try:
                    _retrying(lambda t=transactional_id: client.init_producer_id(
                        t, transaction_timeout_ms=timeout_ms
                    ), options.connection.timeout_s)
                except StratalogError as exc:
                    logger.warning("%s: could not abort the transaction of %s (the server "
                                   "aborts it after %d ms): %s", what, transactional_id,
                                   timeout_ms, exc)
    except Exception:
        logger.exception("%s: aborting the transactions failed", what)

