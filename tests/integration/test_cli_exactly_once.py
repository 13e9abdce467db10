"""`stratalog produce` in transactions and `stratalog consume --isolation-level` against a real
server: commits every N records, an error or an interrupt aborting the open transaction, the
option checks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from stratalog.client import LATEST, IsolationLevel, SyncClient

CLI = [sys.executable, "-m", "stratalog.cli"]


def stratalog(server, *args: str, stdin: bytes | None = None):
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    return subprocess.run(
        [*CLI, *args, "--target", server.target],
        input=stdin, capture_output=True, timeout=120, env=env,
    )


def consumed(server, topic: str, level: str) -> list[str]:
    result = stratalog(server, "consume", topic, "--isolation-level", level)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode().splitlines()


def test_produce_commits_every_n_records_and_read_committed_sees_them(server):
    with SyncClient(server.target) as client:
        client.create_topic("cli-eo-commits", 1)
    lines = b"".join(b"line-%d\n" % i for i in range(7))
    result = stratalog(server, "produce", "cli-eo-commits", "--transactional-id", "cli-eo-a",
                       "--transaction-records", "3", stdin=lines)
    assert result.returncode == 0, result.stderr
    assert "produced 7 records to cli-eo-commits in 3 transactions" in result.stderr.decode()
    expected = [f"line-{i}" for i in range(7)]
    assert consumed(server, "cli-eo-commits", "read_committed") == expected
    assert consumed(server, "cli-eo-commits", "read_uncommitted") == expected
    with SyncClient(server.target) as client:
        assert client.describe_transaction("cli-eo-a").state == "CompleteCommit"


def test_an_error_aborts_the_open_transaction_and_exits_1(server):
    with SyncClient(server.target) as client:
        client.create_topic("cli-eo-error", 1, {"max.message.bytes": "2000"})
    lines = b"a\nb\nc\n" + b"x" * 5000 + b"\nd\n"
    result = stratalog(server, "produce", "cli-eo-error", "--transactional-id", "cli-eo-b",
                       "--transaction-records", "2", stdin=lines)
    assert result.returncode == 1
    message = result.stderr.decode()
    assert "RECORD_TOO_LARGE" in message
    assert ("stratalog produce: stopped: the open transaction was aborted; 2 records in 1 "
            "transactions were committed before") in message
    assert consumed(server, "cli-eo-error", "read_committed") == ["a", "b"]


def test_an_interrupt_aborts_the_open_transaction_and_exits_130(server):
    # Ctrl-C while the input is still open, after two commits: those two transactions stay
    # committed, the open one (the lines after them) is aborted.
    with SyncClient(server.target) as client:
        client.create_topic("cli-eo-interrupt", 1)
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    producer = subprocess.Popen(
        [*CLI, "produce", "cli-eo-interrupt", "--transactional-id", "cli-eo-c",
         "--transaction-records", "4000", "--target", server.target],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    try:
        producer.stdin.write(b"".join(b"%d\n" % i for i in range(8100)))
        producer.stdin.flush()  # and left open: the command waits for more lines
        with SyncClient(server.target) as client:
            deadline = time.monotonic() + 60
            # Records 0-3999, a marker, 4001-8000, a marker, then the open transaction's 100
            # at 8002-8101: once they are stored, the command has seen both commits confirmed
            # (it sends them only then), and the third transaction is open.
            while client.list_offsets("cli-eo-interrupt", 0, LATEST).offset < 8102:
                assert time.monotonic() < deadline, "the third transaction's records not stored"
                time.sleep(0.1)
            assert client.list_offsets("cli-eo-interrupt", 0, LATEST,
                                       isolation_level=IsolationLevel.READ_COMMITTED
                                       ).offset == 8002
        producer.send_signal(signal.SIGINT)
        assert producer.wait(60) == 130
        err = producer.stderr.read().decode()
    finally:
        if producer.poll() is None:
            producer.kill()
    assert ("stratalog produce: interrupted: the open transaction was aborted; 8000 records in "
            "2 transactions were committed before") in err, err
    committed = consumed(server, "cli-eo-interrupt", "read_committed")
    assert committed == [str(i) for i in range(8000)]
    # The open transaction's records were either stored then aborted, or dropped unsent.
    assert consumed(server, "cli-eo-interrupt", "read_uncommitted")[:8000] == committed


def test_without_idempotence_and_read_committed_of_plain_records(server):
    with SyncClient(server.target) as client:
        client.create_topic("cli-eo-plain", 1)
    result = stratalog(server, "produce", "cli-eo-plain", "--no-idempotence",
                       stdin=b"one\ntwo\n")
    assert result.returncode == 0, result.stderr
    # Records written outside transactions are committed for read_committed readers.
    assert consumed(server, "cli-eo-plain", "read_committed") == ["one", "two"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("produce", "t", "--transaction-records", "5"), "needs --transactional-id"),
        (("produce", "t", "--transactional-id", "x", "--transaction-records", "0"),
         "--transaction-records must be >= 1"),
        (("produce", "t", "--transactional-id", "x", "--no-idempotence"),
         "--transactional-id needs idempotence"),
        (("produce", "t", "--transactional-id", ""), "must not be empty"),
        (("consume", "t", "--isolation-level", "serializable"), "invalid choice"),
    ],
)
def test_bad_exactly_once_options_exit_2(server, args, message):
    result = stratalog(server, *args, stdin=b"")
    assert result.returncode == 2
    assert message in result.stderr.decode()


def test_empty_input_commits_nothing(server):
    with SyncClient(server.target) as client:
        client.create_topic("cli-eo-empty", 1)
    result = stratalog(server, "produce", "cli-eo-empty", "--transactional-id", "cli-eo-d",
                       stdin=b"")
    assert result.returncode == 0, result.stderr
    assert "produced 0 records to cli-eo-empty in 0 transactions" in result.stderr.decode()
    assert consumed(server, "cli-eo-empty", "read_committed") == []
