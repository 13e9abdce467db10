"""Exactly-once through server crashes: producers keep sending while the server is killed with
SIGKILL and restarted on the same port, many times; afterwards every partition is checked.

Two producers run in this process against a real server process:

* an idempotent Producer (the default) sends numbered records to three partitions, several
  batches in flight; it retries through every kill until its delivery timeout. Per partition
  the stored values must be the sent ones, each at most once, in send order, and every
  acknowledged record must be stored at the offset it was acknowledged with.
* a transactional Producer runs transactions of 2 x 10 records over two partitions, committing
  most and aborting some; a kill may land before, during or after the commit (its outcome is
  then unknown to the test, so a new Producer with the same transactional id takes over, which
  aborts or completes what was left). Once, it also abandons an open transaction before a
  kill, which the server must abort when it times out, after its restart. A READ_COMMITTED
  read must then show every committed transaction whole and exactly once, nothing of an
  aborted one, and a transaction of unknown outcome whole or not at all; and the last stable
  offset must reach the log end again (nothing left hanging).

Process kills leave the page cache intact: this checks producer-state recovery (.snapshot
plus a scan of the log), the coordinator's state log and the completion of prepared
transactions after a restart, not power loss. The loop runs for ``STRATALOG_CRASH_SECONDS``
seconds (default 30).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stratalog.client import Client, Consumer, IsolationLevel, Producer, StratalogError
from stratalog.client.wire import LATEST
from tests.integration.conftest import free_port

BUDGET_S = float(os.environ.get("STRATALOG_CRASH_SECONDS", "30"))
STARTUP_TIMEOUT_S = 60.0
IDEMPOTENT_TOPIC = "eos-idempotent"
TRANSACTIONAL_TOPIC = "eos-transactional"
IDEMPOTENT_PARTITIONS = 3
TXN_PARTITIONS = 2
RECORDS_PER_TXN_PARTITION = 10
TXN_TIMEOUT_MS = 3000
# Small segments so that kills also land in rolls (and their .snapshot writes).
TOPIC_CONFIGS = {"segment.bytes": "8192", "segment.index.bytes": "4096"}
SERVER_ENV = {
    # The server's checks for timed-out transactions and its maintenance pass run often, so
    # that an abandoned transaction is aborted within a few seconds.
    "STRATALOG_MAINTENANCE_INTERVAL_MS": "100",
    "STRATALOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "200",
}
_LISTENING = re.compile(rb"stratalog: listening on \S+:(\d+)")


class KillableServer:
    """A server process on a fixed port (clients reconnect to the same target after a kill)."""

    def __init__(self, data_dir: Path, port: int) -> None:
        self.data_dir = data_dir
        self.port = port
        self.log_path = data_dir.parent / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
        env.update(SERVER_ENV)
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "stratalog.server", "--listen", self.target,
                 "--metrics-port", "-1", "--log-dirs", str(self.data_dir)],
                stdout=subprocess.PIPE, stderr=log, env=env,
            )
        assert self.process.stdout is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if _LISTENING.search(line):
                return
        self.process.kill()
        self.process.wait()
        raise AssertionError(f"the server did not start; log:\n{self.log_text()[-4000:]}")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(60)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class IdempotentRun:
    """What the idempotent producer sent and what was acknowledged, per partition."""

    def __init__(self) -> None:
        self.sent: dict[int, list[int]] = {p: [] for p in range(IDEMPOTENT_PARTITIONS)}
        self.acked: dict[int, dict[int, int]] = {p: {} for p in range(IDEMPOTENT_PARTITIONS)}
        self.failed: list[str] = []


async def run_idempotent(target: str, stop: asyncio.Event, run: IdempotentRun) -> None:
    producer = Producer(target, linger_ms=2, batch_bytes_max=2048, request_timeout_s=5.0,
                        retry_backoff_max_ms=500)
    futures = []
    n = 0
    try:
        while not stop.is_set():
            partition = n % IDEMPOTENT_PARTITIONS
            future = await producer.send(IDEMPOTENT_TOPIC, str(n).encode(), partition=partition)
            run.sent[partition].append(n)
            futures.append((partition, n, future))
            n += 1
            if n % 20 == 0:
                await asyncio.sleep(0.005)
        await producer.flush()
    finally:
        await producer.close()
    for partition, number, future in futures:
        try:
            metadata = future.result()
        except StratalogError as exc:
            run.failed.append(f"{partition}:{number}: {exc}")
        else:
            run.acked[partition][number] = metadata.offset


class TransactionalRun:
    """Each transaction's number and outcome: committed, aborted or unknown."""

    def __init__(self) -> None:
        self.outcomes: dict[int, str] = {}
        self.abandoned: int | None = None


