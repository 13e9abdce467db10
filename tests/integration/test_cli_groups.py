"""The `stratalog` command's consumer groups against a real server process (issue 27 item 6):
``consume --group`` resumes where a stopped member left off, ``groups list|describe`` show the
member and the lag, ``reset-offsets`` changes nothing without ``--execute`` and is refused
while a member is in, ``delete``, ``delete-offsets``.

The server runs with ``group.initial.rebalance.delay.ms`` 0; every wait is on a condition (a
line printed, a group state), never a sleep; every process is bounded and killed if a test
fails.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from stratalog.client import SyncClient

from .conftest import ServerProcess, launch_server, wait_until

CLI = [sys.executable, "-m", "stratalog.cli"]
GROUP_FLAGS = ("--group-initial-rebalance-delay-ms", "0",
               "--offsets-topic-num-partitions", "3")
BOUND_S = 60.0
RECORDS = 30  # per partition
PARTITIONS = 2


@pytest.fixture(scope="module")
def group_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = launch_server(tmp_path_factory.mktemp("cli-groups") / "data", *GROUP_FLAGS)
    yield process
    assert process.stop(signal.SIGTERM) == 0, process.log_text()[-4000:]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}


def stratalog(server: ServerProcess, *args: str, stdin: bytes | None = None
              ) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args, "--target", server.target], input=stdin,
                          capture_output=True, timeout=BOUND_S, env=_env())


def _topic(server: ServerProcess, name: str) -> None:
    """RECORDS per partition, valued ``P-I``."""
    created = stratalog(server, "topics", "create", name, "--partitions", str(PARTITIONS))
    assert created.returncode == 0, created.stderr
    for p in range(PARTITIONS):
        lines = b"".join(b"%d-%d\n" % (p, i) for i in range(RECORDS))
        produced = stratalog(server, "produce", name, "--partition", str(p), stdin=lines)
        assert produced.returncode == 0, produced.stderr


def _describe(server: ServerProcess, group: str) -> dict:
    described = stratalog(server, "groups", "describe", group, "--format", "json")
    assert described.returncode == 0, described.stderr
    return json.loads(described.stdout)


class _Member:
    """A ``consume --group`` process whose stdout is read line by line (bounded)."""

    def __init__(self, server: ServerProcess, *args: str) -> None:
        self.process = subprocess.Popen(
            [*CLI, "consume", *args, "--target", server.target],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
        self.lines: list[str] = []
        self._pending = b""

    def read_lines(self, count: int) -> list[str]:
        """Wait until ``count`` lines were printed in all (AssertionError after BOUND_S)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + BOUND_S
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while len(self.lines) < count:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"only {len(self.lines)} of {count} lines printed"
                if not selector.select(remaining):
                    continue
                chunk = os.read(fd, 65536)
                assert chunk, (f"consume exited after {len(self.lines)} lines: "
                               f"{self.process.wait()} {self.process.stderr.read()!r}")
                self._pending += chunk
                *complete, self._pending = self._pending.split(b"\n")
                self.lines += [line.decode() for line in complete]
        return self.lines

    def stop(self, signum: int) -> tuple[int, str, str]:
        """Send ``signum``; the exit code, the rest of stdout and stderr."""
        self.process.send_signal(signum)
        out, err = self.process.communicate(timeout=BOUND_S)
        return self.process.returncode, (self._pending + out).decode(), err.decode()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


@pytest.fixture
def members() -> Iterator[list[_Member]]:
    started: list[_Member] = []
    yield started
    for member in started:
        member.kill()


