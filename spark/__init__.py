"""stratalog.spark: a PySpark Data Source for stratalog topics (``format("stratalog")``).

A pure-Python Data Source (``pyspark.sql.datasource``, no JVM jar) that follows Spark's own Kafka
source and sink: the same option names, the same schema, the same offset JSON. Install it with
the ``spark`` extra (``pip install 'stratalog[spark]'``) and register it once per session::

    from stratalog.spark import register
    register(spark)
    df = (spark.read.format("stratalog")
          .option("target", "127.0.0.1:50051")
          .option("subscribe", "events")
          .option("startingTimestamp", "1763800000000")
          .load())

* Batch and streaming reads from a server (``target``), in parallel over partitions and offset
  sub-ranges, by offsets or timestamps; streams keep Spark's ``{"topic":{"partition":offset}}``
  offsets in their checkpoints and support ``Trigger.AvailableNow``. ``isolationLevel``
  read_committed (the default) reads only committed transactions, up to the last stable offset.
* Batch and streaming writes through the client's batching, idempotent Producer (at-least-once),
  or with ``transactionalIdPrefix`` in one transaction per task, committed by the driver.
* File mode (``path``): reads log directories in Kafka's format straight from disk, one task per
  segment, no server (read_committed from the ``.snapshot``/``.txnindex`` files and markers).

docs/spark.md has every option; :mod:`stratalog.spark.errors` the errors queries fail with.
"""

from __future__ import annotations

from typing import Any

from .datasource import StratalogDataSource
from .errors import (
    ConnectorError,
    DataLossError,
    OptionError,
    SchemaError,
    TransactionCommitError,
)
from .schema import arrow_schema, read_schema

__all__ = [
    "ConnectorError",
    "DataLossError",
    "OptionError",
    "SchemaError",
    "StratalogDataSource",
    "TransactionCommitError",
    "arrow_schema",
    "read_schema",
    "register",
]


def register(spark: Any) -> None:
    """Make ``format("stratalog")`` available in the SparkSession ``spark``."""
    spark.dataSource.register(StratalogDataSource)
