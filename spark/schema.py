"""The connector's schemas: the rows a read produces, as Spark and Arrow see them.

A read yields Spark's Kafka source schema, column for column, so a query written against
``format("kafka")`` runs unchanged against ``format("stratalog")``::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int
    [, headers array<struct<key: string, value: binary>>]      (includeHeaders=true)

Every column is nullable, as in Spark's. ``read()`` yields ``pyarrow.RecordBatch``es, and Spark
accepts them only if their Arrow schema is *exactly* the one it derives from the Spark schema:
``binary`` (not ``large_binary``), ``string``, ``int32``/``int64``, ``timestamp[us, tz=UTC]``
(Kafka's milliseconds times 1000), and a list whose item field is named ``element``.
tests/spark/test_columns.py checks these against pyspark's own conversion.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "HEADERS_ARROW_TYPE",
    "arrow_schema",
    "read_schema",
]

_HEADER_STRUCT_ARROW = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
#: Arrow type of the ``headers`` column.
HEADERS_ARROW_TYPE = pa.list_(pa.field("element", _HEADER_STRUCT_ARROW))

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)

_ARROW_BASE = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
_ARROW_WITH_HEADERS = _ARROW_BASE.append(pa.field("headers", HEADERS_ARROW_TYPE))


def read_schema(include_headers: bool) -> StructType:
    """The Spark schema of a read (Spark's Kafka source schema)."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(_HEADERS_FIELD)
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema of the record batches ``read()`` yields."""
    return _ARROW_WITH_HEADERS if include_headers else _ARROW_BASE
