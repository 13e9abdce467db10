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

import os
import sys
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
    """Make ``format("stratalog")`` available in the SparkSession ``spark``.

    Spark runs the connector in Python worker processes of the interpreter the session was
    started with in ``PYSPARK_PYTHON`` (pyspark reads it once, when the SparkContext starts),
    else ``python3`` from ``PATH``: rarely the one stratalog is installed in (a venv's
    ``bin/python`` run without activating it), and then every query fails in the workers with
    ``No module named 'stratalog'``. So when ``PYSPARK_PYTHON`` is not set and the master is
    local (the workers run on this machine), the source is registered to run in *this*
    interpreter (``sys.executable``), which imports stratalog since it is running this
    function. Only this source's workers change: the session's own Python (for UDFs) stays.
    An explicit ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` always wins, and on a cluster
    the executors' Python must be set that way (docs/spark.md).
    """
    try:
        context = spark.sparkContext
    except Exception:  # Spark Connect sessions have none (pyspark raises its own error)
        context = None
    python = _worker_python(context)
    if context is None or python is None:
        spark.dataSource.register(StratalogDataSource)
        return
    # pyspark wraps the source with sc.pythonExec, read when the wrapping is made: swap it
    # for the registration only.
    session_python = context.pythonExec
    context.pythonExec = python
    try:
        spark.dataSource.register(StratalogDataSource)
    finally:
        context.pythonExec = session_python


def _worker_python(context: Any) -> str | None:
    """The interpreter this source's workers should run, when it is not the session's own:
    ``sys.executable`` for a local master without ``PYSPARK_PYTHON`` or
    ``spark.pyspark.python``; else None."""
    if context is None or os.environ.get("PYSPARK_PYTHON"):
        return None
    if context.getConf().get("spark.pyspark.python"):
        return None
    if not str(context.master).startswith("local") or not sys.executable:
        return None
    return sys.executable
