"""`stratalog produce` against real server processes (issue 25): lines sent as they arrive
through a slow pipe and a terminal, a server that does not answer at the start or stops
mid-stream, lines without the key separator, tombstones and headers read back by `consume`."""

from __future__ import annotations

import json
import os
import pty
import selectors
import subprocess
import sys
import time

import pytest

from stratalog.client import LATEST, SyncClient

CLI = [sys.executable, "-m", "stratalog.cli"]
#: How soon a line written to the producer must be printed by a following consumer. The
#: producer lingers 5 ms and the consumer long-polls, so ~50 ms is usual; the bound is for a
#: loaded 2-core machine. Before issue 25 a line waited for the end of the input: forever here.
LINE_LATENCY_BOUND_S = 5.0
#: Bounds a wait for a process that should end or print: it only turns a hang into a failure.
WAIT_S = 60.0


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}


def stratalog(target: str, *args: str, stdin: bytes | None = None):
    return subprocess.run([*CLI, *args, "--target", target], input=stdin, capture_output=True,
                          timeout=WAIT_S, env=_env())


def _create(server, topic: str, partitions: int = 1) -> None:
    with SyncClient(server.target) as client:
        client.create_topic(topic, partitions)


class _Follower:
    """`stratalog consume TOPIC --follow`: the lines it prints, each read as soon as it is."""

    def __init__(self, server, topic: str) -> None:
        self.process = subprocess.Popen(
            [*CLI, "consume", topic, "--follow", "--target", server.target],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
        )
        self._pending = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)

    def next_line(self, timeout_s: float = WAIT_S) -> bytes:
        deadline = time.monotonic() + timeout_s
        fd = self.process.stdout.fileno()
        while b"\n" not in self._pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                raise AssertionError(f"consumer printed nothing within {timeout_s} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"consumer ended: {self.process.stderr.read()!r}")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line

    def close(self) -> None:
        self._selector.close()
        self.process.kill()
        self.process.communicate(timeout=WAIT_S)


def _latencies(follower: _Follower, write, lines: list[bytes]) -> list[float]:
    """Write each line, and measure until the follower prints it."""
    latencies = []
    for line in lines:
        written = time.monotonic()
        write(line + b"\n")
        assert follower.next_line() == line
        latencies.append(time.monotonic() - written)
    return latencies


def test_lines_through_a_slow_pipe_are_sent_as_they_come(server):
    _create(server, "pr-pipe")
    follower = _Follower(server, "pr-pipe")
    producer = subprocess.Popen([*CLI, "produce", "pr-pipe", "--target", server.target],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        def write(data: bytes) -> None:
            producer.stdin.write(data)
            producer.stdin.flush()

        # The first line also waits for both processes to start: not measured.
        write(b"warm-up\n")
        assert follower.next_line() == b"warm-up"
        latencies = _latencies(follower, write, [b"one", b"two", b"three"])
        producer.stdin.close()
        assert producer.wait(WAIT_S) == 0
        assert b"produced 4 records to pr-pipe" in producer.stderr.read()
    finally:
        if producer.poll() is None:
            producer.kill()
        follower.close()
    assert max(latencies) < LINE_LATENCY_BOUND_S, latencies


def test_lines_typed_at_a_terminal_are_sent_as_typed_and_ctrl_d_ends(server):
    _create(server, "pr-tty")
    follower = _Follower(server, "pr-tty")
    controller, terminal = pty.openpty()
    producer = subprocess.Popen([*CLI, "produce", "pr-tty", "--target", server.target],
                                stdin=terminal, stderr=subprocess.PIPE, env=_env())
    os.close(terminal)
    try:
        def write(data: bytes) -> None:
            os.write(controller, data)

        write(b"warm-up\n")
        assert follower.next_line() == b"warm-up"
        latencies = _latencies(follower, write, [b"typed one", b"typed two"])
        write(b"\x04")  # Ctrl-D at the start of a line: the end of the input
        assert producer.wait(WAIT_S) == 0
        assert b"produced 3 records to pr-tty" in producer.stderr.read()
    finally:
        if producer.poll() is None:
            producer.kill()
        os.close(controller)
        follower.close()
    assert max(latencies) < LINE_LATENCY_BOUND_S, latencies


def test_no_server_at_the_start_fails_at_once_without_waiting_for_input(server):
    # It used to print one warning, then wait the delivery timeout (30 s) without a word.
    started = time.monotonic()
    producer = subprocess.Popen([*CLI, "produce", "anything", "--target", "127.0.0.1:1"],
                                stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        _, err = producer.communicate(timeout=WAIT_S)  # stdin open, no line ever written
    finally:
        if producer.poll() is None:
            producer.kill()
    elapsed = time.monotonic() - started
    stderr = err.decode().splitlines()
    assert producer.returncode == 3, stderr
    assert len(stderr) == 1 and stderr[0].startswith(
        "stratalog produce: no server answers at 127.0.0.1:1: "), stderr
    # Well under the 30 s delivery timeout it waited before (consume fails the same way).
    assert elapsed < 15, elapsed


def test_an_unknown_topic_is_refused_before_any_line_is_read(start_server, tmp_path):
    # A server that does not create topics on a producer's first request (the default does:
    # tests/integration/test_server_topic_creation.py).
    own = start_server(tmp_path / "data", "--auto-create-topics-enable", "false")
    result = stratalog(own.target, "produce", "pr-no-such-topic", stdin=b"x\n")
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "stratalog produce: unknown topic 'pr-no-such-topic' [UNKNOWN_TOPIC_OR_PARTITION]"]


@pytest.mark.parametrize("transactional", [False, True])
def test_a_server_stopping_mid_stream_gets_a_countdown_then_exit_3(
    start_server, tmp_path, transactional
):
    own = start_server(tmp_path / "data")
    _create(own, "pr-stop")
    extra = ["--transactional-id", "pr-stop"] if transactional else []
    producer = subprocess.Popen(
        [*CLI, "produce", "pr-stop", "--delivery-timeout-ms", "5000", *extra,
         "--target", own.target],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(),
    )
    try:
        producer.stdin.write(b"before\n")
        producer.stdin.flush()
        with SyncClient(own.target) as client:
            deadline = time.monotonic() + WAIT_S
            while client.list_offsets("pr-stop", 0, LATEST).offset < 1:
                assert time.monotonic() < deadline, "the first line was never stored"
                time.sleep(0.1)
        own.kill()
        stopped = time.monotonic()
        producer.stdin.write(b"after\n")
        producer.stdin.close()
        producer.wait(WAIT_S)  # its few lines of stderr fit the pipe
        err = producer.stderr.read()
    finally:
        if producer.poll() is None:
            producer.kill()
    elapsed = time.monotonic() - stopped
    stderr = err.decode()
    assert producer.returncode == 3, stderr
    lines = stderr.splitlines()
    # At once: the Producer's first failure; then the countdown; then the outcome.
    assert lines[0].startswith("stratalog produce: retrying"), lines
    assert any("records not acknowledged for" in line and "giving up on them in" in line
               for line in lines), lines
    if transactional:
        # The commit fails at the delivery timeout, the abort too (not the library's 60 s).
        assert lines[-1].startswith("stratalog produce: stopped: aborting the open "
                                    "transaction failed"), lines
        assert lines[-1].endswith("0 records in 0 transactions were committed before"), lines
    else:
        assert lines[-1].startswith("produced 1 records to pr-stop in "), lines
        assert "1 failed: " in lines[-1] and "delivery_timeout_ms=5000" in lines[-1], lines
    assert elapsed < WAIT_S


def _consumed_json(server, topic: str) -> list[dict]:
    result = stratalog(server.target, "consume", topic, "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_line_without_the_key_separator_stops_with_its_number(server):
    _create(server, "pr-keys")
    result = stratalog(server.target, "produce", "pr-keys", "--key-separator", ":",
                       stdin=b"a:1\nb:2\nno separator\nc:3\n")
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert lines[0].startswith("produced 2 records to pr-keys"), lines
    assert lines[-1] == ("stratalog produce: stopped: line 3 has no key separator ':': "
                         "'no separator' (--allow-keyless-lines sends such lines without a "
                         "key)"), lines
    # The lines before it were sent; none after.
    assert [(r["key"], r["value"]) for r in _consumed_json(server, "pr-keys")] == [
        ("a", "1"), ("b", "2")]

    allowed = stratalog(server.target, "produce", "pr-keys", "--key-separator", ":",
                        "--allow-keyless-lines", stdin=b"no separator\nd:4\n")
    assert allowed.returncode == 0, allowed.stderr
    assert [(r["key"], r["value"]) for r in _consumed_json(server, "pr-keys")][2:] == [
        (None, "no separator"), ("d", "4")]


def test_a_bad_line_aborts_the_open_transaction(server):
    _create(server, "pr-keys-txn")
    result = stratalog(server.target, "produce", "pr-keys-txn", "--key-separator", ":",
                       "--transactional-id", "pr-keys-txn", "--transaction-records", "2",
                       stdin=b"a:1\nb:2\nc:3\nbad\n")
    assert result.returncode == 1
    message = result.stderr.decode()
    assert "stratalog produce: stopped: line 4 has no key separator" in message
    assert ("stopped: the open transaction was aborted; 2 records in 1 transactions were "
            "committed before") in message
    committed = stratalog(server.target, "consume", "pr-keys-txn", "--isolation-level",
                          "read_committed")
    assert committed.stdout.decode().splitlines() == ["1", "2"]


def test_tombstones_and_headers_round_trip_through_consume(server):
    _create(server, "pr-headers")
    result = stratalog(server.target, "produce", "pr-headers", "--key-separator", ":",
                       "--empty-as-null", "-H", "source=cli", "--header", "source=again",
                       "--header", "empty=", stdin=b"user-1:clicked\nuser-1:\n")
    assert result.returncode == 0, result.stderr
    records = _consumed_json(server, "pr-headers")
    headers = [["source", "cli"], ["source", "again"], ["empty", ""]]
    assert [(r["key"], r["value"], r["headers"]) for r in records] == [
        ("user-1", "clicked", headers), ("user-1", None, headers)]

    text = stratalog(server.target, "consume", "pr-headers", "--print-headers", "--print-key")
    assert text.stdout.decode().splitlines() == [
        "source:cli,source:again,empty:\tuser-1\tclicked",
        "source:cli,source:again,empty:\tuser-1\tnull",
    ]
    # Without --empty-as-null an empty line is an empty value, as in Kafka's console producer.
    assert stratalog(server.target, "produce", "pr-headers", stdin=b"\n").returncode == 0
    plain = stratalog(server.target, "consume", "pr-headers", "--print-headers", "--from", "2")
    assert plain.stdout.decode().splitlines() == ["NO_HEADERS\t"]


@pytest.mark.parametrize("header", ["novalue", "=value"])
def test_a_header_without_key_or_equals_is_a_usage_error(server, header):
    result = stratalog(server.target, "produce", "pr-headers", "--header", header, stdin=b"x\n")
    assert result.returncode == 2
    assert result.stderr.decode().strip() == (
        f"stratalog produce: --header takes KEY=VALUE (KEY= for an empty value), got "
        f"{header!r}")


def test_allow_keyless_lines_needs_a_key_separator(server):
    result = stratalog(server.target, "produce", "pr-headers", "--allow-keyless-lines",
                       stdin=b"x\n")
    assert result.returncode == 2
    assert "--allow-keyless-lines needs --key-separator" in result.stderr.decode()
