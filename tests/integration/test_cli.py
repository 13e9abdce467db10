"""The `stratalog` command against a real server: topics, produce, consume, offsets, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

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
    assert result.stderr.decode().startswith("stratalog ")


def test_an_unreachable_server_exits_3(server):
    result = stratalog(server, "topics", "list", target="127.0.0.1:1")
    assert result.returncode == 3
    assert "cannot reach the server" in result.stderr.decode()


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
    from_offset = stratalog(server, "consume", "cli-time", "--from", "1", "--max-records", "2")
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
        time.sleep(1.0)  # the follower is waiting at the (empty) log end
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