async def run_transactional(
    target: str, stop: asyncio.Event, run: TransactionalRun, abandon: asyncio.Event,
    abandoned: asyncio.Event, rng: random.Random,
) -> None:
    txn = 0

    def new_producer() -> Producer:
        return Producer(target, transactional_id="eos-crash-loop", linger_ms=1,
                        transaction_timeout_ms=TXN_TIMEOUT_MS, request_timeout_s=5.0,
                        retry_backoff_max_ms=500)

    producer = new_producer()
    try:
        while not stop.is_set():
            txn += 1
            commit = rng.random() >= 0.2
            try:
                await producer.begin_transaction()
                for i in range(RECORDS_PER_TXN_PARTITION):
                    for partition in range(TXN_PARTITIONS):
                        await producer.send(TRANSACTIONAL_TOPIC, f"{txn}:{i}".encode(),
                                            partition=partition)
                if abandon.is_set() and run.abandoned is None:
                    # Leave this one open: its producer goes away without a word.
                    await producer.flush()
                    run.abandoned = txn
                    run.outcomes[txn] = "aborted"  # by the server, once it times out
                    await producer.close()
                    abandoned.set()
                    producer = new_producer()
                    continue
                if commit:
                    await producer.commit_transaction()
                    run.outcomes[txn] = "committed"
                else:
                    await producer.abort_transaction()
                    run.outcomes[txn] = "aborted"
            except StratalogError:
                # A kill made the outcome unknown (or fenced this instance): start over with a
                # new instance, whose InitProducerId completes or aborts what was left.
                run.outcomes[txn] = "unknown"
                await producer.close()
                await asyncio.sleep(0.2)
                producer = new_producer()
    finally:
        await producer.close()


async def read_all(
    target: str, topic: str, partitions: int, isolation_level: IsolationLevel
) -> dict[int, list[tuple[int, bytes]]]:
    """(offset, value) of every record each partition shows at ``isolation_level``."""
    found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    async with Consumer(target, topic, isolation_level=isolation_level) as consumer:
        async for record in consumer:
            assert record.value is not None
            found[record.partition].append((record.offset, record.value))
    return found


async def wait_until_stable(client: Client, topic: str, partitions: int, timeout_s: float) -> None:
    """Until every partition's last stable offset equals its log end offset."""
    deadline = time.monotonic() + timeout_s
    while True:
        behind = []
        for partition in range(partitions):
            end = (await client.list_offsets(topic, partition, LATEST)).offset
            stable = (await client.list_offsets(
                topic, partition, LATEST, isolation_level=IsolationLevel.READ_COMMITTED)).offset
            if stable != end:
                behind.append((partition, stable, end))
        if not behind:
            return
        assert time.monotonic() < deadline, (
            f"the last stable offset never reached the log end of {topic}: "
            f"(partition, LSO, log end) {behind}"
        )
        await asyncio.sleep(0.2)


