"""stratalog: a partitioned-log storage server in Apache Kafka's on-disk format.

Subpackages:

- ``stratalog.records``         the sans-IO RecordBatch v2 codec (shared by server and clients)
- ``stratalog.server.storage``  the synchronous storage engine (usable in-process, like SQLite)
- ``stratalog.server``          the asyncio gRPC server
- ``stratalog.client``          the Python client library
- ``stratalog.v1``              generated protobuf/gRPC modules of the API contract
"""

__version__ = "0.1.0"