def test_consume_group_resumes_where_a_stopped_member_left_off(group_server, members):
    # One record per batch, values of 1 KiB, and a reader of this test that stops reading
    # after 30 lines: the member's stdout pipe fills (64 KiB) and it blocks mid-stream, so
    # SIGINT stops it (at its next batch) with records left, whatever the machine's speed.
    records, padding = 200, 1024
    created = stratalog(group_server, "topics", "create", "cli-resume", "--partitions",
                        str(PARTITIONS))
    assert created.returncode == 0, created.stderr
    with SyncClient(group_server.target) as client:
        for p in range(PARTITIONS):
            for i in range(records):
                client.produce("cli-resume", p, [b"%d-%d%s" % (p, i, b"." * padding)])
    first = _Member(group_server, "cli-resume", "--group", "resumers", "--from-beginning",
                    "--print-metadata")
    members.append(first)
    first.read_lines(30)
    # Stopped by SIGINT: it commits what it printed and leaves.
    code, rest, err = first.stop(signal.SIGINT)
    assert code == 130, err
    assert "SIGINT: committed the offsets of what was printed and left group 'resumers'" in err
    printed = [line for line in first.lines + rest.split("\n") if line]
    assert 30 <= len(printed) < records * PARTITIONS

    # Left, not waiting out its session: the group is Empty at once, its offsets are the
    # printed ones.
    described = _describe(group_server, "resumers")
    assert described["state"] == "Empty"
    last = {}
    for line in printed:
        partition, offset = (int(x) for x in line.split("\t")[:2])
        last[partition] = max(offset, last.get(partition, -1))
    committed = {r["partition"]: r["committed_offset"] for r in described["partitions"]
                 if r["committed_offset"] is not None}
    assert {p: o for p, o in committed.items() if o} == {p: o + 1 for p, o in last.items()}

    # The second member prints the rest: nothing again, nothing skipped.
    rest_count = records * PARTITIONS - len(printed)
    second = stratalog(group_server, "consume", "cli-resume", "--group", "resumers",
                       "--from-beginning", "--print-metadata",
                       "--max-records", str(rest_count))
    assert second.returncode == 0, second.stderr
    again = [line for line in second.stdout.decode().split("\n") if line]
    values = sorted(line.split("\t")[-1] for line in printed + again)
    assert values == sorted(f"{p}-{i}{'.' * padding}" for p in range(PARTITIONS)
                            for i in range(records))
    lags = {r["partition"]: r["lag"] for r in _describe(group_server, "resumers")["partitions"]}
    assert lags == dict.fromkeys(range(PARTITIONS), 0)


