"""The issue 13 probe's attacks, all at once, against one real server process.

The probe found that one client could stop the server from restarting or deny service to every
other client. Each defect has its own test (test_server_storage_limits.py,
test_server_request_bounds.py, test_server_client_limits.py); here they come together, each
attacker a principal of its own (passwords over loopback), against a server with the default
limits and a low open files limit (RLIMIT_NOFILE 2,048, soft and hard):

* ``creator``: CreateTopic of 10,000 partitions, again and again (RLIMIT_NOFILE refusals);
* ``subscriber``: 1,000 idle Subscribe streams over 4 connections, held open;
* ``poller``: 1,030 long polls (30 s) on one connection, each renewed when it ends;
* ``bomber``: the zstd bomb (498 batches of one record of 63 MiB of zeros in ~1 MiB), again
  and again;

while ``reader``, another client in a process of its own (other_client.py), keeps calling
ListOffsets and FetchByOffset on a topic of its own, each call under a gRPC deadline of
:data:`OTHER_CLIENT_DEADLINE_S` (the issue's 1 s, doubled for these shared machines: see
there): a slow answer fails with DEADLINE_EXCEEDED. The test asserts
that none of its calls failed over the whole attack. Then the attackers stop, the server is
stopped with SIGTERM (exit 0), restarts on the same data under the same limit, and serves.

A report is printed (``pytest -s``), and added to a failure: the other client's slowest calls,
and the time the server's event loop thread spent on a CPU and waiting for one (the kernel's
schedstat), which tells a slow server from a busy machine. Times are never asserted; figures
are in docs/performance.md ("Issue 13: the probe's attacks at once").
"""

from __future__ import annotations

import asyncio
import base64
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from stratalog.client.errors import (
    RecordTooLargeError,
    ResourceLimitExceededError,
    from_rpc_error,
)
from stratalog.records import build_batch
from stratalog.server.security.credentials import CredentialFile
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, ServerProcess, until

#: make test runs this module in its serial phase: it times another client's calls through the
#: attacks (OTHER_CLIENT_DEADLINE_S), which the parallel phase's load would fail.
pytestmark = pytest.mark.serial

#: Each of the other client's calls' deadline. The issue's goal is 1 s. The calls are slowest
#: while the 2,030 waiting RPCs arrive: gRPC accepts the calls of one method one at a time, so
#: the other client's FetchByOffset waits until the ~1,000 long polls sent before it are
#: accepted, a few turns of the event loop each (docs/server.md, "Priorities"). With the thread
#: pool below the loop's priority (io_threads_nice) the slowest call was 0.15-0.6 s in 12 runs
#: at load averages of 3-12; but when the machine's other jobs leave the test's processes less
#: than half a CPU (load 10-15 here) the loop waits for one longer than it runs, and 3 runs in
#: about 10 took 1.0-1.13 s. 2 s keeps this a test of the server, not of the machine's load;
#: before io_threads_nice the calls took up to 2 s and the test failed (docs/performance.md).
OTHER_CLIENT_DEADLINE_S = 2.0
OPEN_FILES_LIMIT = 2048
SUBSCRIBERS = 1000
SUBSCRIBER_CONNECTIONS = 4
LONG_POLLS = 1030
#: waiting_rpcs_per_connection_max's default: the long polls one connection may hold.
LONG_POLLS_ADMITTED = 1024
#: Once every attacker is in place, the attack goes on this long, and until the repeated
#: attacks were each made :data:`ROUNDS` times at least; the other client's calls run
#: beside all of them.
ATTACK_S = 10.0
ROUNDS = 20
READER_RECORDS = 50
_USERS = ("creator", "subscriber", "poller", "bomber", "reader")
# The tests check the limits, not the cost of a password check.
_ITERATIONS = 4096
T0 = 1_700_000_000_000


def _password(user: str) -> str:
    return f"{user}-secret"


def _metadata(user: str) -> tuple[tuple[str, str], ...]:
    pair = base64.b64encode(f"{user}:{_password(user)}".encode()).decode()
    return (("authorization", f"Basic {pair}"),)


def _nofile(limit: int) -> dict[int, tuple[int, int]]:
    return {resource.RLIMIT_NOFILE: (limit, limit)}


