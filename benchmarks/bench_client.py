"""Client throughput against a real stratalog server: the Producer and the Consumer, records/s.

Starts the server (``python -m stratalog.server``) as a separate process on 127.0.0.1 with a
free port and a temporary log directory, then runs, in this one client process:

  produce send()       Producer.send() per record in one task, then flush(); only the last
                       future is kept (keeping a million futures alive makes Python's cyclic
                       garbage collector walk them over and over: about +0.8 us per record);
                       one partition, null keys, 100-byte values
  produce send_many()  Producer.send_many() with lists of 10,000 values, same records
  consume records      ``async for record in Consumer`` over the partition, start to end
  consume batches      ``async for batch in Consumer.batches()``, counting ``len(batch)``

Each figure is records / wall-clock second of the whole operation (produce: from the first
send to the last acknowledgement), the median of ``--runs`` runs, on a fresh topic per run;
"client CPU us/rec" is this process's CPU time per record (median), which other load on the
machine disturbs much less than wall-clock rates.
The server shares the machine's cores with the client, as it would in a one-machine deployment.
Figures depend on whether the C codec (stratalog.records.accel) is built: the header says.

``--secured`` runs the same operations, in the same run and in turns with the plain server,
against a second server with the authorizer on (``authorizer = "acl"``, one ACL: ALL on every
topic for the caller, ``User:ANONYMOUS``) and byte-rate quotas set far above what the benchmark
moves (so every answer is measured and none delayed): the cost of issue 13's authorization and
quotas, printed as the secured / plain ratio of each figure.

Run: ``.venv/bin/python -m benchmarks.bench_client [--records 1000000] [--runs 3] [--secured]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

from stratalog.client import Client, Consumer, Producer

VALUE_SIZE_BYTES = 100
SEND_MANY_CHUNK = 10_000
#: Quotas no benchmark reaches (bytes per second): every answer is measured, none delayed.
UNREACHED_BYTE_RATE = 10**12


def secured_flags(data_dir: str) -> list[str]:
    """Server flags for the authorizer with one ACL (written into ``data_dir`` now: ALL on every
    topic for ``User:ANONYMOUS``, the principal of calls without credentials) and quotas far
    above what a benchmark moves."""
    from pathlib import Path

    from stratalog.server.security.acl_store import AclStore
    from stratalog.server.security.acls import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
    )

    AclStore.open([Path(data_dir)]).write([AclBinding(
        ResourceType.TOPIC, "*", PatternType.LITERAL, "User:ANONYMOUS", "*", AclOperation.ALL,
        AclPermissionType.ALLOW,
    )])
    return ["--authorizer", "acl",
            "--quota-producer-byte-rate", str(UNREACHED_BYTE_RATE),
            "--quota-consumer-byte-rate", str(UNREACHED_BYTE_RATE)]


@contextlib.contextmanager
def running_server(secured: bool = False) -> Iterator[str]:
    """A stratalog server process on 127.0.0.1 with a free port (with ``secured``: see
    :func:`secured_flags`); yields its target."""
    data_dir = tempfile.mkdtemp(prefix="stratalog-bench-")
    extra = secured_flags(data_dir) if secured else []
    process = subprocess.Popen(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
         "--log-dirs", data_dir, "--metrics-port", "0", "--logging-level", "WARNING", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        target = None
        assert process.stdout is not None
        for line in process.stdout:
            match = re.search(r"listening on (\S+:\d+)", line)
            if match:
                target = match.group(1)
                break
        if target is None:
            raise RuntimeError("the server exited before printing its port")
        yield target
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def make_values(count: int) -> list[bytes]:
    # Distinct values (a counter in front of filler), so nothing is shared between records.
    filler = b"x" * VALUE_SIZE_BYTES
    return [(b"%010d" % i + filler)[:VALUE_SIZE_BYTES] for i in range(count)]


async def produce_send(client: Client, topic: str, values: list[bytes]) -> tuple[float, float]:
    cpu = time.process_time()
    started = time.perf_counter()
    async with Producer(client, linger_ms=5) as producer:
        send = producer.send
        for value in values:
            last = await send(topic, value, partition=0)
        await producer.flush()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert (await last).offset == len(values) - 1
    return len(values) / elapsed, cpu / len(values) * 1e6


async def produce_send_many(
    client: Client, topic: str, values: list[bytes]
) -> tuple[float, float]:
    cpu = time.process_time()
    started = time.perf_counter()
    async with Producer(client, linger_ms=5) as producer:
        pending = [
            await producer.send_many(topic, values[i : i + SEND_MANY_CHUNK], partition=0)
            for i in range(0, len(values), SEND_MANY_CHUNK)
        ]
        await producer.flush()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert pending[-1].done()
    return len(values) / elapsed, cpu / len(values) * 1e6


async def consume_records(client: Client, topic: str, expected: int) -> tuple[float, float]:
    cpu = time.process_time()
    started = time.perf_counter()
    count = 0
    async with Consumer(client, topic, start="earliest") as consumer:
        async for _record in consumer:
            count += 1
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert count == expected, (count, expected)
    return count / elapsed, cpu / count * 1e6


async def consume_batches(client: Client, topic: str, expected: int) -> tuple[float, float]:
    cpu = time.process_time()
    started = time.perf_counter()
    count = 0
    async with Consumer(client, topic, start="earliest") as consumer:
        async for batch in consumer.batches():
            count += len(batch)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert count == expected, (count, expected)
    return count / elapsed, cpu / count * 1e6


Figures = dict[str, list[tuple[float, float]]]


async def one_run(client: Client, values: list[bytes], run_index: int, figures: Figures) -> None:
    records = len(values)
    one = f"bench-send-{run_index}"
    many = f"bench-many-{run_index}"
    await client.create_topic(one, 1)
    await client.create_topic(many, 1)
    figures["produce send()"].append(await produce_send(client, one, values))
    figures["produce send_many()"].append(await produce_send_many(client, many, values))
    figures["consume records"].append(await consume_records(client, one, records))
    figures["consume batches"].append(await consume_batches(client, many, records))
    await client.delete_topic(one)
    await client.delete_topic(many)


def _empty_figures() -> Figures:
    return {"produce send()": [], "produce send_many()": [], "consume records": [],
            "consume batches": []}


async def run(targets: dict[str, str], records: int, runs: int) -> dict[str, Figures]:
    """Every run on every server, the servers taking turns (their order rotating each run), so
    that the machine's other load falls on them alike."""
    values = make_values(records)
    figures = {name: _empty_figures() for name in targets}
    clients = {name: Client(target) for name, target in targets.items()}
    names = list(targets)
    try:
        for run_index in range(runs):
            shift = run_index % len(names)
            for name in names[shift:] + names[:shift]:
                await one_run(clients[name], values, run_index, figures[name])
    finally:
        for client in clients.values():
            await client.close()
    return figures


