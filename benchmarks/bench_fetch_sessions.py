"""Bytes per poll of a consumer of many partitions, with and without fetch sessions (KIP-227).

Intuition: without a session every Fetch names every partition and every answer carries an
entry for each; with one, a request names only the partitions whose position moved and an
answer only those with news. This script measures both on the real Fetch handler
(server/kafka/apis/fetch.py over a ReplicaManager in a temporary directory): kafka-python's
own client side of KIP-227 (``kafka.consumer.fetcher.FetchSessionHandler``) builds each request
from the consumer's positions as its fetcher does, kafka-python's classes encode it, the
listener's decoder and the handler serve it, and the answer, encoded as the listener sends it,
is decoded by kafka-python and handed back to the session handler, which the positions follow.
Without sessions the same requests go with session id 0 and epoch -1 (what librdkafka and
``enable_incremental_fetch_sessions=False`` send).

Each poll, ``--active`` of the ``--partitions`` partitions get one new record of 100 bytes
(0: an idle topic, a consumer waiting at the end of every partition). Figures are bytes per
poll on the wire: the size prefix, the request header (v2, kafka-python's client id) or
response header (v1), and the body, for Fetch v12; and the median CPU time of this thread
(the event loop's: these reads do not go to the pool) to decode the request, serve it and
encode the answer.

Run ``python -m benchmarks.bench_fetch_sessions [--partitions 100] [--polls 200]
[--active 0 1 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

__all__ = ["bytes_per_poll"]

#: kafka-python's default client id, sent in every request header.
_CLIENT_ID = "kafka-python-3.0.12"
#: Size prefix + header v2 (api key, version, correlation id, client id, tagged fields).
_REQUEST_HEADER_BYTES = 4 + 2 + 2 + 4 + 2 + len(_CLIENT_ID) + 1
#: Size prefix + header v1 (correlation id, tagged fields).
_RESPONSE_HEADER_BYTES = 4 + 4 + 1
_VERSION = 12


def bytes_per_poll(partitions: int, polls: int, active: int, sessions: bool,
                   rng: random.Random) -> dict[str, float]:
    """Mean request and response bytes per poll, and the partitions each names, over
    ``polls`` polls after the first (the full one that opens the session)."""
    from kafka.consumer.fetcher import FetchMetadata, FetchRequestData, FetchSessionHandler
    from kafka.protocol.consumer import FetchRequest, FetchResponse
    from kafka.structs import TopicPartition

    from stratalog.records import build_batch
    from stratalog.server.broker import ReplicaManager
    from stratalog.server.client_limits import ClientLimits
    from stratalog.server.kafka.apis.fetch import fetch
    from stratalog.server.kafka.context import ConnectionState, KafkaServices, RequestContext
    from stratalog.server.kafka.hot_messages import decode_fetch_request, encode_fetch_response
    from stratalog.server.metrics import ServerMetrics
    from stratalog.server.security.principal import ANONYMOUS, CallIdentity
    from stratalog.server.security.quotas import QuotaConfig, QuotaManager
    from stratalog.server.settings import Settings
    from stratalog.server.settings_schema import Address
    from stratalog.server.storage.log_manager import LogManager

    partition_class = FetchRequest.FetchTopic.FetchPartition

    async def measure() -> dict[str, float]:
        with tempfile.TemporaryDirectory(prefix="bench-fetch-sessions-") as data_dir:
            log_manager = LogManager.open([Path(data_dir)])
            executor = ThreadPoolExecutor(2)
            settings = Settings()
            metrics = ServerMetrics()
            replicas = ReplicaManager(log_manager, settings, metrics, executor)
            log_manager.create_topic("t", partitions)
            services = KafkaServices(
                replicas, log_manager, None, None, settings, metrics,  # type: ignore[arg-type]
                executor, ClientLimits(10, 10, 100), QuotaManager(QuotaConfig()), None,
                advertised=lambda: Address("127.0.0.1", 9092),
                time_ms=lambda: int(time.time() * 1000))
            state = ConnectionState("127.0.0.1:5555", "127.0.0.1",
                                    CallIdentity(ANONYMOUS, "127.0.0.1"))
            handler = FetchSessionHandler(node_id=0)
            positions = OrderedDict((TopicPartition("t", p), 0) for p in range(partitions))
            sent, received, named, answered, server_us = [], [], [], [], []
            try:
                for poll in range(polls + 1):
                    for p in rng.sample(range(partitions), active):
                        log_manager.get_log("t", p).append(build_batch(
                            [(int(time.time() * 1000), None, rng.randbytes(100), ())]))
                    wanted = OrderedDict(
                        (tp, partition_class(partition=tp.partition, current_leader_epoch=-1,
                                             fetch_offset=offset, last_fetched_epoch=-1,
                                             partition_max_bytes=1 << 20))
                        for tp, offset in positions.items())
                    session = (handler.build_next(wanted) if sessions else
                               FetchRequestData(wanted, None, FetchMetadata.LEGACY))
                    request = FetchRequest(
                        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20,
                        isolation_level=0, session_id=session.id, session_epoch=session.epoch,
                        topics=session.to_send, forgotten_topics_data=session.to_forget,
                        rack_id="")
                    body = request.encode(version=_VERSION)
                    started = time.thread_time()
                    ctx = RequestContext(services, state, 1, _VERSION, _CLIENT_ID)
                    response = await fetch(ctx, decode_fetch_request(body, 0, _VERSION))
                    encoded = b"".join(bytes(piece) for piece in
                                       encode_fetch_response(response, _VERSION))
                    spent = time.thread_time() - started
                    decoded = FetchResponse.decode(encoded, version=_VERSION)
                    if sessions:
                        assert handler.handle_response(decoded), "the session was refused"
                    for topic in decoded.responses:
                        for part in topic.partitions:
                            if part.records:
                                # One record per batch: the next offset is the high watermark.
                                positions[TopicPartition(topic.topic, part.partition_index)] = (
                                    part.high_watermark)
                    if poll == 0:
                        continue  # the first, full in both: it opens the session
                    server_us.append(spent * 1e6)
                    sent.append(_REQUEST_HEADER_BYTES + len(body))
                    received.append(_RESPONSE_HEADER_BYTES + len(encoded))
                    named.append(sum(len(t.partitions) for t in request.topics))
                    answered.append(sum(len(t.partitions) for t in decoded.responses))
            finally:
                replicas.begin_shutdown()
                executor.shutdown()
                log_manager.close()
            return {"request_bytes": statistics.fmean(sent),
                    "response_bytes": statistics.fmean(received),
                    "partitions_named": statistics.fmean(named),
                    "partitions_answered": statistics.fmean(answered),
                    "server_us": statistics.median(server_us)}

    return asyncio.run(measure())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--polls", type=int, default=200)
    parser.add_argument("--active", type=int, nargs="+", default=[0, 1, 10])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.partitions} partitions, {args.polls} polls each; bytes per poll (Fetch v12,"
          " headers included)")
    print(f"{'active':>6} {'sessions':>8} {'request B':>10} {'response B':>11}"
          f" {'named':>6} {'answered':>8} {'server us':>9}")
    for active in args.active:
        for sessions in (False, True):
            figures = bytes_per_poll(args.partitions, args.polls, active, sessions,
                                     random.Random(args.seed))
            print(f"{active:>6} {'yes' if sessions else 'no':>8}"
                  f" {figures['request_bytes']:>10.0f} {figures['response_bytes']:>11.0f}"
                  f" {figures['partitions_named']:>6.1f} {figures['partitions_answered']:>8.1f}"
                  f" {figures['server_us']:>9.0f}")


if __name__ == "__main__":
    main()