@pytest.mark.slow
async def test_exactly_once_through_server_kills(tmp_path: Path) -> None:
    server = KillableServer(tmp_path / "data", free_port())
    server.start()
    rng = random.Random(int(os.environ.get("STRATALOG_CRASH_SEED", "4321")))
    loop = asyncio.get_running_loop()
    try:
        async with Client(server.target) as admin:
            await admin.create_topic(IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS, TOPIC_CONFIGS)
            await admin.create_topic(TRANSACTIONAL_TOPIC, TXN_PARTITIONS, TOPIC_CONFIGS)
        stop, abandon, abandoned = asyncio.Event(), asyncio.Event(), asyncio.Event()
        idempotent, transactional = IdempotentRun(), TransactionalRun()
        tasks = [
            asyncio.create_task(run_idempotent(server.target, stop, idempotent)),
            asyncio.create_task(run_transactional(
                server.target, stop, transactional, abandon, abandoned, rng)),
        ]
        deadline = time.monotonic() + BUDGET_S
        kills = 0
        while time.monotonic() < deadline or kills < 4:
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            for task in tasks:
                if task.done():
                    task.result()  # a producer failed: raise its error here
            if kills == 1:
                abandon.set()
                await asyncio.wait_for(abandoned.wait(), 30)
            server.kill()
            kills += 1
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            await loop.run_in_executor(None, server.start)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 180)

        async with Client(server.target) as client:
            # The abandoned transaction (and any a kill left open) ends by the server's timeout.
            await wait_until_stable(client, TRANSACTIONAL_TOPIC, TXN_PARTITIONS,
                                    TXN_TIMEOUT_MS / 1000 + 30)
            await wait_until_stable(client, IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS, 30)

        # Idempotent: each sent record at most once, in send order; every acknowledged one at
        # its acknowledged offset.
        stored = await read_all(server.target, IDEMPOTENT_TOPIC, IDEMPOTENT_PARTITIONS,
                                IsolationLevel.READ_UNCOMMITTED)
        acked_total = 0
        for partition in range(IDEMPOTENT_PARTITIONS):
            numbers = [int(value) for _, value in stored[partition]]
            assert len(numbers) == len(set(numbers)), (
                f"partition {partition}: duplicates stored, e.g. "
                f"{sorted(n for n in set(numbers) if numbers.count(n) > 1)[:5]}"
            )
            assert numbers == sorted(numbers), f"partition {partition}: stored out of send order"
            assert set(numbers) <= set(idempotent.sent[partition])
            by_number = {int(value): offset for offset, value in stored[partition]}
            for number, offset in idempotent.acked[partition].items():
                assert by_number.get(number) == offset, (
                    f"partition {partition}: record {number} acknowledged at offset {offset}, "
                    f"stored at {by_number.get(number)}"
                )
            acked_total += len(idempotent.acked[partition])
        assert acked_total > 0
        assert not idempotent.failed, (
            f"{len(idempotent.failed)} records failed although the producer retries until its "
            f"delivery timeout: {idempotent.failed[:3]}"
        )

        # Transactional: read_committed shows committed transactions whole and once, nothing
        # aborted, unknown ones whole or not at all.
        committed_view = await read_all(server.target, TRANSACTIONAL_TOPIC, TXN_PARTITIONS,
                                        IsolationLevel.READ_COMMITTED)
        seen: dict[int, list[str]] = {}
        for partition in range(TXN_PARTITIONS):
            for _, value in committed_view[partition]:
                txn, i = value.decode().split(":")
                seen.setdefault(int(txn), []).append(f"{partition}:{i}")
        whole = sorted(f"{p}:{i}" for i in range(RECORDS_PER_TXN_PARTITION)
                       for p in range(TXN_PARTITIONS))
        for txn, outcome in sorted(transactional.outcomes.items()):
            records = sorted(seen.get(txn, []))
            if outcome == "committed":
                assert records == whole, f"committed transaction {txn} shows {records}"
            elif outcome == "aborted":
                assert records == [], f"aborted transaction {txn} shows {records}"
            else:
                assert records in ([], whole), f"transaction {txn} shows part: {records}"
        assert set(seen) <= set(transactional.outcomes), "records of no transaction we ran"
        assert transactional.abandoned is not None
        assert list(transactional.outcomes.values()).count("committed") > 0
        # read_uncommitted shows the aborted records too: they were written, then aborted.
        everything = await read_all(server.target, TRANSACTIONAL_TOPIC, TXN_PARTITIONS,
                                    IsolationLevel.READ_UNCOMMITTED)
        abandoned_values = {f"{transactional.abandoned}:{i}".encode()
                            for i in range(RECORDS_PER_TXN_PARTITION)}
        assert abandoned_values <= {v for _, v in everything[0]}
        print(f"{kills} kills; {acked_total} idempotent records acknowledged; transactions: "
              f"{ {o: list(transactional.outcomes.values()).count(o) for o in ('committed', 'aborted', 'unknown')} }")
    finally:
        if server.process is not None and server.process.poll() is None:
            server.kill()
