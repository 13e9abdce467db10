"""The error tree of ``stratalog.spark``: what a Spark query of the connector fails with.

Spark wraps an exception raised in a Python data source (``AnalysisException`` at ``load()``,
``PythonException`` inside a task), keeping its message; so each message here stands on its own:
it names the option, the topic-partition and the offsets involved, and what to do about it.

    ConnectorError
    ├── OptionError       a read or write option is missing, malformed or not allowed here
    │                     (also a ValueError); ``.option`` is the option's name as documented
    ├── SchemaError       a DataFrame to write lacks ``value`` or has a column of the wrong
    │                     type, or a row holds a null topic or header key (also a ValueError)
    ├── DataLossError     offsets the query needs are no longer in the log (retention,
    │                     DeleteRecords, a recreated topic); raised only with failOnDataLoss=true
    └── TransactionCommitError
                          the driver could not commit a task's transaction of a transactional
                          write (timed out on the server, or fenced by a newer attempt)

Errors from the server arrive as :mod:`stratalog.client.errors` classes and errors in stored
bytes as :mod:`stratalog.records.errors` classes; the connector adds context to neither tree.
"""

from __future__ import annotations

import logging

__all__ = [
    "ConnectorError",
    "DataLossError",
    "OptionError",
    "SchemaError",
    "TransactionCommitError",
    "report_data_loss",
]

logger = logging.getLogger("stratalog.spark")


class ConnectorError(Exception):
    """Base of the errors raised by the stratalog Spark connector itself."""


class OptionError(ConnectorError, ValueError):
    """An option of ``spark.read/readStream/write/writeStream.format("stratalog")`` is wrong.

    ``option`` is the option's documented name (``startingOffsets``, not ``startingoffsets``).
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"option '{option}': {message}")
        self.option = option


class SchemaError(ConnectorError, ValueError):
    """The DataFrame to write does not fit the sink's columns (names the column and row)."""


class DataLossError(ConnectorError):
    """Records the query was asked to read are gone from the log.

    Raised, as Spark's Kafka source does, when ``failOnDataLoss`` is true (the default): a
    starting offset below the log start offset (retention deleted the segments), or a log that
    now ends before an offset the query already planned to read.
    """


class TransactionCommitError(ConnectorError):
    """The driver could not commit the transaction of a task of a transactional write (it
    timed out on the server, or a newer attempt fenced it): that task's rows are not visible to
    read_committed readers. The message names the transactional id and the transactions
    committed before it."""


def report_data_loss(message: str, fail_on_data_loss: bool, going_on: str) -> None:
    """Records are gone: raise DataLossError with ``fail_on_data_loss``, else log a warning.

    ``message`` says what is lost and why; ``going_on`` what the query does instead when the
    option is false ("skip them", "go on without them"), for both the error and the warning.
    """
    if fail_on_data_loss:
        raise DataLossError(f"{message}. Set the option failOnDataLoss=false to {going_on}.")
    logger.warning("%s; the query will %s (failOnDataLoss=false)", message, going_on)
