"""Client throughput against a real stratalog server: the Producer and the Consumer, records/s.

Starts the server (``python -m stratalog.server``) as a separate process on 127.0.0.1 with a
free port and a temporary log directory, then runs, in this one client process:

  produce send()       Producer.send() per record in one task, then flush(); only the last
                       future is kept (keeping a million futures alive makes Python's cyclic
                       garbage collector walk them over and over: about +0.8 us per record);
                       one partition, null keys, 100-byte values
  produce send_many()  Producer.send_many() with lists of 10,000 values, same records
  produce send_many() unkeyed  (with ``--unkeyed``) the same send_many() without a partition,
                       to a topic of 3 partitions: the sticky partitioner's cost, and how
                       evenly it spread the records (printed after the table)
  consume records      ``async for record in Consumer`` over the partition, start to end
  consume batches      ``async for batch in Consumer.batches()``, counting ``len(batch)``

Each figure is records / wall-clock second of the whole operation (produce: from the first
send to the last acknowledgement), the median of ``--runs`` runs, on a fresh topic per run;
"client CPU us/rec" is this process's CPU time per record (median), which other load on the
machine disturbs much less than wall-clock rates.
The server shares the machine's cores with the client, as it would in a one-machine deployment.
Figures depend on whether the C codec (stratalog.records.accel) is built: the header says.

With ``--secure`` a second server runs beside the first with TLS and password authentication
on (benchmarks/security_setup.py), and each run measures both, in alternating order, so that
the machine's other load falls on both alike; a third table gives secure / plain per operation.
``--acl`` turns the authorizer on in that second server, with one ACL (ALL on every topic for
its caller) and byte-rate quotas it never reaches (every answer measured, none delayed): with
``--secure`` the issue 13 goal's configuration (TLS + authentication + one ACL), without it the
authorizer and quotas alone on a plaintext server.

With ``--compare-unary`` each run measures the same server twice, in alternating order: through
a default Client (Produce and the fetches on its Session stream) and through
``Client(sessions=False)`` (unary calls), and a third table gives session / unary.

Run: ``.venv/bin/python -m benchmarks.bench_client [--records 1000000] [--runs 3] [--secure]
[--acl] [--compare-unary]``.
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
from pathlib import Path

from stratalog.client import Client, Consumer, Producer

VALUE_SIZE_BYTES = 100
SEND_MANY_CHUNK = 10_000


def server_argv(data_dir: str, *extra_flags: str) -> list[str]:
    """The command line of a benchmark's stratalog server: 127.0.0.1 with a free port (it prints
    ``listening on HOST:PORT``), log directory ``data_dir``, warnings only."""
    return [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0",
            "--log-dirs", data_dir, "--metrics-port", "0", "--logging-level", "WARNING",
            *extra_flags]


@contextlib.contextmanager
def running_server(*extra_flags: str, acl_principal: str | None = None) -> Iterator[str]:
    """A stratalog server process on 127.0.0.1 with a free port; yields its target. With
    ``acl_principal``: the authorizer on, one ACL for that principal, unreached quotas."""
    data_dir = tempfile.mkdtemp(prefix="stratalog-bench-")
    if acl_principal is not None:
        from benchmarks.security_setup import authorizer_flags

        extra_flags += authorizer_flags(Path(data_dir), acl_principal)
    process = subprocess.Popen(
        server_argv(data_dir, *extra_flags),
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


async def produce_send_many_unkeyed(
    client: Client, topic: str, values: list[bytes]
) -> tuple[float, float]:
    cpu = time.process_time()
    started = time.perf_counter()
    async with Producer(client, linger_ms=5) as producer:
        pending = [
            await producer.send_many(topic, values[i : i + SEND_MANY_CHUNK])
            for i in range(0, len(values), SEND_MANY_CHUNK)
        ]
        await producer.flush()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    assert pending[-1].done()
    info = await client.describe_topic(topic)
    SPREADS.append([p.log_end_offset for p in info.partitions])
    return len(values) / elapsed, cpu / len(values) * 1e6


#: Records per partition of each unkeyed run (--unkeyed), printed after the table.
SPREADS: list[list[int]] = []


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


_OPERATIONS = ("produce send()", "produce send_many()", "consume records", "consume batches")
Figures = dict[str, list[tuple[float, float]]]


async def one_run(client: Client, values: list[bytes], run_index: int, figures: Figures) -> None:
    records = len(values)
    one = f"bench-send-{run_index}"
    many = f"bench-many-{run_index}"
    await client.create_topic(one, 1)
    await client.create_topic(many, 1)
    figures["produce send()"].append(await produce_send(client, one, values))
    figures["produce send_many()"].append(await produce_send_many(client, many, values))
    if "produce send_many() unkeyed" in figures:
        spread = f"bench-unkeyed-{run_index}"
        await client.create_topic(spread, 3)
        figures["produce send_many() unkeyed"].append(
            await produce_send_many_unkeyed(client, spread, values))
        await client.delete_topic(spread)
    figures["consume records"].append(await consume_records(client, one, records))
    figures["consume batches"].append(await consume_batches(client, many, records))
    await client.delete_topic(one)
    await client.delete_topic(many)


async def run(
    targets: list[tuple[str, dict[str, object]]], records: int, runs: int,
    operations: tuple[str, ...] = _OPERATIONS,
) -> list[Figures]:
    """Every run against every target (``(target, Client keyword arguments)``), the targets'
    order rotating from run to run."""
    values = make_values(records)
    figures: list[Figures] = [{name: [] for name in operations} for _ in targets]
    clients = [Client(target, **kwargs) for target, kwargs in targets]  # type: ignore[arg-type]
    try:
        for run_index in range(runs):
            for turn in range(len(targets)):
                index = (run_index + turn) % len(targets)
                await one_run(clients[index], values, run_index, figures[index])
    finally:
        for client in clients:
            await client.close()
    return figures


def print_table(title: str, figures: Figures) -> None:
    print(f"## {title}")
    print(f"{'operation':<28}{'median rec/s':>14}{'min':>12}{'max':>12}{'of goal':>9}"
          f"{'client CPU us/rec':>19}")
    for name, results in figures.items():
        rates = [rate for rate, _ in results]
        cpu_us = statistics.median(cpu for _, cpu in results)
        print(f"{name:<28}{statistics.median(rates):>14,.0f}{min(rates):>12,.0f}"
              f"{max(rates):>12,.0f}{statistics.median(rates) / 1_000_000:>9.0%}"
              f"{cpu_us:>19.2f}")


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
    parser.add_argument("--secure", action="store_true",
                        help="also measure a TLS + password server in the same run")
    parser.add_argument("--acl", action="store_true",
                        help="the second server also has the authorizer on (one ACL) and"
                             " unreached quotas; without --secure it is plaintext")
    parser.add_argument("--compare-unary", action="store_true",
                        help="measure a default Client (sessions) and Client(sessions=False)"
                             " in the same run")
    parser.add_argument("--unkeyed", action="store_true",
                        help="also send_many() without a partition to 3 partitions (sticky)")
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
    if args.compare_unary:
        with running_server() as target:
            session_figures, unary_figures = asyncio.run(run(
                [(target, {}), (target, {"sessions": False})], args.records, args.runs))
        print_table("sessions (the default Client)", session_figures)
        print_table("unary calls (Client(sessions=False))", unary_figures)
        print("## sessions / unary (median rec/s)")
        for name in _OPERATIONS:
            session_rate = statistics.median(rate for rate, _ in session_figures[name])
            unary_rate = statistics.median(rate for rate, _ in unary_figures[name])
            print(f"{name:<22}{session_rate / unary_rate:>8.2f}")
        return
    if not args.secure and not args.acl:
        operations = _OPERATIONS
        if args.unkeyed:
            operations = (*_OPERATIONS[:2], "produce send_many() unkeyed", *_OPERATIONS[2:])
        with running_server() as target:
            (figures,) = asyncio.run(run([(target, {})], args.records, args.runs, operations))
        print_table("plaintext, no authentication", figures)
        for spread in SPREADS:
            print(f"unkeyed run: records per partition {spread}")
        return
    from benchmarks.security_setup import ANONYMOUS, USER, make_secure_setup

    with tempfile.TemporaryDirectory(prefix="stratalog-bench-pki-") as pki_dir:
        flags: tuple[str, ...] = ()
        client_options: dict[str, object] = {}
        title = "plaintext"
        if args.secure:
            setup = make_secure_setup(Path(pki_dir))
            flags, title = setup.server_flags, "TLS + password authentication"
            client_options = {"tls": setup.tls, "auth": setup.auth}
        principal = None
        if args.acl:
            principal = f"User:{USER}" if args.secure else ANONYMOUS
            title += " + authorizer (one ACL) + quotas (not reached)"
        with running_server() as plain, running_server(*flags, acl_principal=principal) as secure:
            plain_figures, secure_figures = asyncio.run(run(
                [(plain, {}), (secure, client_options)], args.records, args.runs))
    print_table("plaintext, no authentication", plain_figures)
    print_table(title, secure_figures)
    print("## secure / plain (median rec/s)")
    for name in _OPERATIONS:
        plain_rate = statistics.median(rate for rate, _ in plain_figures[name])
        secure_rate = statistics.median(rate for rate, _ in secure_figures[name])
        print(f"{name:<22}{secure_rate / plain_rate:>8.2f}")


if __name__ == "__main__":
    main()