class _Attack:
    """The attackers of one run, as asyncio tasks on channels of their own."""

    def __init__(self, server: ServerProcess, bomb: pb.ProduceRequest) -> None:
        self.server = server
        self.bomb = bomb
        self.stopping = asyncio.Event()
        self.channels: list[grpc.aio.Channel] = []
        self.creates_refused = 0
        self.bombs_refused = 0
        self.polls_answered = 0
        self.polls_refused = 0
        self.subscribe_calls: list[grpc.aio.UnaryStreamCall] = []
        # (what, wall clock, the server's event loop thread's seconds on a CPU and waiting
        # for one): for the report, which tells the server's slowness from the machine's.
        self.phases: list[tuple[str, float, float, float]] = []

    def phase(self, what: str) -> None:
        self.phases.append((what, time.time(), *_loop_thread_times(self.server.process.pid)))

    def report(self, other_client: dict[str, Any]) -> str:
        lines = [
            f"other client: {other_client['rounds']} rounds, slowest call of each RPC (s) "
            f"{other_client['slowest_s']}",
            f"attackers: {self.creates_refused} huge CreateTopics and {self.bombs_refused} "
            f"bombs refused, {self.polls_refused} long polls refused",
            "the server's event loop thread from the start of the attack:",
        ]
        _, start, on_cpu, waiting = self.phases[0]
        for what, at, on_cpu_then, waiting_then in self.phases[1:]:
            lines.append(f"  {what} after {at - start:.2f} s: {on_cpu_then - on_cpu:.2f} s on "
                         f"a CPU, {waiting_then - waiting:.2f} s waiting for one")
        lines.append("other client's calls over 100 ms (s after the start, RPC, s): " + ", ".join(
            f"({started - start:.2f}, {name}, {took})"
            for started, name, took in other_client["slow"]))
        return "\n".join(lines)

    def stub(self) -> broker_pb2_grpc.BrokerStub:
        # A channel of its own: gRPC would otherwise share one connection among the channels
        # of a target, and the per-connection limits would count them together.
        channel = grpc.aio.insecure_channel(
            self.server.target, options=[("grpc.use_local_subchannel_pool", 1)]
        )
        self.channels.append(channel)
        return broker_pb2_grpc.BrokerStub(channel)

    async def create_huge_topics(self) -> None:
        stub = self.stub()
        metadata = _metadata("creator")
        while not self.stopping.is_set():
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.CreateTopic(pb.CreateTopicRequest(name="huge", partitions=10_000),
                                       timeout=CALL_TIMEOUT_S, metadata=metadata)
            error = from_rpc_error(raised.value)
            assert isinstance(error, ResourceLimitExceededError), error
            assert error.limit == "RLIMIT_NOFILE"
            self.creates_refused += 1

    async def subscribe_idle(self) -> None:
        stubs = [self.stub() for _ in range(SUBSCRIBER_CONNECTIONS)]
        metadata = _metadata("subscriber")
        request = pb.SubscribeRequest(topic="idle", offset=0)
        self.subscribe_calls = [stubs[i % SUBSCRIBER_CONNECTIONS].Subscribe(
            request, metadata=metadata) for i in range(SUBSCRIBERS)]

    async def long_polls(self) -> None:
        stub = self.stub()
        metadata = _metadata("poller")
        request = pb.FetchByOffsetRequest(topic="polled", offset=0, max_wait_ms=30_000)

        async def poll() -> None:
            while not self.stopping.is_set():
                try:
                    await stub.FetchByOffset(request, timeout=60, metadata=metadata)
                    self.polls_answered += 1
                except grpc.aio.AioRpcError as exc:
                    error = from_rpc_error(exc)
                    assert isinstance(error, ResourceLimitExceededError), error
                    # The connection's limit; or the principal's, should gRPC have opened a
                    # second connection for the channel (both 1,024).
                    assert error.limit in (
                        "waiting_rpcs_per_connection_max", "waiting_rpcs_per_client_max"
                    ), error
                    self.polls_refused += 1
                    # Refused at once: asking again at once would be a busy loop of refusals.
                    await asyncio.sleep(1)

        await asyncio.gather(*(poll() for _ in range(LONG_POLLS)))

    async def bombs(self) -> None:
        stub = self.stub()
        metadata = _metadata("bomber")
        while not self.stopping.is_set():
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await stub.Produce(self.bomb, timeout=CALL_TIMEOUT_S, metadata=metadata)
            error = from_rpc_error(raised.value)
            assert type(error) is RecordTooLargeError, error
            assert "produce_decompressed_bytes_max" in error.message
            self.bombs_refused += 1

    async def close(self) -> None:
        """Cancel the streams and the long polls: every channel closed."""
        for call in self.subscribe_calls:
            call.cancel()
        for channel in self.channels:
            await channel.close()
        self.channels.clear()


def _loop_thread_times(pid: int) -> tuple[float, float]:
    """Seconds the process's main thread (the server's event loop) spent on a CPU and waiting
    for one (runnable, but another task had the CPU): the kernel's schedstat."""
    on_cpu_ns, waiting_ns, _ = Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()
    return int(on_cpu_ns) / 1e9, int(waiting_ns) / 1e9


