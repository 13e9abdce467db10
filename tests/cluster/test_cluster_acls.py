"""The cluster's ACLs in etcd (server/cluster/cluster_acls.py): a DENY made through one server
is enforced by every server within the documented bound, concurrent updates through different
servers all land, and a node's own acls.json is imported once or refused when etcd holds
others."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from stratalog.server.cluster.cluster_acls import UPDATE_ATTEMPTS
from stratalog.server.cluster.node import POLL_INTERVALS_PER_SESSION
from stratalog.server.cluster.session import CALL_TIMEOUT_S as ETCD_CALL_TIMEOUT_S
from stratalog.server.security.acl_store import ACL_FILE_NAME, IMPORTED_SUFFIX, encode_acls
from stratalog.server.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from stratalog.server.security.credentials import CredentialFile
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import CALL_TIMEOUT_S, ServerProcess, launch_server

from .conftest import SESSION_TIMEOUT_MS, EtcdProcess, wait_for

#: The servers prove who they are to each other with a password (a cluster with ACLs needs
#: broker_principals: docs/cluster.md "Securing a cluster"); clients stay anonymous.
BROKER_USER = "broker"
#: PBKDF2 iterations of the test's credential file: few, for speed.
_ITERATIONS = 4096


@pytest.fixture
def acl_flags(tmp_path: Path) -> tuple[str, ...]:
    """Flags for an ACL-enabled cluster member whose clients are anonymous."""
    credentials = tmp_path / "credentials.json"
    CredentialFile().with_user(BROKER_USER, "broker-secret", _ITERATIONS).save(credentials)
    password = tmp_path / "broker.password"
    password.write_text("broker-secret\n")
    return ("--authorizer", "acl", "--allow-everyone-if-no-acl-found", "true",
            "--authentication-credentials-file", str(credentials),
            "--authentication-anonymous", "allowed", "--authentication-plaintext-allowed", "true",
            "--broker-principals", f"User:{BROKER_USER}", "--inter-broker-user", BROKER_USER,
            "--inter-broker-password-file", str(password))
ANONYMOUS = "User:ANONYMOUS"
#: docs/security.md, "ACLs in a cluster": one poll interval plus one etcd read.
PROPAGATION_BOUND_S = SESSION_TIMEOUT_MS / 1000 / POLL_INTERVALS_PER_SESSION + ETCD_CALL_TIMEOUT_S
#: Added to the bound for a loaded 2-core machine (scheduling, the 100 ms test poll, the RPCs).
MARGIN_S = 3.0


def stub(server: ServerProcess) -> tuple[grpc.Channel, broker_pb2_grpc.BrokerStub]:
    channel = grpc.insecure_channel(server.target)
    return channel, broker_pb2_grpc.BrokerStub(channel)


def deny_describe(topic: str) -> pb.AclBinding:
    return pb.AclBinding(
        resource_type=pb.RESOURCE_TYPE_TOPIC, resource_name=topic,
        pattern_type=pb.PATTERN_TYPE_LITERAL, principal=ANONYMOUS, host="*",
        operation=pb.ACL_OPERATION_DESCRIBE, permission_type=pb.ACL_PERMISSION_TYPE_DENY,
    )


def describe(server: ServerProcess, topic: str) -> grpc.StatusCode:
    """The status of a DescribeTopic of ``topic`` on ``server``."""
    channel, broker = stub(server)
    with channel:
        try:
            broker.DescribeTopic(pb.DescribeTopicRequest(name=topic), timeout=CALL_TIMEOUT_S)
        except grpc.RpcError as err:
            return err.code()
        return grpc.StatusCode.OK


def may_describe(server: ServerProcess, topic: str) -> bool:
    """Whether the ACLs let the anonymous caller describe ``topic`` (it may not exist)."""
    return describe(server, topic) != grpc.StatusCode.PERMISSION_DENIED


# In make test's serial phase: it bounds the propagation's time (PROPAGATION_BOUND_S), which
# the parallel phase's load would stretch.
@pytest.mark.serial
def test_a_deny_made_through_one_server_is_enforced_by_every_server(
        acl_flags: tuple[str, ...], start_member) -> None:
    servers = [start_member(node_id, *acl_flags) for node_id in (1, 2, 3)]
    channel, first = stub(servers[0])
    with channel:
        first.CreateTopic(pb.CreateTopicRequest(name="orders", partitions=1,
                                                replication_factor=3), timeout=10)
        wait_for(lambda: all(describe(s, "orders") == grpc.StatusCode.OK for s in servers),
                 "orders everywhere")
        first.CreateAcls(pb.CreateAclsRequest(creations=[deny_describe("orders")]),
                         timeout=CALL_TIMEOUT_S)
        # The server written through applies the DENY before it answers.
        assert not may_describe(servers[0], "orders")
    took_s = wait_for(lambda: not any(may_describe(s, "orders") for s in servers[1:]),
                      "the DENY enforced by servers 2 and 3")
    assert took_s <= PROPAGATION_BOUND_S + MARGIN_S, took_s
    # Deleted through another server: every server allows again.
    channel, third = stub(servers[2])
    with channel:
        deleted = third.DeleteAcls(pb.DeleteAclsRequest(filters=[pb.AclBindingFilter(
            resource_type=pb.RESOURCE_TYPE_TOPIC, resource_name="orders",
            pattern_type=pb.PATTERN_TYPE_ANY, operation=pb.ACL_OPERATION_ANY,
            permission_type=pb.ACL_PERMISSION_TYPE_ANY)]), timeout=CALL_TIMEOUT_S).deleted
    assert list(deleted) == [deny_describe("orders")]
    assert may_describe(servers[2], "orders")
    took_s = wait_for(lambda: all(may_describe(s, "orders") for s in servers[:2]),
                      "the DENY gone from servers 1 and 2")
    assert took_s <= PROPAGATION_BOUND_S + MARGIN_S, took_s


def test_concurrent_updates_through_two_servers_all_land(
        acl_flags: tuple[str, ...], start_member) -> None:
    servers = [start_member(node_id, *acl_flags) for node_id in (1, 2)]
    # Fewer than UPDATE_ATTEMPTS each: an update fails an attempt only when the other server
    # wrote meanwhile, so none can run out of attempts (with 8 each, one whose every attempt
    # the other's 8 writes overtook was refused, as designed: a loaded make test saw it).
    per_server = UPDATE_ATTEMPTS - 1
    errors: list[BaseException] = []

    def create(server: ServerProcess, label: str) -> None:
        channel, broker = stub(server)
        with channel:
            try:
                for index in range(per_server):
                    broker.CreateAcls(pb.CreateAclsRequest(
                        creations=[deny_describe(f"{label}-{index}")]), timeout=10)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

    threads = [threading.Thread(target=create, args=(server, f"t{n}"))
               for n, server in enumerate(servers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    expected = {f"t{n}-{i}" for n in range(2) for i in range(per_server)}

    def names(server: ServerProcess) -> set[str]:
        channel, broker = stub(server)
        with channel:
            acls = broker.DescribeAcls(pb.DescribeAclsRequest(filter=pb.AclBindingFilter(
                resource_type=pb.RESOURCE_TYPE_ANY, pattern_type=pb.PATTERN_TYPE_ANY,
                operation=pb.ACL_OPERATION_ANY, permission_type=pb.ACL_PERMISSION_TYPE_ANY,
            )), timeout=CALL_TIMEOUT_S).acls
        return {acl.resource_name for acl in acls}

    wait_for(lambda: all(names(s) == expected for s in servers), f"all {2 * per_server} bindings everywhere")


def _acl_file(directory: Path, *topics: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / ACL_FILE_NAME
    path.write_bytes(encode_acls([AclBinding(
        ResourceType.TOPIC, topic, PatternType.LITERAL, ANONYMOUS, "*", AclOperation.DESCRIBE,
        AclPermissionType.DENY) for topic in topics]))
    return path


def test_a_nodes_acl_file_is_imported_once_and_refused_when_etcd_holds_others(
        acl_flags: tuple[str, ...], start_member, etcd: EtcdProcess, tmp_path: Path) -> None:
    first_file = _acl_file(tmp_path / "node-1", "secret")
    first = start_member(1, *acl_flags)
    assert "secret" in etcd.etcdctl("get", "--print-value-only", "/stratalog/acls")
    assert not first_file.exists()
    assert first_file.with_name(ACL_FILE_NAME + IMPORTED_SUFFIX).exists()
    assert not may_describe(first, "secret")
    # Another node whose file holds other ACLs: refused, naming both.
    other_file = _acl_file(tmp_path / "node-2", "other")
    try:
        launch_server(tmp_path / "node-2", "--cluster", etcd.url, "--node-id", "2",
                      "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS), *acl_flags)
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError("a node with other ACLs in its acls.json joined")
    assert f"{other_file} holds 1 ACL bindings and the cluster's ACLs in etcd" in message
    assert other_file.exists()  # left as it was, for its owner to decide
    # A node whose file holds the same set joins, and sets its file aside.
    same_file = _acl_file(tmp_path / "node-3", "secret")
    third = start_member(3, *acl_flags)
    assert not same_file.exists() and not may_describe(third, "secret")
    # A restart finds no file to compare: it joins with etcd's ACLs.
    assert first.stop() == 0
    restarted = start_member(1, *acl_flags)
    assert not may_describe(restarted, "secret")


def test_an_undecodable_acl_key_keeps_the_acls_in_force_and_refuses_a_start(
        acl_flags: tuple[str, ...], start_member, etcd: EtcdProcess, tmp_path: Path) -> None:
    _acl_file(tmp_path / "node-1", "secret")
    server = start_member(1, *acl_flags)
    assert not may_describe(server, "secret")
    etcd.etcdctl("put", "/stratalog/acls", '{"version": 1, "acls": [{"oops": 1}]}')
    wait_for(lambda: "the cluster's ACLs in etcd do not decode" in server.log_text(),
             "the bad value found by the poll")
    assert not may_describe(server, "secret")  # the DENY read before stays in force
    try:
        launch_server(tmp_path / "node-2", "--cluster", etcd.url, "--node-id", "2",
                      "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS), *acl_flags)
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError("a node joined while the cluster's ACL key does not decode")
    assert "etcd key /stratalog/acls: acls[0]" in message, message
    assert "fix the key with etcdctl" in message
