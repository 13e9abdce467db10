"""The `stratalog` command against a real server: topics, produce, consume, offsets, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .conftest import wait_until

CLI = [sys.executable, "-m", "stratalog.cli"]


def stratalog(server, *args: str, stdin: bytes | None = None, target: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    return subprocess.run(
        [*CLI, *args, "--target", target or server.target],
        input=stdin, capture_output=True, timeout=120, env=env,
    )


def test_topic_administration_round_trip(server):
    created = stratalog(server, "topics", "create", "cli-admin", "--partitions", "2",
                        "--config", "segment.bytes=1048576", "--json")
    assert created.returncode == 0, created.stderr
    topic = json.loads(created.stdout)
    assert topic["name"] == "cli-admin"
    assert [p["partition"] for p in topic["partitions"]] == [0, 1]
    assert topic["configs"]["segment.bytes"] == "1048576"

    listed = stratalog(server, "topics", "list")
    assert "cli-admin" in listed.stdout.decode().split()

    altered = stratalog(server, "topics", "alter", "cli-admin", "--set", "retention.ms=1000",
                        "--json")
    assert altered.returncode == 0, altered.stderr
    assert json.loads(altered.stdout)["configs"]["retention.ms"] == "1000"
    restored = stratalog(server, "topics", "alter", "cli-admin", "--delete", "retention.ms",
                         "--json")
    assert json.loads(restored.stdout)["configs"]["retention.ms"] == "604800000"

    described = stratalog(server, "topics", "describe", "cli-admin").stdout.decode()
    assert described.startswith("Topic: cli-admin\tPartitionCount: 2\t")
    assert described.count("\tPartition: ") == 2
    # A single server is broker 0: leader, only replica and only in-sync replica.
    assert "\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tLogStartOffset: 0" in described

    deleted = stratalog(server, "topics", "delete", "cli-admin")
    assert deleted.returncode == 0, deleted.stderr
    assert "cli-admin" not in stratalog(server, "topics", "list").stdout.decode().split()


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("topics", "create", "../x"), "INVALID_TOPIC"),
        (("topics", "create", "a/b"), "INVALID_TOPIC"),
        (("topics", "create", "x" * 250), "INVALID_TOPIC"),
        (("topics", "describe", "no-such-topic"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("topics", "create", "cli-bad-config", "--config", "segment.bytes=banana"),
         "INVALID_CONFIG"),
        (("consume", "no-such-topic"), "UNKNOWN_TOPIC_OR_PARTITION"),
        (("offsets", "no-such-topic"), "UNKNOWN_TOPIC_OR_PARTITION"),
    ],
)
def test_refusals_exit_1_with_the_reason(server, args, reason):
    result = stratalog(server, *args)
    assert result.returncode == 1, result.stdout
    message = result.stderr.decode()
    assert message.startswith(f"stratalog {args[0]}")
    assert reason in message


@pytest.mark.parametrize(
    "args",
    [
        ("consume", "t", "--from", "nowhere"),
        ("consume", "t", "--from-timestamp", "yesterday-ish"),
        ("offsets", "t", "--time", "soon"),
        ("produce", "t", "--partition", "-1"),
        ("topics", "alter", "t"),
        ("topics", "create", "t", "--config", "no-equals-sign"),
    ],
)
def test_bad_usage_exits_2_naming_the_option(server, args):
    result = stratalog(server, *args)
    assert result.returncode == 2
    # Ours ("stratalog consume: --from ...") or argparse's, after its usage lines.
    assert result.stderr.decode().splitlines()[-1].startswith("stratalog ")


def test_an_unreachable_server_exits_3(server):
    result = stratalog(server, "topics", "list", target="127.0.0.1:1")
    assert result.returncode == 3
    assert "cannot reach the server" in result.stderr.decode()


def test_produce_refuses_a_delivery_timeout_below_one(server):
    result = stratalog(server, "produce", "anything", "--delivery-timeout-ms", "0", stdin=b"x\n")
    assert result.returncode == 2
    assert "--delivery-timeout-ms must be >= 1" in result.stderr.decode()


def test_produce_lines_with_keys_and_consume_them_back(server, tmp_path):
    assert stratalog(server, "topics", "create", "cli-lines", "--partitions", "3").returncode == 0
    lines = [f"user-{i % 7}\tvalue {i} ✓" for i in range(2000)]
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    produced = stratalog(server, "produce", "cli-lines", "--file", str(source),
                         "--key-separator", "\t")
    assert produced.returncode == 0, produced.stderr
    assert b"produced 2000 records to cli-lines" in produced.stderr

    consumed = stratalog(server, "consume", "cli-lines", "--format", "json")
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.decode().splitlines()]
    assert len(records) == 2000
    # Keyed records: one key always lands in one partition, in the order it was produced.
    by_key: dict[str, list[tuple[int, int, str]]] = {}
    for r in records:
        by_key.setdefault(r["key"], []).append((r["partition"], r["offset"], r["value"]))
    for key, seen in by_key.items():
        assert len({partition for partition, _, _ in seen}) == 1, key
        expected = [line.split("\t", 1)[1] for line in lines if line.startswith(key + "\t")]
        assert [value for _, _, value in sorted(seen)] == expected
    assert all(r["timestamp_type"] == "CREATE_TIME" for r in records)


def test_stdin_partition_offsets_and_timestamp_reads(server):
    assert stratalog(server, "topics", "create", "cli-time", "--partitions", "2").returncode == 0
    first = stratalog(server, "produce", "cli-time", "--partition", "1", stdin=b"a\nb\nc\n")
    assert first.returncode == 0, first.stderr
    # Part of what is tested: the clock moves on, so that no record has the boundary's time.
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    second = stratalog(server, "produce", "cli-time", "--partition", "1", stdin=b"d\r\ne\n")
    assert second.returncode == 0, second.stderr

    latest = json.loads(stratalog(server, "offsets", "cli-time", "--json").stdout)
    assert [(row["partition"], row["offset"]) for row in latest] == [(0, 0), (1, 5)]
    at = json.loads(stratalog(server, "offsets", "cli-time", "--partition", "1", "--time",
                              str(boundary_ms), "--json").stdout)
    assert at[0]["offset"] == 3 and at[0]["timestamp"] >= boundary_ms

    from_time = stratalog(server, "consume", "cli-time", "--partition", "1",
                          "--from-timestamp", str(boundary_ms))
    assert from_time.stdout.decode().splitlines() == ["d", "e"]
    # Partition 0 is empty: --from 1 is out of its range (an error), so only partition 1.
    from_offset = stratalog(server, "consume", "cli-time", "--partition", "1", "--from", "1",
                            "--max-records", "2")
    assert from_offset.stdout.decode().splitlines() == ["b", "c"]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(boundary_ms / 1000 - 3600)) + "Z"
    from_iso = stratalog(server, "consume", "cli-time", "--partition", "1",
                         "--from-timestamp", iso)
    assert from_iso.stdout.decode().splitlines() == ["a", "b", "c", "d", "e"]


def test_binary_values_survive_json_output(server):
    assert stratalog(server, "topics", "create", "cli-binary").returncode == 0
    assert stratalog(server, "produce", "cli-binary", stdin=b"\xff\xfe\x00ok\n").returncode == 0
    [line] = stratalog(server, "consume", "cli-binary", "--format", "json").stdout.splitlines()
    assert json.loads(line)["value"] == {"base64": "//4Ab2s="}


def test_follow_prints_records_produced_later(server):
    assert stratalog(server, "topics", "create", "cli-follow").returncode == 0
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    follower = subprocess.Popen(
        [*CLI, "consume", "cli-follow", "--follow", "--max-records", "3",
         "--target", server.target],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    try:
        # The follower is waiting at the (empty) log end: its long polls (500 ms each) hold
        # the gauge at 1 but for the moment between two of them.
        wait_until(lambda: server.waiting_rpcs("long_poll") >= 1, "the follower waiting")
        assert stratalog(server, "produce", "cli-follow", stdin=b"x\ny\nz\n").returncode == 0
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert out.decode().splitlines() == ["x", "y", "z"]


def test_bench_measures_and_cleans_up_after_itself(server):
    result = stratalog(server, "bench", "--records", "20000", "--partitions", "2",
                       "--fetches", "50", "--json")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["consumed"] == 20000
    assert figures["produce_records_per_s"] > 0 and figures["consume_records_per_s"] > 0
    assert 0 < figures["fetch_p50_ms"] <= figures["fetch_p99_ms"]
    assert figures["topic"] not in stratalog(server, "topics", "list").stdout.decode().split()


# ------------------------------------------------------------------------ issue 15


def _produced(server, topic: str, partitions: int, lines_by_partition: dict[int, bytes]) -> None:
    assert stratalog(server, "topics", "create", topic, "--partitions",
                     str(partitions)).returncode == 0
    for partition, lines in lines_by_partition.items():
        result = stratalog(server, "produce", topic, "--partition", str(partition), stdin=lines)
        assert result.returncode == 0, result.stderr


def test_an_offset_past_the_end_is_an_error_naming_partition_offset_and_range(server):
    # Issue 15: --from 99999999 silently restarted at offset 0 and exited 0.
    _produced(server, "cli-range", 2, {0: b"a\nb\nc\n", 1: b"d\n"})
    result = stratalog(server, "consume", "cli-range", "--partition", "0", "--from", "99999999")
    assert result.returncode == 1
    assert result.stdout == b""
    err = result.stderr.decode()
    assert err.startswith("stratalog consume: offset 99999999 is out of range for cli-range-0:"
                          " the log holds offsets [0, 3)")
    assert "--reset earliest" in err

    # An offset one partition holds and the other does not: the shorter one is the error.
    shorter = stratalog(server, "consume", "cli-range", "--from", "2")
    assert shorter.returncode == 1
    assert "offset 2 is out of range for cli-range-1" in shorter.stderr.decode()
    # The log end itself is in range: nothing to print, no error.
    at_end = stratalog(server, "consume", "cli-range", "--partition", "0", "--from", "3")
    assert (at_end.returncode, at_end.stdout) == (0, b"")


def test_reset_earliest_or_latest_says_so_on_stderr(server):
    _produced(server, "cli-reset", 1, {0: b"a\nb\nc\n"})
    earliest = stratalog(server, "consume", "cli-reset", "--from", "99", "--reset", "earliest")
    assert earliest.returncode == 0, earliest.stderr
    assert earliest.stdout.decode().splitlines() == ["a", "b", "c"]
    assert earliest.stderr.decode().splitlines() == [
        "stratalog consume: cli-reset-0: offset 99 is out of range [0, 3); --reset earliest: "
        "reading from offset 0"]
    latest = stratalog(server, "consume", "cli-reset", "--from", "99", "--reset", "latest")
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == b""
    assert "--reset latest: reading from offset 3" in latest.stderr.decode()


def test_offsets_with_repeated_partitions_lists_each(server):
    # Issue 15: `offsets T --partition 0 --partition 2` printed partition 2 only.
    _produced(server, "cli-parts", 3, {0: b"a\n", 1: b"b\nc\n", 2: b"d\ne\nf\n"})
    result = stratalog(server, "offsets", "cli-parts", "--partition", "0", "--partition", "2",
                       "--format", "json")
    assert result.returncode == 0, result.stderr
    assert [(r["partition"], r["offset"]) for r in json.loads(result.stdout)] == [(0, 1), (2, 3)]
    missing = stratalog(server, "offsets", "cli-parts", "--partition", "7")
    assert missing.returncode == 1
    assert "partitions [7] do not exist" in missing.stderr.decode()
    twice = stratalog(server, "produce", "cli-parts", "--partition", "0", "--partition", "1",
                      stdin=b"x\n")
    assert twice.returncode == 2
    one = stratalog(server, "offsets", "cli-parts", "--partition", "0").stdout.splitlines()
    assert one[1].split()[2] == b"1"  # under the header line


def test_global_options_go_before_the_subcommand_and_urls_are_usage_errors(server):
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    before = subprocess.run([*CLI, "--target", server.target, "topics", "list"],
                            capture_output=True, timeout=60, env=env)
    assert before.returncode == 0, before.stderr
    url = stratalog(server, "topics", "list", target=f"http://{server.target}")
    assert url.returncode == 2  # was 3, "server unreachable"
    assert "give HOST:PORT" in url.stderr.decode() and "--tls" in url.stderr.decode()


def test_timestamps_without_zone_are_utc_relative_times_work_and_the_instant_is_shown(server):
    from stratalog.cli.timestamps import format_timestamp_ms

    _produced(server, "cli-utc", 1, {0: b"old\n"})
    # Part of what is tested: the clock moves on, so that no record has the boundary's time.
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    assert stratalog(server, "produce", "cli-utc", stdin=b"new\n").returncode == 0
    naive = format_timestamp_ms(boundary_ms).removesuffix("Z")
    # In a zone 5 hours behind UTC, a local reading would be 5 hours in the future: nothing.
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    env["TZ"] = "America/New_York"
    result = subprocess.run(
        [*CLI, "consume", "cli-utc", "--from-timestamp", naive, "--target", server.target],
        capture_output=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["new"]
    assert result.stderr.decode().splitlines() == [
        f"reading from {format_timestamp_ms(boundary_ms)} ({boundary_ms} ms)"]

    relative = stratalog(server, "consume", "cli-utc", "--from-timestamp", "-1h")
    assert relative.stdout.decode().splitlines() == ["old", "new"]
    assert relative.stderr.decode().startswith("reading from ")
    looked_up = stratalog(server, "offsets", "cli-utc", "--time", "-1h", "--format", "json")
    assert json.loads(looked_up.stdout)[0]["offset"] == 0
    assert looked_up.stderr.decode().startswith("looking up the first offsets at or after ")


def test_json_headers_are_key_value_pairs_keeping_duplicates(server):
    import asyncio

    from stratalog.client import Client, ProducerRecord

    assert stratalog(server, "topics", "create", "cli-headers").returncode == 0

    async def produce() -> None:
        async with Client(server.target) as client:
            await client.produce("cli-headers", 0, [ProducerRecord(
                b"v", headers=[("trace", b"1"), ("trace", b"2"), ("bin", b"\xff"),
                               ("none", None)])])

    asyncio.run(produce())
    [line] = stratalog(server, "consume", "cli-headers", "--format", "json").stdout.splitlines()
    assert json.loads(line)["headers"] == [
        ["trace", "1"], ["trace", "2"], ["bin", {"base64": "/w=="}], ["none", None]]


def test_describe_shows_overrides_and_all_shows_sentinels_as_none(server):
    assert stratalog(server, "topics", "create", "cli-configs", "--config",
                     "retention.ms=1000", "--config", "segment.bytes=1048576").returncode == 0
    described = stratalog(server, "topics", "describe", "cli-configs").stdout.decode()
    first = described.splitlines()[0]
    assert first == ("Topic: cli-configs\tPartitionCount: 1\tConfigs: "
                     "retention.ms=1000,segment.bytes=1048576")
    everything = stratalog(server, "topics", "describe", "cli-configs", "--all").stdout.decode()
    first = everything.splitlines()[0]
    assert "flush.ms=none" in first and "max.compaction.lag.ms=none" in first
    assert "retention.bytes=-1" in first and "cleanup.policy=delete" in first
    assert "9223372036854775807" not in everything
    as_json = json.loads(stratalog(server, "topics", "describe", "cli-configs", "--format",
                                   "json").stdout)
    assert as_json["overridden_configs"] == ["retention.ms", "segment.bytes"]
    assert as_json["configs"]["flush.ms"] == "9223372036854775807"  # as stored, for scripts
    altered = stratalog(server, "topics", "alter", "cli-configs", "--delete", "retention.ms")
    assert altered.stdout.decode().splitlines()[0].endswith("Configs: segment.bytes=1048576")
