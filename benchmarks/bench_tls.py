"""What TLS costs gRPC's own transport, per MiB on each side, and what gRPC's settings change.

Issue 13's goal allows secured bulk traffic at most 15% fewer records/s than plaintext. This
benchmark takes stratalog out of the picture: a no-op Broker server (Produce answers at once) in a
process of its own, plaintext or TLS, with the stratalog server's process settings (allocator
thresholds, GIL switch interval), and a client process that sends pre-built Produce requests of
``--message-bytes`` each, ``--in-flight`` at once, ``--mib`` MiB per turn. Every variant has its
own server; the variants take turns round after round, the order rotating, so that the machine's
other load falls on all alike; a fresh client process takes each turn (gRPC reads
GRPC_EXPERIMENTS once per process). Figures per variant, medians of ``--rounds`` turns:

  MB/s             payload bytes over the wall-clock seconds of the turn
  client ms/MiB    the client process's CPU time (all threads) per MiB sent
  server ms/MiB    the server process's CPU time (/proc/PID/stat, all threads) per MiB received
  x plain          MB/s over the plaintext variant's with the same message size in the same
                   round, the median over the rounds

When the two processes share two cores the rate follows the sum of the two CPU figures, so the
sum's growth is what TLS costs here; where the clients run elsewhere each side pays its own.

``--sweep`` picks the variants (each a server of its own):

  tls          plaintext, TLS (default)
  sizes        both at 64 KiB, 256 KiB, 1 MiB and 4 MiB per message
  options      TLS with the gRPC arguments that shape reads, frames and flow control
  experiments  TLS with gRPC core's secure-endpoint and TCP experiments (GRPC_EXPERIMENTS)

``--parts`` (default all three):

  bulk        the sweep above
  ciphers     the seal speed of AES-128-GCM, AES-256-GCM and ChaCha20-Poly1305 on 16 KiB records
              (TLS's largest) through the ``cryptography`` package's OpenSSL, as cycles per byte
              at the CPU's reported clock: the cipher's own share of the per-side cost above.
              grpcio's BoringSSL has kernels of the same class (VAES/VPCLMULQDQ where the CPU has
              them); the figure includes a Python call per record, so it is an upper bound
  handshake   ``--connections`` new channels, one call each, against servers with an ECDSA P-256,
              an RSA-2048 and an RSA-3072 certificate and a plaintext one: wall ms and CPU ms per
              connection on each side (the handshake, not bulk, is what the key type changes)

gRPC's TLS here is its default: TLS 1.3, AES-128-GCM (BoringSSL offers it first on CPUs with AES
instructions and the server follows the client's order), X25519; GRPC_SSL_CIPHER_SUITES only
applies to TLS 1.2. The certificates are made here, self-signed, in a temporary directory.

Run: ``.venv/bin/python -m benchmarks.bench_tls [--sweep tls|sizes|options|experiments]
[--rounds 8] [--mib 256] [--parts bulk,ciphers,handshake]``. Figures: docs/performance.md
("Issue 13: what TLS costs bulk traffic").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from benchmarks.bench_server import _cpu_s, _process, _serve_noop
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MIB = 1 << 20
#: TLS's largest record (RFC 8446 5.1): the unit the ciphers are timed on.
TLS_RECORD_BYTES = 16 * 1024
_WARM_UP_CALLS = 4

GrpcOptions = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Variant:
    """One server and the clients that take its turns."""

    name: str
    tls: bool
    message_bytes: int = MIB
    server_options: GrpcOptions = ()
    client_options: GrpcOptions = ()
    #: GRPC_EXPERIMENTS for both processes ("" leaves gRPC's defaults).
    experiments: str = ""


def _both(name: str, tls: bool, *options: tuple[str, int], **kwargs: Any) -> Variant:
    """A variant whose gRPC arguments go to the server and to the client alike."""
    return Variant(name, tls, server_options=options, client_options=options, **kwargs)


SWEEPS: dict[str, list[Variant]] = {
    "tls": [Variant("plaintext", False), Variant("TLS", True)],
    "sizes": [
        Variant(f"{kind} {size // 1024} KiB", kind == "TLS", message_bytes=size)
        for size in (64 * 1024, 256 * 1024, MIB, 4 * MIB) for kind in ("plaintext", "TLS")
    ],
    "options": [
        Variant("plaintext", False),
        Variant("TLS", True),
        # The HTTP/2 frames the peer may send: 16 KiB by default, up to 16 MiB - 1.
        _both("TLS max_frame_size 16M", True, ("grpc.http2.max_frame_size", 16 * MIB - 1)),
        # Flow control: a fixed 4 MiB window instead of the BDP estimator's.
        _both("TLS window 4M, no BDP", True, ("grpc.http2.bdp_probe", 0),
              ("grpc.http2.lookahead_bytes", 4 * MIB)),
        # The server's TCP reads: bigger first and smallest reads, so fewer, larger slices
        # reach the frame protector.
        Variant("TLS read chunk 256K", True, server_options=(
            ("grpc.experimental.tcp_read_chunk_size", 256 * 1024),
            ("grpc.experimental.tcp_min_read_chunk_size", 256 * 1024))),
        _both("TLS write buffer 4M", True, ("grpc.http2.write_buffer_size", 4 * MIB)),
    ],
    "experiments": [
        Variant("plaintext", False),
        Variant("TLS", True),
        *(Variant(f"TLS {name}", True, experiments=name) for name in (
            "tsi_frame_protector_without_locks",
            "secure_endpoint_read_coalescing",
            "pipelined_read_secure_endpoint",
            "secure_endpoint_offload_large_reads,secure_endpoint_offload_large_writes",
            "tcp_rcv_lowat",
            "tcp_frame_size_tuning",
        )),
    ],
}

#: Server certificate key types of the handshake part.
KEY_TYPES = ("ECDSA P-256", "RSA-2048", "RSA-3072")


# ------------------------------------------------------------------------ certificates


def make_certificate(directory: Path, key_type: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost; returns (cert, key) paths. The
    certificate is its own CA: the client trusts the cert file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    if key_type == "ECDSA P-256":
        key: Any = ec.generate_private_key(ec.SECP256R1())
    else:
        key = rsa.generate_private_key(65537, int(key_type.removeprefix("RSA-")))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .sign(key, hashes.SHA256()))
    stem = directory / key_type.replace(" ", "-")
    cert_path, key_path = stem.with_suffix(".crt"), stem.with_suffix(".key")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


# ------------------------------------------------------------------------ the two processes


def _channel(target: str, ca_file: str | None, options: Sequence[tuple[str, Any]]) -> Any:
    options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), *options]
    if ca_file is None:
        return grpc.aio.insecure_channel(target, options=options)
    credentials = grpc.ssl_channel_credentials(Path(ca_file).read_bytes())
    return grpc.aio.secure_channel(target, credentials, options=options)


async def _send(target: str, ca_file: str | None, options: GrpcOptions, requests: int,
                message_bytes: int, in_flight: int) -> tuple[float, float]:
    """Send ``requests`` Produce requests of ``message_bytes``; (wall s, this process's CPU s)
    from the first request to the last answer, after a few warm-up calls."""
    request = pb.ProduceRequest(topic="t", record_batches=os.urandom(message_bytes))
    async with _channel(target, ca_file, options) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        for _ in range(_WARM_UP_CALLS):
            await stub.Produce(request)
        queue = iter(range(requests))

        async def worker() -> None:
            for _ in queue:
                await stub.Produce(request)

        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return time.perf_counter() - started, time.process_time() - cpu


def _run_loop(coroutine: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


@contextlib.contextmanager
def _server(tls_files: tuple[str, str] | None, options: GrpcOptions,
            experiments: str = "") -> Iterator[tuple[str, int]]:
    """A no-op server process, with TLS if ``tls_files`` = (certificate file, key file); yields
    its target and pid, and stops it at the end."""
    args = [sys.executable, "-m", "benchmarks.bench_tls", "serve",
            "--grpc-options", json.dumps(options)]
    if tls_files is not None:
        args += ["--cert", tls_files[0], "--key", tls_files[1]]
    env = dict(os.environ, GRPC_EXPERIMENTS=experiments) if experiments else None
    with _process(args, env) as (target, _, pid):
        yield target, pid


# ------------------------------------------------------------------------ the three parts


@dataclass
class _Figures:
    rates: list[float] = field(default_factory=list)
    client_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)


def bulk(variants: list[Variant], rounds: int, mib: int, in_flight: int, pki: Path) -> None:
    """The bulk part: every variant's server, ``rounds`` turns each; prints the table."""
    cert, key = make_certificate(pki, "ECDSA P-256")
    figures = {variant.name: _Figures() for variant in variants}
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(_server(
            (str(cert), str(key)) if v.tls else None, v.server_options, v.experiments))
            for v in variants]
        pairs = list(zip(variants, servers, strict=True))
        for turn in range(rounds):
            shift = turn % len(pairs)
            for variant, (target, pid) in pairs[shift:] + pairs[:shift]:
                requests = max(1, mib * MIB // variant.message_bytes)
                env = dict(os.environ)
                if variant.experiments:
                    env["GRPC_EXPERIMENTS"] = variant.experiments
                server_cpu = _cpu_s(pid)
                sent = subprocess.run(
                    [sys.executable, "-m", "benchmarks.bench_tls", "send", target,
                     "--requests", str(requests), "--message-bytes", str(variant.message_bytes),
                     "--in-flight", str(in_flight),
                     "--grpc-options", json.dumps(variant.client_options),
                     *(["--ca", str(cert)] if variant.tls else [])],
                    env=env, capture_output=True, text=True, check=False)
                if sent.returncode != 0:
                    raise RuntimeError(f"the client of {variant.name!r} exited with "
                                       f"{sent.returncode}:\n{sent.stderr}")
                server_cpu = _cpu_s(pid) - server_cpu
                wall, client_cpu = json.loads(sent.stdout.strip().splitlines()[-1])
                sent_mib = requests * variant.message_bytes / MIB
                result = figures[variant.name]
                result.rates.append(sent_mib * MIB / wall / 1e6)
                result.client_ms.append(client_cpu * 1000 / sent_mib)
                result.server_ms.append(server_cpu * 1000 / sent_mib)
    print(f"{'variant':<34}{'MB/s':>8}{'x plain':>9}{'client ms/MiB':>15}{'server ms/MiB':>15}"
          f"{'sum':>7}   MB/s per turn")
    for variant in variants:
        result = figures[variant.name]
        plain = next((v for v in variants
                      if not v.tls and v.message_bytes == variant.message_bytes), variants[0])
        # The ratio of each round's two turns, then the median: the turns of one round met the
        # same load, the rounds did not.
        ratio = statistics.median(r / p for r, p in zip(
            result.rates, figures[plain.name].rates, strict=True))
        client, server = statistics.median(result.client_ms), statistics.median(result.server_ms)
        print(f"{variant.name[:33]:<34}{statistics.median(result.rates):>8.0f}{ratio:>9.2f}"
              f"{client:>15.3f}{server:>15.3f}{client + server:>7.3f}   "
              + " ".join(f"{r:.0f}" for r in result.rates))


def _cpu_hz() -> float | None:
    """The clock /proc/cpuinfo reports (a VM's nominal one), or None."""
    with contextlib.suppress(OSError):
        match = re.search(r"^cpu MHz\s*:\s*([\d.]+)", Path("/proc/cpuinfo").read_text(), re.M)
        if match:
            return float(match.group(1)) * 1e6
    return None


def ciphers(records: int = 4000, repeats: int = 5) -> None:
    """Seal ``records`` 16 KiB records with each AEAD, best of ``repeats``."""
    from cryptography.hazmat.backends.openssl import backend
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

    hz = _cpu_hz()
    print(f"# {backend.openssl_version_text()}, one {TLS_RECORD_BYTES // 1024} KiB record a "
          f"call, best of {repeats}" + (f", cycles at {hz / 1e9:.2f} GHz" if hz else ""))
    record = os.urandom(TLS_RECORD_BYTES)
    nonce = os.urandom(12)
    print(f"{'cipher':<20}{'GB/s':>8}{'ms/MiB':>9}{'cycles/B':>10}")
    for name, cipher in (("AES-128-GCM", AESGCM(os.urandom(16))),
                         ("AES-256-GCM", AESGCM(os.urandom(32))),
                         ("ChaCha20-Poly1305", ChaCha20Poly1305(os.urandom(32)))):
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(records):
                cipher.encrypt(nonce, record, None)
            best = min(best, time.perf_counter() - started)
        rate = records * TLS_RECORD_BYTES / best
        cycles = f"{hz / rate:>10.2f}" if hz else f"{'?':>10}"
        print(f"{name:<20}{rate / 1e9:>8.2f}{MIB / rate * 1000:>9.3f}{cycles}")


async def _connect_and_call(target: str, ca_file: str | None, connections: int) -> None:
    request = pb.ProduceRequest(topic="t")
    for _ in range(connections):
        async with _channel(target, ca_file, ()) as channel:
            await broker_pb2_grpc.BrokerStub(channel).Produce(request)


def handshake(connections: int, rounds: int, pki: Path) -> None:
    """New channels with one call each, against a server per certificate key type."""
    kinds: list[tuple[str, tuple[str, str] | None]] = [("plaintext", None)]
    for key_type in KEY_TYPES:
        cert, key = make_certificate(pki, key_type)
        kinds.append((key_type, (str(cert), str(key))))
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in kinds}
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(_server(files, ())) for _, files in kinds]
        for turn in range(rounds):
            shift = turn % len(kinds)
            pairs = list(zip(kinds, servers, strict=True))
            for (name, files), (target, pid) in pairs[shift:] + pairs[:shift]:
                server_cpu, client_cpu = _cpu_s(pid), time.process_time()
                started = time.perf_counter()
                _run_loop(_connect_and_call(target, files[0] if files else None, connections))
                samples[name].append((
                    (time.perf_counter() - started) * 1000 / connections,
                    (time.process_time() - client_cpu) * 1000 / connections,
                    (_cpu_s(pid) - server_cpu) * 1000 / connections))
    print(f"# {connections} connections a turn (new channel, one Produce, close), "
          f"median of {rounds} turns")
    print(f"{'server certificate':<20}{'wall ms':>9}{'client CPU ms':>15}{'server CPU ms':>15}")
    for name, _ in kinds:
        wall, client, server = (statistics.median(s[i] for s in samples[name]) for i in range(3))
        print(f"{name:<20}{wall:>9.2f}{client:>15.2f}{server:>15.2f}")


