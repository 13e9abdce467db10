"""Several etcd endpoints (server/cluster/session.py, endpoints.py; docs/cluster.md, "Several
etcd endpoints"): three servers given a three-member etcd cluster; kill -9 of the member they
all use (the first that answered). Each server moves to another member with the same lease:
its registration and the controller stay, no partition changes leader or leader epoch (the
death of an etcd member causes no failover), and the watches follow the session to the new
member (a topic created afterwards reaches every server with the fallback polls set to ten
minutes). And a session whose every member is down says so once per round of the endpoints,
not at every renewal; the same TLS client certificate and etcd user work on every member."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest

from stratalog.server.cluster.endpoints import Endpoint
from stratalog.server.cluster.session import EtcdSession
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess, launch_server

from .conftest import SESSION_TIMEOUT_MS, metadata, start_etcd_cluster, wait_for

if TYPE_CHECKING:
    from tests.conftest import TestPki

NO_POLL_FLAGS = ("--cluster-poll-fallback-ms", "600000")
session_logger = "stratalog.server.cluster.session"


def leaders(server: ServerProcess, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (leader, leader epoch) of ``topic`` in ``server``'s view."""
    answer = metadata(server, topic)
    return {p.partition: (p.leader, p.leader_epoch)
            for t in answer.topics for p in t.partitions}


def _leaders_if_known(server: ServerProcess, topic: str) -> dict[int, tuple[int, int]]:
    """:func:`leaders`, or nothing while ``server``'s view does not hold ``topic`` yet (its
    Metadata answers NOT_FOUND for a topic it has not seen)."""
    try:
        return leaders(server, topic)
    except grpc.RpcError as exc:
        if exc.code() != grpc.StatusCode.NOT_FOUND:
            raise
        return {}


def create_topic(server: ServerProcess, name: str, replication_factor: int = 3) -> None:
    with grpc.insecure_channel(server.target) as channel:
        broker_pb2_grpc.BrokerStub(channel).CreateTopic(pb.CreateTopicRequest(
            name=name, partitions=3, replication_factor=replication_factor),
            timeout=CALL_TIMEOUT_S)


def test_kill_9_of_the_etcd_member_in_use_causes_no_failover(tmp_path: Path) -> None:
    members = start_etcd_cluster(tmp_path / "etcd-cluster", 3)
    servers: dict[int, ServerProcess] = {}
    try:
        url = "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in members)
        for node in (1, 2, 3):
            servers[node] = launch_server(
                tmp_path / f"node-{node}", "--cluster", url, "--node-id", str(node),
                "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS), *NO_POLL_FLAGS)
        wait_for(lambda: all(len(metadata(s).brokers) == 3 for s in servers.values()),
                 "three brokers in every view")
        create_topic(servers[1], "before")
        wait_for(lambda: all(len(leaders(s, "before")) == 3 for s in servers.values()),
                 "the topic in every view")
        controller = metadata(servers[1])
        led = leaders(servers[1], "before")

        first = members[0]
        assert first.process is not None
        first.process.kill()  # kill -9 of the member every server uses
        first.process.wait()
        for server in servers.values():
            # Moved on, and a renewal of the same lease answered through another member.
            wait_for(lambda s=server: "does not answer: using" in s.log_text()
                     and "answers again" in s.log_text(),
                     "the session moved to another member and renewed its lease there")

        for server in servers.values():
            assert "granting a new one" not in server.log_text()  # the lease lived on
            answer = metadata(server)
            assert [b.node_id for b in answer.brokers] == [1, 2, 3]
            assert (answer.controller_id, answer.controller_epoch) == (
                controller.controller_id, controller.controller_epoch)
            assert leaders(server, "before") == led

        # Writes go through the other members, and the watches moved with the session: the
        # topic reaches the other servers without a poll.
        create_topic(servers[2], "after")
        wait_for(lambda: all(len(_leaders_if_known(s, "after")) == 3
                             for s in servers.values()),
                 "a topic created after the kill in every view")
        registered = members[1].etcdctl("get", "--prefix", "--keys-only", "/stratalog/brokers/")
        assert registered.split() == [f"/stratalog/brokers/{n}" for n in (1, 2, 3)]
        # Still no failover.
        assert all(leaders(s, "before") == led for s in servers.values())
    finally:
        for server in servers.values():
            if server.process.poll() is None:
                server.kill()
        for member in members:
            member.discard()


def test_tls_and_credentials_are_the_same_on_every_member(tmp_path: Path, pki: TestPki) -> None:
    members = start_etcd_cluster(tmp_path / "etcd-cluster", 3, pki)
    server = None
    try:
        members[0].enable_auth("stratalog-1", "etcd-secret")  # etcd's auth is the cluster's
        password_file = tmp_path / "etcd.password"
        password_file.write_text("etcd-secret\n")
        url = "etcds://" + ",".join(f"127.0.0.1:{m.client_port}" for m in members)
        server = launch_server(
            tmp_path / "node-1", "--cluster", url, "--node-id", "1",
            "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS),
            *members[0].server_tls_flags(), "--etcd-username", "stratalog-1",
            "--etcd-password-file", str(password_file))
        wait_for(lambda: [b.node_id for b in metadata(server).brokers] == [1], "registered")
        first = members[0]
        assert first.process is not None
        first.process.kill()
        first.process.wait()
        wait_for(lambda: "answers again" in server.log_text(),
                 "the lease renewed through another member, over TLS with the same user")
        create_topic(server, "over-tls", replication_factor=1)
        assert "/stratalog/topics/over-tls" in members[1].etcdctl(
            "get", "--prefix", "--keys-only", "/stratalog/topics/", user="root:root-password")
        assert "granting a new one" not in server.log_text()
    finally:
        if server is not None and server.process.poll() is None:
            server.kill()
        for member in members:
            member.discard()


async def test_every_member_down_is_logged_once_per_round_not_every_renewal(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    members = await asyncio.to_thread(start_etcd_cluster, tmp_path / "etcd-cluster", 3)
    endpoints = [Endpoint("127.0.0.1", m.client_port) for m in members]
    session = await EtcdSession.open(endpoints, 1_000)  # renewals every 1/3 s
    session.start()
    try:
        caplog.set_level(logging.DEBUG, logger=session_logger)
        start = len(caplog.records)
        for member in members:  # all at once: one outage
            assert member.process is not None
            member.process.kill()
        for member in members:
            await asyncio.to_thread(member.discard)  # reaps the killed process

        def switches() -> list[logging.LogRecord]:
            return [r for r in caplog.records[start:]
                    if "does not answer: using" in r.getMessage()]

        # Two full rounds of the three endpoints.
        async with asyncio.timeout(60):
            while len(switches()) < 6:
                await asyncio.sleep(0.05)
        warnings = [r.getMessage() for r in caplog.records[start:]
                    if r.levelno == logging.WARNING and r.name == session_logger]
        assert sum("does not answer: using" in w for w in warnings) == 1, warnings
        assert sum("none of the 3 etcd endpoints answers" in w for w in warnings) == 1, warnings
    finally:
        await session.close()
        for member in members:
            await asyncio.to_thread(member.stop)
