"""The `stratalog` command as Kafka and kcat users type it, against a real server (issue 25).

Item 8: the aliases that mean something here are accepted (``--bootstrap-server``, ``--topic``,
``--from-beginning``, ``--partition 0,1``, ``--offset``/``-o`` with kcat's ``-N``, ``s@``,
``e@``, ``--max-messages``, ``--if-not-exists``, ``--if-exists``), and what is not supported is
refused with the subcommand's usage and a line saying what to use instead. Item 14: offsets
prints a header, describe says ``LogDirIndex``. Item 15: ``dump-log | head`` exits 0, a missing
file is "No such file". The delete-records command, and consume's progress line on stderr.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
import time

import pytest

from stratalog.client import ProducerRecord, SyncClient

from .test_cli import CLI, stratalog


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}


def _topic_with(server, topic: str, lines_by_partition: dict[int, bytes],
                partitions: int | None = None) -> None:
    """A topic holding these lines as records (set up with the client library: the commands
    under test are the ones after it)."""
    with SyncClient(server.target) as client:
        client.create_topic(topic, partitions or len(lines_by_partition))
        for partition, lines in lines_by_partition.items():
            values = lines.splitlines()
            for first in range(0, len(values), _RECORDS_PER_PRODUCE):
                client.produce(topic, partition, values[first:first + _RECORDS_PER_PRODUCE])


#: Records per Produce in _topic_with: a batch well below max.message.bytes.
_RECORDS_PER_PRODUCE = 5000


def _lines(result) -> list[str]:
    return result.stdout.decode().splitlines()


# ------------------------------------------------------------------ item 8: aliases


def test_kafka_console_consumer_spelling_works_as_typed(server):
    _topic_with(server, "habits-console", {0: b"a\nb\nc\n", 1: b"d\n", 2: b"e\nf\n"})
    env = _env()
    # Exactly as a Kafka user types it: --bootstrap-server, --topic, --from-beginning.
    result = subprocess.run(
        [*CLI, "consume", "--bootstrap-server", server.target, "--topic", "habits-console",
         "--from-beginning", "--partition", "0,2", "--max-messages", "4"],
        capture_output=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert sorted(_lines(result)) == ["a", "b", "c", "e"]
    # --bootstrap-server before the subcommand too, as --target is.
    before = subprocess.run([*CLI, "--bootstrap-server", server.target, "topics", "list"],
                            capture_output=True, timeout=120, env=env)
    assert before.returncode == 0, before.stderr
    assert "habits-console" in _lines(before)
    # Kafka's console consumer --offset N with --partition.
    offset = stratalog(server, "consume", "habits-console", "--partition", "0", "--offset", "1")
    assert _lines(offset) == ["b", "c"]


def test_kafka_topics_spelling_works_as_typed(server):
    env = _env()

    def kafka_topics(*args: str):
        return subprocess.run([*CLI, "topics", "--bootstrap-server", server.target, *args],
                              capture_output=True, timeout=120, env=env)

    created = kafka_topics("--create", "--topic", "habits-kt", "--partitions", "2",
                           "--config", "retention.ms=60000", "--if-not-exists")
    assert created.returncode == 0, created.stderr
    assert "habits-kt" in _lines(kafka_topics("--list"))
    described = _lines(kafka_topics("--describe", "--topic", "habits-kt"))
    assert described[0] == "Topic: habits-kt\tPartitionCount: 2\tConfigs: retention.ms=60000"
    refused = kafka_topics("--alter", "--topic", "habits-kt", "--add-config", "retention.ms=1")
    assert refused.returncode == 2
    assert "--add-config: topics alter NAME --set NAME=VALUE" in refused.stderr.decode()
    assert kafka_topics("--delete", "--topic", "habits-kt").returncode == 0
    assert "habits-kt" not in _lines(kafka_topics("--list"))


def test_partition_lists_refuse_a_partition_named_twice(server):
    _topic_with(server, "habits-twice", {0: b"a\n", 1: b"b\n"})
    twice = stratalog(server, "consume", "habits-twice", "--partition", "0,1",
                      "--partition", "1")
    assert twice.returncode == 2
    assert "partition 1 is given twice" in twice.stderr.decode()
    bad = stratalog(server, "offsets", "habits-twice", "--partition", "0,x")
    assert bad.returncode == 2
    assert "expected a partition number, got 'x'" in bad.stderr.decode()


def test_tail_start_prints_the_last_n_records_of_each_partition(server):
    _topic_with(server, "habits-tail", {0: b"".join(b"p0-%d\n" % i for i in range(20)),
                                        1: b"p1-0\n", 2: b""})
    result = stratalog(server, "consume", "habits-tail", "-o", "-3", "--print-metadata")
    assert result.returncode == 0, result.stderr
    rows = sorted(tuple(line.split("\t")[::3]) for line in _lines(result))
    # Partition 0: its last three; partition 1 holds fewer than 3: all of it; 2 is empty.
    assert rows == [("0", "p0-17"), ("0", "p0-18"), ("0", "p0-19"), ("1", "p1-0")]

    # Below the log start (after delete-records), the tail starts at the log start.
    deleted = stratalog(server, "delete-records", "habits-tail", "--partition", "0",
                        "--offset", "18")
    assert deleted.returncode == 0, deleted.stderr
    trimmed = stratalog(server, "consume", "habits-tail", "--partition", "0", "--from", "-5")
    assert (trimmed.returncode, _lines(trimmed)) == (0, ["p0-18", "p0-19"]), trimmed.stderr


def test_kcat_timestamp_start_and_stop(server):
    # Records timestamped on either side of a boundary an hour ago.
    boundary_ms = int(time.time() * 1000) - 3_600_000
    with SyncClient(server.target) as client:
        client.create_topic("habits-time", 2)
        client.produce("habits-time", 0, [
            ProducerRecord(b"old-0", timestamp_ms=boundary_ms - 2000),
            ProducerRecord(b"old-1", timestamp_ms=boundary_ms - 1),
            ProducerRecord(b"new-0", timestamp_ms=boundary_ms)])
        client.produce("habits-time", 1, [
            ProducerRecord(b"old-2", timestamp_ms=boundary_ms - 1000),
            ProducerRecord(b"new-1", timestamp_ms=boundary_ms + 1000),
            # Not printed by e@: a partition stops at its first record at or after the time.
            ProducerRecord(b"late-but-old", timestamp_ms=boundary_ms - 500)])

    before = stratalog(server, "consume", "habits-time", "-o", "beginning", "-o",
                       f"e@{boundary_ms}")
    assert before.returncode == 0, before.stderr
    assert sorted(_lines(before)) == ["old-0", "old-1", "old-2"]
    assert before.stderr.decode().startswith("stopping each partition before ")
    assert f"({boundary_ms} ms)" in before.stderr.decode()
    after = stratalog(server, "consume", "habits-time", "-o", f"s@{boundary_ms}")
    assert sorted(_lines(after)) == ["late-but-old", "new-0", "new-1"]
    # e@ ends a --follow too, once every partition reached it (kcat's behaviour): this would
    # wait forever if the stop were not applied.
    follow = stratalog(server, "consume", "habits-time", "--follow", "-o", f"e@{boundary_ms}")
    assert follow.returncode == 0, follow.stderr
    assert sorted(_lines(follow)) == ["old-0", "old-1", "old-2"]


def test_if_not_exists_and_if_exists(server):
    assert stratalog(server, "topics", "create", "habits-once").returncode == 0
    again = stratalog(server, "topics", "create", "--topic", "habits-once", "--partitions", "3")
    assert again.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in again.stderr.decode()
    tolerated = stratalog(server, "topics", "create", "habits-once", "--partitions", "3",
                          "--if-not-exists")
    assert tolerated.returncode == 0, tolerated.stderr
    assert "already exists; left as it is" in tolerated.stderr.decode()
    # Left as it is: still one partition, not three.
    described = json.loads(stratalog(server, "topics", "describe", "habits-once",
                                     "--format", "json").stdout)
    assert len(described["partitions"]) == 1

    assert stratalog(server, "topics", "delete", "habits-once").returncode == 0
    gone = stratalog(server, "topics", "delete", "habits-once")
    assert gone.returncode == 1
    quiet = stratalog(server, "topics", "delete", "habits-once", "--if-exists")
    assert quiet.returncode == 0, quiet.stderr
    assert "does not exist; nothing deleted" in quiet.stderr.decode()


# ------------------------------------------------------------------ item 8: refusals


@pytest.mark.parametrize(
    ("args", "usage", "hint"),
    [
        (("offsets", "t", "--group", "g"), "usage: stratalog offsets ",
         "--group: consumer groups: stratalog consume T --group G reads as a member"),
    ],
)
def test_unsupported_flags_print_the_subcommands_usage_and_what_to_use(server, args, usage,
                                                                       hint):
    result = stratalog(server, *args)
    assert result.returncode == 2
    err = result.stderr.decode()
    assert err.startswith(usage), err  # the subcommand's, not the top-level usage
    assert "unrecognized arguments: " in err
    assert hint in err, err


# ------------------------------------------------------------------ item 14: labelled output


def test_offsets_prints_a_header_and_describe_names_the_log_dir_index(server):
    _topic_with(server, "habits-columns", {0: b"a\nb\n", 1: b"c\n"})
    latest = _lines(stratalog(server, "offsets", "habits-columns"))
    assert latest[0].split() == ["TOPIC", "PARTITION", "OFFSET", "TIMESTAMP"]
    assert [row.split() for row in latest[1:]] == [
        ["habits-columns", "0", "2", "-"], ["habits-columns", "1", "1", "-"]]
    # The columns line up under their headers.
    column = latest[0].index("OFFSET")
    assert [row[column:].split()[0] for row in latest] == ["OFFSET", "2", "1"]
    by_max = _lines(stratalog(server, "offsets", "habits-columns", "--time", "max"))
    assert by_max[1].split()[3].endswith("Z")  # a timestamp where the lookup found a record
    # kafka-get-offsets.sh's -1, -2, -3: latest, earliest, max.
    assert _lines(stratalog(server, "offsets", "--topic", "habits-columns", "--time", "-1")) \
        == latest
    earliest = _lines(stratalog(server, "offsets", "habits-columns", "--time", "-2"))
    assert [row.split()[2] for row in earliest[1:]] == ["0", "0"]
    assert _lines(stratalog(server, "offsets", "habits-columns", "--time", "-3")) == by_max
    help_text = stratalog(server, "offsets", "--help").stdout.decode()
    assert "TIMESTAMP" in help_text and "positions, not records" in help_text

    described = stratalog(server, "topics", "describe", "habits-columns").stdout.decode()
    assert "\tLogDirIndex: 0" in described and "LogDir: " not in described
    assert "LogDirIndex" in stratalog(server, "topics", "describe", "--help").stdout.decode()


# ------------------------------------------------------------------ delete-records


def test_delete_records_moves_the_log_start_as_kafka_delete_records(server):
    _topic_with(server, "habits-delete", {0: b"a\nb\nc\nd\n", 1: b"e\nf\n"})
    result = stratalog(server, "delete-records", "habits-delete", "--partition", "0",
                       "--offset", "3")
    assert result.returncode == 0, result.stderr
    assert _lines(result) == ["Records delete operation completed:",
                              "partition: habits-delete-0\tlow_watermark: 3"]
    assert _lines(stratalog(server, "consume", "habits-delete", "--partition", "0")) == ["d"]
    # -1 (Kafka's value) is the high watermark: everything written so far.
    everything = stratalog(server, "delete-records", "--topic", "habits-delete", "--offset",
                           "-1", "--format", "json")
    assert everything.returncode == 0, everything.stderr
    assert json.loads(everything.stdout) == [
        {"topic": "habits-delete", "partition": 0, "low_watermark": 4},
        {"topic": "habits-delete", "partition": 1, "low_watermark": 2}]
    assert stratalog(server, "consume", "habits-delete").stdout == b""
    # Past the end: the server's refusal, naming the partition and its range.
    past = stratalog(server, "delete-records", "habits-delete", "--partition", "1",
                     "--offset", "99")
    assert past.returncode == 1
    assert "habits-delete-1" in past.stderr.decode()
    assert "OFFSET_OUT_OF_RANGE" in past.stderr.decode()
    missing = stratalog(server, "delete-records", "habits-delete", "--partition", "5",
                        "--offset", "0")
    assert missing.returncode == 1
    assert "partitions [5] do not exist" in missing.stderr.decode()


def test_delete_records_takes_kafkas_offset_json_file(server, tmp_path):
    _topic_with(server, "habits-json-a", {0: b"a\nb\nc\n", 1: b"d\ne\n"})
    _topic_with(server, "habits-json-b", {0: b"f\ng\n"})
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "habits-json-a", "partition": 1, "offset": 1},
        {"topic": "habits-json-b", "partition": 0, "offset": -1},
        {"topic": "habits-json-a", "partition": 0, "offset": 2}]}))
    result = stratalog(server, "delete-records", "--offset-json-file", str(offsets))
    assert result.returncode == 0, result.stderr
    assert _lines(result) == ["Records delete operation completed:",
                              "partition: habits-json-a-1\tlow_watermark: 1",
                              "partition: habits-json-b-0\tlow_watermark: 2",
                              "partition: habits-json-a-0\tlow_watermark: 2"]
    assert sorted(_lines(stratalog(server, "consume", "habits-json-a"))) == ["c", "e"]
    assert stratalog(server, "consume", "habits-json-b").stdout == b""



# ------------------------------------------------------------------ progress on stderr


def _run_with_stderr_on_a_terminal(args: list[str], stdout_path) -> tuple[int, str]:
    """Run the command with stdout to a file and stderr on a pseudo-terminal; returns the exit
    code and what the terminal showed."""
    controller, terminal = pty.openpty()
    # 24 rows of 80 columns, as a terminal window has (a new pty is 0 x 0, where tqdm's
    # line would be cut to nothing).
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with open(stdout_path, "wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=terminal, env=_env())
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if ready:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the command closed the terminal (it exited)
                    break
                if not chunk:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    return code, shown.decode(errors="replace")


def test_a_consume_to_a_file_counts_records_on_a_terminals_stderr(server, tmp_path):
    _topic_with(server, "habits-progress",
                {0: b"".join(b"%d\n" % i for i in range(5000))})
    output = tmp_path / "records.txt"
    code, shown = _run_with_stderr_on_a_terminal(
        [*CLI, "consume", "habits-progress", "--target", server.target], output)
    assert code == 0, shown
    assert len(output.read_bytes().splitlines()) == 5000
    assert "habits-progress" in shown and "5000 records" in shown, shown

    # Without a terminal on stderr, or with --no-progress, not a word.
    quiet = stratalog(server, "consume", "habits-progress", "--max-records", "10")
    assert quiet.returncode == 0 and quiet.stderr == b""
    code, shown = _run_with_stderr_on_a_terminal(
        [*CLI, "consume", "habits-progress", "--no-progress", "--target", server.target],
        output)
    assert (code, shown) == (0, "")


# ------------------------------------------------------------------ item 15: dump-log


def test_dump_log_into_head_exits_0_and_a_missing_file_is_no_such_file(server, tmp_path):
    _topic_with(server, "habits-dump", {0: b"".join(b"record %d\n" % i for i in range(20000))})
    segment = server.data_dir / "habits-dump-0" / "00000000000000000000.log"
    # The dump (about 2 MB) is far larger than the pipe: dump-log is still writing when head
    # exits. Through a shell, as users type it.
    pipeline = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -2', "dump-log", *CLI, "dump-log",
         str(segment), "--deep-iteration"],
        capture_output=True, timeout=120, env=_env())
    assert pipeline.returncode == 0, pipeline.stderr
    assert pipeline.stderr == b""  # no "Broken pipe", no "Exception ignored"
    assert len(pipeline.stdout.splitlines()) == 2

    missing = subprocess.run([*CLI, "dump-log", str(tmp_path / "nosuch.log")],
                             capture_output=True, timeout=60, env=_env())
    assert missing.returncode == 1
    err = missing.stderr.decode()
    assert "No such file or directory" in err and "base offset" not in err, err


def test_consume_into_head_exits_0(server):
    _topic_with(server, "habits-head", {0: b"".join(b"%d\n" % i for i in range(50000))})
    pipeline = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -2', "consume", *CLI, "consume",
         "habits-head", "--target", server.target],
        capture_output=True, timeout=120, env=_env())
    assert pipeline.returncode == 0, pipeline.stderr
    assert pipeline.stderr == b""
    assert pipeline.stdout.splitlines() == [b"0", b"1"]


# ------------------------------------------------------------------ item 17: one error, once


@pytest.mark.parametrize("extra", [(), ("--transactional-id", "habits-too-large")])
def test_a_record_too_large_is_reported_once(server, extra):
    topic = f"habits-large{len(extra)}"
    with SyncClient(server.target) as client:
        client.create_topic(topic, 1, {"max.message.bytes": "1000"})
    result = stratalog(server, "produce", topic, *extra, stdin=b"x" * 4000 + b"\n")
    assert result.returncode == 1
    err = result.stderr.decode()
    # It was printed by the library's note and again by the command's summary.
    assert err.count("RECORD_TOO_LARGE") == 1, err
    assert "max.message.bytes" in err, err