def _setup(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        metadata = _metadata("creator")
        for topic in ("read", "idle", "polled", "bomb"):
            stub.CreateTopic(pb.CreateTopicRequest(name=topic, partitions=1),
                             timeout=CALL_TIMEOUT_S, metadata=metadata)
        batch = build_batch([(T0 + i, None, b"record-%d" % i, ()) for i in range(READER_RECORDS)])
        stub.Produce(pb.ProduceRequest(topic="read", record_batches=batch),
                     timeout=CALL_TIMEOUT_S, metadata=metadata)


def _start_other_client(server: ServerProcess) -> subprocess.Popen[str]:
    reader = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("other_client.py")), server.target,
         "read", str(READER_RECORDS), str(OTHER_CLIENT_DEADLINE_S), "reader",
         _password("reader")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    assert reader.stdout is not None
    assert reader.stdout.readline().strip() == "ready"
    return reader


def _stop_other_client(reader: subprocess.Popen[str]) -> dict[str, object]:
    out, _ = reader.communicate("stop\n", timeout=CALL_TIMEOUT_S)
    assert reader.returncode == 0, out
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


async def test_the_probes_attacks_at_once_leave_another_client_served_and_a_restart(
    start_server: Callable[..., ServerProcess], tmp_path: Path, bomb_request: pb.ProduceRequest
) -> None:
    credentials = tmp_path / "credentials.json"
    store = CredentialFile()
    for user in _USERS:
        store = store.with_user(user, _password(user), _ITERATIONS)
    store.save(credentials)
    data_dir = tmp_path / "data"
    flags = ("--authentication-credentials-file", str(credentials),
             # Every client is on loopback: no one on the path to read the passwords.
             "--authentication-plaintext-allowed", "true")
    server = start_server(data_dir, *flags, rlimits=_nofile(OPEN_FILES_LIMIT))
    _setup(server)
    reader = _start_other_client(server)
    attack = _Attack(server, bomb_request)
    polls = asyncio.ensure_future(attack.long_polls())
    try:
        attack.phase("start")
        repeated = asyncio.gather(attack.create_huge_topics(), attack.bombs())
        await attack.subscribe_idle()
        await until(lambda: server.metric('stratalog_waiting_rpcs{kind="subscribe"}')
                     == SUBSCRIBERS, "every idle subscriber admitted")
        attack.phase("subscribers in")
        await until(lambda: server.metric('stratalog_waiting_rpcs{kind="long_poll"}')
                     == LONG_POLLS_ADMITTED, "the long polls the connection may hold admitted")
        attack.phase("long polls in")
        await asyncio.sleep(ATTACK_S)
        await until(lambda: min(attack.creates_refused, attack.bombs_refused) >= ROUNDS,
                     f"{ROUNDS} huge CreateTopics and {ROUNDS} bombs refused")
        assert attack.polls_refused >= LONG_POLLS - LONG_POLLS_ADMITTED
        attack.phase("stopping")
        attack.stopping.set()
        await repeated  # their last calls answered
        if polls.done():
            polls.result()  # a long poll failed otherwise than refused: its error
    finally:
        attack.stopping.set()
        polls.cancel()
        await attack.close()
        result = _stop_other_client(reader)
    attack.phase("stopped")
    report = attack.report(result)
    print("\n" + report)
    assert result["failures"] == [], f"{result['failures']}\n{report}"
    assert result["rounds"] >= ROUNDS  # type: ignore[operator]
    await until(lambda: server.metric('stratalog_waiting_rpcs{kind="subscribe"}') == 0
                 and server.metric('stratalog_waiting_rpcs{kind="long_poll"}') == 0,
                 "the attackers' waiting RPCs ended on the server")
    assert server.stop() == 0, server.log_text()[-4000:]

    again = start_server(data_dir, *flags, rlimits=_nofile(OPEN_FILES_LIMIT))
    with grpc.insecure_channel(again.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        metadata = _metadata("reader")
        topics = stub.ListTopics(pb.ListTopicsRequest(), timeout=CALL_TIMEOUT_S,
                                 metadata=metadata).topics
        assert sorted(t.name for t in topics) == ["bomb", "idle", "polled", "read"]
        fetched = stub.FetchByOffset(pb.FetchByOffsetRequest(topic="read", offset=0),
                                     timeout=CALL_TIMEOUT_S, metadata=metadata)
        assert [r.value for r in fetched.records] == [
            b"record-%d" % i for i in range(READER_RECORDS)]
        # No bomb left anything behind, and the topic takes records.
        produced = stub.Produce(pb.ProduceRequest(topic="bomb", records=[pb.Record(value=b"v")]),
                                timeout=CALL_TIMEOUT_S, metadata=metadata)
        assert produced.base_offset == 0
    assert again.stop() == 0, again.log_text()[-4000:]
