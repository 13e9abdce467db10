"""The "other client" of tests/integration/test_server_attacks.py, run as a process of its own.

It stands for a client on another machine: while the test's process attacks the server, this
one keeps reading a topic, each call under a gRPC deadline, so that a slow answer fails with
DEADLINE_EXCEEDED. A process of its own, so that the attackers' client-side work (thousands of
streams in the test's event loop) cannot delay its calls: what it sees is the server's doing.

    python other_client.py TARGET TOPIC RECORDS DEADLINE_S USER PASSWORD

Each round is a ListOffsets (the log end must be RECORDS) and a FetchByOffset from offset 0
(it must return RECORDS records). It prints ``ready`` after its first round, then runs rounds
until a line (or the end) arrives on stdin, and prints one JSON line: the rounds run, the
failures (RPC, status code, details), the slowest call of each RPC in seconds and the calls
slower than :data:`SLOW_S` (when they started, by the wall clock), for the report: the test
asserts on the failures, never on the times.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
import time

import grpc

from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

#: Calls slower than this are listed in the report, with when they started.
SLOW_S = 0.1


def main(argv: list[str]) -> int:
    target, topic, records, deadline_s, user, password = argv
    expected, deadline = int(records), float(deadline_s)
    pair = base64.b64encode(f"{user}:{password}".encode()).decode()
    metadata = (("authorization", f"Basic {pair}"),)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    failures: list[list[str]] = []
    slowest = {"ListOffsets": 0.0, "FetchByOffset": 0.0}
    slow: list[tuple[float, str, float]] = []  # (started, RPC, seconds), wall clock
    rounds = 0
    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        stub = broker_pb2_grpc.BrokerStub(channel)
        calls = (
            ("ListOffsets", stub.ListOffsets, pb.ListOffsetsRequest(topic=topic, timestamp=-1),
             lambda answer: answer.offset == expected),
            ("FetchByOffset", stub.FetchByOffset, pb.FetchByOffsetRequest(topic=topic, offset=0),
             lambda answer: len(answer.records) == expected),
        )
        while not stop.is_set():
            for name, method, request, correct in calls:
                started = time.perf_counter()
                try:
                    answer = method(request, timeout=deadline, metadata=metadata)
                except grpc.RpcError as exc:
                    failures.append([name, exc.code().name, exc.details() or ""])
                    continue
                finally:
                    took = time.perf_counter() - started
                    slowest[name] = max(slowest[name], took)
                    if took > SLOW_S:
                        slow.append((round(time.time() - took, 3), name, round(took, 3)))
                if not correct(answer):
                    failures.append([name, "WRONG_ANSWER", str(answer)[:200]])
            rounds += 1
            if rounds == 1:
                print("ready", flush=True)
    print(json.dumps({"rounds": rounds, "failures": failures, "slowest_s": slowest,
                      "slow": slow}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