def test_sigterm_commits_and_leaves_too(group_server, members):
    _topic(group_server, "cli-term")
    member = _Member(group_server, "cli-term", "--group", "terminated", "--from", "earliest")
    members.append(member)
    member.read_lines(5)
    code, rest, err = member.stop(signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err
    printed = len([line for line in member.lines + rest.split("\n") if line])
    described = _describe(group_server, "terminated")
    assert described["state"] == "Empty"
    assert sum(r["committed_offset"] for r in described["partitions"]) == printed


def test_groups_list_describe_show_the_member_and_the_lag(group_server, members):
    _topic(group_server, "cli-lag")
    member = _Member(group_server, "cli-lag", "--group", "laggers", "--from-beginning",
                     "--max-records", "7", "--auto-commit-interval-ms", "100")
    members.append(member)
    member.read_lines(7)  # then it commits and leaves: 7 of 60 read
    assert member.process.wait(timeout=BOUND_S) == 0

    # A member that stays, reading another (empty) topic: it holds the group while the
    # first topic's committed offsets stay where the first member left them.
    created = stratalog(group_server, "topics", "create", "cli-lag-idle")
    assert created.returncode == 0, created.stderr
    holder = _Member(group_server, "cli-lag-idle", "--group", "laggers")
    members.append(holder)
    wait_until(lambda: _describe(group_server, "laggers")["state"] == "Stable",
               "the holder joined", BOUND_S)

    listed = stratalog(group_server, "groups", "list")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.decode().splitlines()]
    assert rows[0] == ["GROUP", "PROTOCOL-TYPE", "STATE"]
    assert ["laggers", "consumer", "Stable"] in rows

    text = stratalog(group_server, "groups", "describe", "laggers")
    assert text.returncode == 0, text.stderr
    table = [line.split() for line in text.stdout.decode().splitlines()]
    assert table[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                        "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    body = table[1:]
    assert [(r[1], r[2]) for r in body] == [("cli-lag", "0"), ("cli-lag", "1"),
                                            ("cli-lag-idle", "0")]
    # The first topic: committed, lagging, owned by no one.
    assert sum(int(r[5]) for r in body[:2]) == RECORDS * PARTITIONS - 7
    assert {r[4] for r in body[:2]} == {str(RECORDS)}
    assert {r[6] for r in body[:2]} == {"-"}
    # The holder's partition: empty, owned by it (its position 0 is committed once its first
    # auto-commit ran: "-" before).
    assert body[2][3:6] in (["-", "0", "-"], ["0", "0", "0"])
    assert body[2][6] != "-" and body[2][7] == "127.0.0.1"

    # kafka-consumer-groups.sh's spelling.
    members_text = stratalog(group_server, "groups", "--describe", "--group", "laggers",
                             "--members")
    assert members_text.returncode == 0, members_text.stderr
    member_rows = [line.split() for line in members_text.stdout.decode().splitlines()]
    assert member_rows[1][0] == "laggers" and member_rows[1][-2:] == ["1", "cli-lag-idle-0"]

    # Refusals while it has a member: reset-offsets and delete.
    refused = stratalog(group_server, "groups", "reset-offsets", "laggers", "--topic",
                        "cli-lag", "--to-earliest", "--execute")
    assert refused.returncode == 1
    assert "is Stable with 1 members" in refused.stderr.decode()
    not_deleted = stratalog(group_server, "groups", "delete", "laggers")
    assert not_deleted.returncode == 1
    assert "NON_EMPTY_GROUP" in not_deleted.stderr.decode()

    code, _, err = holder.stop(signal.SIGINT)
    assert code == 130, err
    deleted = stratalog(group_server, "groups", "delete", "--group", "laggers")
    assert deleted.returncode == 0, deleted.stderr
    gone = stratalog(group_server, "groups", "describe", "laggers")
    assert gone.returncode == 1
    assert "does not exist" in gone.stderr.decode()


def test_reset_offsets_dry_run_then_execute(group_server):
    _topic(group_server, "cli-reset")
    read = stratalog(group_server, "consume", "cli-reset", "--group", "resetters",
                     "--from-beginning", "--max-records", str(RECORDS * PARTITIONS))
    assert read.returncode == 0, read.stderr
    before = _describe(group_server, "resetters")["partitions"]
    assert [r["committed_offset"] for r in before] == [RECORDS] * PARTITIONS

    dry = stratalog(group_server, "groups", "reset-offsets", "resetters", "--topic",
                    "cli-reset", "--shift-by", "-5", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["executed"] is False
    assert [(r["current_offset"], r["new_offset"]) for r in plan["partitions"]] == [
        (RECORDS, RECORDS - 5)] * PARTITIONS
    assert "dry run: nothing changed" in dry.stderr.decode()
    assert _describe(group_server, "resetters")["partitions"] == before

    # Clamped to the log: 1000 is past the end.
    done = stratalog(group_server, "groups", "reset-offsets", "--group", "resetters",
                     "--topic", "cli-reset", "--partition", "1", "--to-offset", "1000",
                     "--execute")
    assert done.returncode == 0, done.stderr
    assert "offset 1000 is outside the log" in done.stderr.decode()
    done = stratalog(group_server, "groups", "reset-offsets", "resetters", "--topic",
                     "cli-reset", "--partition", "0", "--to-offset", "12", "--execute")
    assert done.returncode == 0, done.stderr
    table = [line.split() for line in done.stdout.decode().splitlines()]
    assert table[1] == ["resetters", "cli-reset", "0", str(RECORDS), "12"]
    after = {r["partition"]: r["committed_offset"]
             for r in _describe(group_server, "resetters")["partitions"]}
    assert after == {0: 12, 1: RECORDS}

    # The next member reads from there.
    again = stratalog(group_server, "consume", "cli-reset", "--group", "resetters",
                      "--max-records", str(RECORDS - 12))
    assert again.returncode == 0, again.stderr
    assert sorted(again.stdout.decode().split()) == sorted(f"0-{i}" for i in range(12, RECORDS))

    deleted = stratalog(group_server, "groups", "delete-offsets", "resetters", "--topic",
                        "cli-reset")
    assert deleted.returncode == 0, deleted.stderr
    assert _describe(group_server, "resetters")["partitions"] == []


def test_consume_group_of_an_unknown_topic_is_an_error_at_once(group_server):
    # As without a group; a member would otherwise wait for the topic, silently.
    refused = stratalog(group_server, "consume", "cli-no-such-topic", "--group", "nobody")
    assert refused.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in refused.stderr.decode(), refused.stderr


def test_consume_group_of_several_topics_and_a_pattern(group_server):
    for name in ("cli-multi-a", "cli-multi-b"):
        _topic(group_server, name)
    total = RECORDS * PARTITIONS * 2
    both = stratalog(group_server, "consume", "cli-multi-a,cli-multi-b", "--group", "multi",
                     "--from-beginning", "--print-metadata", "--max-records", str(total))
    assert both.returncode == 0, both.stderr
    rows = [line.split("\t") for line in both.stdout.decode().splitlines()]
    # With several topics, the metadata prefix starts with the topic.
    assert sorted((r[0], r[-1]) for r in rows) == sorted(
        (t, f"{p}-{i}") for t in ("cli-multi-a", "cli-multi-b")
        for p in range(PARTITIONS) for i in range(RECORDS))
    # --include: the topics whose whole name matches; group "multi" committed them all, a new
    # group reads them from the beginning.
    matched = stratalog(group_server, "consume", "--include", "cli-multi-.", "--group",
                        "multi-pattern", "--from-beginning", "--max-records", str(total),
                        "--format", "json")
    assert matched.returncode == 0, matched.stderr
    topics = {json.loads(line)["topic"] for line in matched.stdout.decode().splitlines()}
    assert topics == {"cli-multi-a", "cli-multi-b"}
    lags = [r["lag"] for r in _describe(group_server, "multi")["partitions"]]
    assert lags == [0] * (PARTITIONS * 2)
