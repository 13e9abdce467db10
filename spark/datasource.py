"""The Data Source ``stratalog``: the entry point Spark finds by name.

``spark.dataSource.register(StratalogDataSource)`` (or :func:`stratalog.spark.register`) makes
``format("stratalog")`` available to ``spark.read``, ``spark.readStream``, ``df.write`` and
``df.writeStream``. Spark creates the source with the query's options and asks it, on the
driver, for the read schema and for a reader or a writer; that is where the options are parsed
and checked (:mod:`stratalog.spark.options`), so a bad option fails the query before any task
runs, with an :class:`~stratalog.spark.errors.OptionError` naming it. A write's sink topic is
checked there too (created with ``createTopic``: :func:`stratalog.spark.writer.prepare_sink`).

The schema is fixed (Spark's Kafka source schema, :mod:`stratalog.spark.schema`): a query that
passes its own schema with ``.schema(...)`` fails, as it does with Spark's Kafka source.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .batch_reader import StratalogBatchReader
from .errors import OptionError
from .options import ReadOptions, parse_read_options, parse_write_options
from .schema import read_schema
from .stream_reader import StratalogStreamReader
from .writer import StratalogStreamWriter, StratalogWriter, plan_write, prepare_sink

__all__ = ["StratalogDataSource"]


def _include_headers(options: dict) -> bool:
    value = {str(k).lower(): v for k, v in options.items()}.get("includeheaders")
    if value is None or str(value).strip().lower() == "false":
        return False
    if str(value).strip().lower() == "true":
        return True
    raise OptionError("includeHeaders", f"must be 'true' or 'false', got {value!r}")


class StratalogDataSource(DataSource):
    """``format("stratalog")``: batch and streaming reads and writes of stratalog topics.

    Holds the query's options (``self.options``, as Spark passes them). Picklable; Spark ships
    it to the Python processes that plan and run the query.
    """

    @classmethod
    def name(cls) -> str:
        return "stratalog"

    def schema(self) -> StructType:
        return read_schema(_include_headers(self.options))

    def _read_options(self, schema: StructType, *, streaming: bool) -> ReadOptions:
        options = parse_read_options(self.options, streaming=streaming)
        expected = read_schema(options.include_headers)
        if schema != expected:
            raise OptionError(
                "schema", "the stratalog source has a fixed schema and takes no user-specified "
                f"one: expected {expected.simpleString()}, got {schema.simpleString()}"
            )
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return StratalogBatchReader(self._read_options(schema, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StratalogStreamReader(self._read_options(schema, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise OptionError("mode", "only 'append' is supported: records are appended to "
                              "topics, never replaced")
        options = parse_write_options(self.options)
        plan = plan_write(schema, options)
        prepare_sink(options)
        return StratalogWriter(options, plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if overwrite:
            raise OptionError("outputMode", "only 'append' is supported: records are appended "
                              "to topics, never replaced")
        options = parse_write_options(self.options)
        plan = plan_write(schema, options)
        prepare_sink(options)
        return StratalogStreamWriter(options, plan)
