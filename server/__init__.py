"""The stratalog server: broker.proto's Broker service over the storage engine, on grpc.aio.

``stratalog serve`` (or ``python -m stratalog.server``) runs it; :mod:`.app` starts and stops it.
The request path, one module a step::

    gRPC bytes --decoding--> request --service--> storage engine --service--> response
                               (zero-copy Produce)   (stratalog.server.storage: synchronous,
                                                      no grpc import)

- :mod:`.app`               start-up and graceful shutdown: settings, uvloop, the thread pool,
                            health, reflection, metrics endpoint, signals
- :mod:`.settings`          every server setting: TOML file < ``STRATALOG_*`` env < flags
- :mod:`.pid_file`          the pid file, held locked while the server runs (``stratalog reload``)
- :mod:`.decoding`          Produce parsed with its record batches as a view of the message
- :mod:`.service`           the servicer: checks the request's shape, delegates, answers; the
                            per-partition append lock and append signal (long polls, Subscribe)
- :mod:`.translation`       proto messages to and from the record codec's values
- :mod:`.append_placement`  where an append (and a records-form encode) runs: inline on the
                            event loop or in the thread pool
- :mod:`.topic_name_memo`   the bounded memo of topic names that passed validation
- :mod:`.status`            the one map from engine errors to gRPC statuses
- :mod:`.client_text`       client strings escaped and cut in log lines, cut to bytes in statuses
- :mod:`.metrics`           Prometheus metrics of requests, traffic and storage
- :mod:`.allocator`         glibc malloc thresholds, so MiB-sized request buffers are reused

Concurrency: everything but the storage engine runs on the event loop; blocking storage calls go
to the thread pool (docs/server.md, "Concurrency").
"""