def codec_path() -> str:
    try:
        from stratalog.records import accel  # type: ignore[attr-defined]
    except ImportError:
        return "pure Python (stratalog.records.accel not present)"
    return "C extension" if getattr(accel, "ACCELERATED", False) else "pure Python fallback"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--secured", action="store_true",
                        help="also against a server with the authorizer (one ACL) and quotas")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    print(f"# bench_client: {args.records} records of {VALUE_SIZE_BYTES} bytes, "
          f"median of {args.runs} runs")
    print(f"# python {platform.python_version()}, {os.cpu_count()} cores, {loop_name}, "
          f"record codec: {codec_path()}")
    with contextlib.ExitStack() as stack:
        targets = {"plain": stack.enter_context(running_server())}
        if args.secured:
            targets["secured"] = stack.enter_context(running_server(secured=True))
        by_server = asyncio.run(run(targets, args.records, args.runs))
    for server, figures in by_server.items():
        if args.secured:
            print(f"# {server} server"
                  + (": authorizer on, one ACL, quotas not reached" if server == "secured"
                     else ": authorizer none, no quotas"))
        print(f"{'operation':<22}{'median rec/s':>14}{'min':>12}{'max':>12}{'of goal':>9}"
              f"{'client CPU us/rec':>19}")
        for name, results in figures.items():
            rates = [rate for rate, _ in results]
            cpu_us = statistics.median(cpu for _, cpu in results)
            print(f"{name:<22}{statistics.median(rates):>14,.0f}{min(rates):>12,.0f}"
                  f"{max(rates):>12,.0f}{statistics.median(rates) / 1_000_000:>9.0%}"
                  f"{cpu_us:>19.2f}")
    if args.secured:
        print(f"{'secured / plain':<22}{'median rec/s':>14}   per run")
        for name in by_server["plain"]:
            plain = [rate for rate, _ in by_server["plain"][name]]
            secured = [rate for rate, _ in by_server["secured"][name]]
            ratios = ", ".join(f"{s / p:.2f}" for s, p in zip(secured, plain, strict=True))
            print(f"{name:<22}{statistics.median(secured) / statistics.median(plain):>14.2f}"
                  f"   {ratios}")


if __name__ == "__main__":
    main()