# ------------------------------------------------------------------------ entry points


def _child(argv: list[str]) -> None:
    """The server (``serve``) and client (``send``) processes of the bulk part."""
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=("serve", "send"))
    parser.add_argument("target", nargs="?")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--ca")
    parser.add_argument("--grpc-options", default="[]")
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument("--message-bytes", type=int, default=MIB)
    parser.add_argument("--in-flight", type=int, default=4)
    args = parser.parse_args(argv)
    options: GrpcOptions = tuple((str(k), int(v)) for k, v in json.loads(args.grpc_options))
    if args.role == "serve":
        # The stratalog server's process settings (server/app.py), as bench_server's no-op has.
        from stratalog.server.allocator import limit_arenas, tune_allocator
        from stratalog.server.settings import Settings

        tune_allocator(Settings().malloc_mmap_threshold_bytes)
        limit_arenas(Settings().malloc_arena_max)
        sys.setswitchinterval(Settings().gil_switch_interval_us / 1e6)
        tls = (args.cert, args.key) if args.cert and args.key else None
        _run_loop(_serve_noop(0, tls, options))
        return
    wall, cpu = _run_loop(_send(args.target, args.ca, options, args.requests,
                                args.message_bytes, args.in_flight))
    print(json.dumps([wall, cpu]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("serve", "send"):
        _child(sys.argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", choices=sorted(SWEEPS), default="tls")
    parser.add_argument("--rounds", type=int, default=8, help="turns each variant takes")
    parser.add_argument("--mib", type=int, default=256, help="MiB each turn sends")
    parser.add_argument("--in-flight", type=int, default=4)
    parser.add_argument("--connections", type=int, default=100,
                        help="connections a turn of the handshake part")
    parser.add_argument("--parts", default="bulk,ciphers,handshake",
                        help="comma-separated: bulk, ciphers, handshake")
    args = parser.parse_args()
    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    unknown = parts - {"bulk", "ciphers", "handshake"}
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}: choose from bulk, ciphers, handshake")
    print(f"# bench_tls: grpcio {grpc.__version__}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="stratalog-bench-tls-") as pki:
        if "bulk" in parts:
            print(f"## bulk: --sweep {args.sweep}, {args.mib} MiB a turn, {args.in_flight} in "
                  f"flight, median of {args.rounds} turns")
            bulk(SWEEPS[args.sweep], args.rounds, args.mib, args.in_flight, Path(pki))
        if "ciphers" in parts:
            print("## ciphers")
            ciphers()
        if "handshake" in parts:
            print("## handshake")
            handshake(args.connections, max(3, args.rounds // 2), Path(pki))


if __name__ == "__main__":
    main()
