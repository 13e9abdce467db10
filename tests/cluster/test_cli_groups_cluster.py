"""`stratalog groups list` in a cluster (etcd and three servers on 127.0.0.1, issue 27 item 6):
a server lists only the groups it coordinates, so the command asks every live broker and
merges, as Kafka's admin client does; ``groups describe`` and ``reset-offsets --execute`` reach
each group's coordinator whichever server ``--target`` names."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stratalog.records.group_partition import partition_for_group

from .conftest import metadata, wait_for
from .test_faults import MEMBER_FLAGS, create_topic
from .test_groups import GROUP_FLAGS, OFFSETS_PARTITIONS, agreed_coordinator

CLI = [sys.executable, "-m", "stratalog.cli"]


def _stratalog(target: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
    return subprocess.run([*CLI, *args, "--target", target], capture_output=True,
                          timeout=120, env=env)


def _group_on(partition: int) -> str:
    """A group id whose ``__consumer_offsets`` partition is ``partition``."""
    return next(f"cli-{partition}-{i}" for i in range(10_000)
                if partition_for_group(f"cli-{partition}-{i}", OFFSETS_PARTITIONS) == partition)


def test_groups_list_asks_every_broker(start_member) -> None:
    servers = {node: start_member(node, *MEMBER_FLAGS, *GROUP_FLAGS) for node in (1, 2, 3)}
    wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
             "three brokers seen by every server")
    create_topic(servers[1], "cli-events", partitions=1)
    agreed_coordinator(servers)  # __consumer_offsets created, its leaders elected
    leaders = {p.partition: p.leader
               for p in metadata(servers[1], "__consumer_offsets").topics[0].partitions}
    assert len(set(leaders.values())) > 1, f"one leader for every partition: {leaders}"

    # A group on each partition of __consumer_offsets, through one server: its offsets
    # committed by reset-offsets --execute (a simple commit, at its coordinator).
    groups = {partition: _group_on(partition) for partition in range(OFFSETS_PARTITIONS)}
    for group in groups.values():
        done = _stratalog(servers[1].target, "groups", "reset-offsets", group, "--topic",
                          "cli-events", "--to-earliest", "--execute")
        assert done.returncode == 0, done.stderr

    # Listed from any server: all of them, though each server coordinates some only.
    for server in servers.values():
        listed = _stratalog(server.target, "groups", "list", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        assert {g["group_id"] for g in json.loads(listed.stdout)} == set(groups.values())
    described = _stratalog(servers[2].target, "groups", "describe", groups[0], "--format",
                           "json")
    assert described.returncode == 0, described.stderr
    assert [(r["topic"], r["committed_offset"]) for r in json.loads(described.stdout)[
        "partitions"]] == [("cli-events", 0)]
