"""Authorization against a real server process: every RPC without and with its ACLs, patterns,
deny over allow, hosts, listings, persistence across restarts and kill -9, `stratalog acls`.

Every call here is ``User:ANONYMOUS`` from 127.0.0.1 (no credentials, on plaintext servers): the
tests give that principal ACLs, or make it a super user, by starting servers with different
settings on one data directory. The principal's rules are the same as any other's:
test_server_acls_authenticated.py runs them with passwords, a token and a client certificate,
and tests/unit/security/test_authorizer.py for many principals.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from stratalog.client import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    SyncClient,
)
from stratalog.client.errors import NotAuthorizedError, StratalogError
from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc

from .acl_calls import (
    ACLS_FOR_EVERY_CALL,
    group_acls_for_every_call,
    list_services,
    outcome,
    rpc_calls,
)
from .conftest import CALL_TIMEOUT_S, ServerProcess, launch_server

CLI = [sys.executable, "-m", "stratalog.cli"]
ANONYMOUS = "User:ANONYMOUS"
ACL_SERVER = ("--authorizer", "acl")
SUPER_ANONYMOUS = ("--authorizer", "acl", "--super-users", ANONYMOUS)


def stratalog(target: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "STRATALOG_TARGET"}
    return subprocess.run([*CLI, *args, "--target", target], capture_output=True, timeout=120,
                          env=env)


def acls_add(target: str, *args: str) -> None:
    result = stratalog(target, "acls", "add", "--allow-principal", ANONYMOUS, *args)
    assert result.returncode == 0, result.stderr.decode()


def stopped(server: ServerProcess) -> None:
    code = server.stop()
    assert code == 0, f"exit {code}; log:\n{server.log_text()[-3000:]}"


def test_every_rpc_is_refused_without_its_acls_and_served_with_them(start_server, tmp_path):
    data = tmp_path / "data"
    # 1. A super user makes the topic; the server then holds no ACL at all.
    server = start_server(data, *SUPER_ANONYMOUS)
    with SyncClient(server.target) as client:
        client.create_topic("orders")
        client.produce("orders", 0, [b"first"])
    stopped(server)

    # 2. No ACL: every RPC is refused, except the open ones; nothing is listed.
    server = start_server(data, *ACL_SERVER)
    with grpc.insecure_channel(server.target) as channel:
        calls = rpc_calls(broker_pb2_grpc.BrokerStub(channel))
        methods = {m.name for m in pb.DESCRIPTOR.services_by_name["Broker"].methods}
        assert {name for name, _ in calls} == methods, "a new RPC needs a call here"
        for name, call in calls:
            result = outcome(call)
            if name == "WhoAmI":
                assert result.principal == ANONYMOUS  # open to everyone
            elif name == "ListTopics":
                assert list(result.topics) == []
            elif name == "ListGroups":
                assert list(result.groups) == []
            else:
                assert isinstance(result, NotAuthorizedError), (name, result)
                assert result.code == grpc.StatusCode.PERMISSION_DENIED
                assert result.operation and result.resource, name
        # Server reflection needs DESCRIBE on the cluster.
        reflection = outcome(lambda: list_services(channel))
        assert isinstance(reflection, NotAuthorizedError)
        assert reflection.resource == "Cluster:kafka-cluster"
    stopped(server)

    # 3. A super user grants ANONYMOUS exactly what the calls need (stratalog acls add).
    server = start_server(data, *SUPER_ANONYMOUS)
    for grant in ACLS_FOR_EVERY_CALL:
        acls_add(server.target, *grant)
    with SyncClient(server.target) as client:
        client.create_acls(group_acls_for_every_call(ANONYMOUS))
    stopped(server)

    # 4. Restarted without super users: the ACLs were kept, and every RPC is served.
    server = start_server(data, *ACL_SERVER)
    with grpc.insecure_channel(server.target) as channel:
        for name, call in rpc_calls(broker_pb2_grpc.BrokerStub(channel)):
            result = outcome(call)
            assert not isinstance(result, StratalogError), (name, result)
            if name == "ListGroups":
                assert [g.group_id for g in result.groups] == ["grp"]
            if name == "ListTopics":
                assert [t.name for t in result.topics] == ["orders"]
                # ALTER_CONFIGS implies DESCRIBE_CONFIGS: the configs are shown.
                assert "retention.ms" in result.topics[0].configs
            if name == "DescribeTransaction":
                assert [p.topic for p in result.partitions] == ["orders"]
        assert "stratalog.v1.Broker" in list_services(channel)
    stopped(server)


def test_a_producer_without_write_is_told_the_permission_to_grant(start_server, tmp_path):
    """Issue 25 item 9: `stratalog produce` by a user with DESCRIBE but no WRITE on the topic
    said `may not IDEMPOTENT_WRITE Cluster:kafka-cluster`, a permission users rarely grant; the
    refusal names WRITE on the topic, and the command that grants it."""
    data = tmp_path / "data"
    server = start_server(data, *SUPER_ANONYMOUS)
    with SyncClient(server.target) as client:
        client.create_topic("no-write")
        client.create_acls([allow("no-write", AclOperation.DESCRIBE)])
    stopped(server)
    server = start_server(data, *ACL_SERVER)
    result = subprocess.run([*CLI, "produce", "no-write", "--target", server.target],
                            input=b"hello\n", capture_output=True, timeout=120,
                            env={k: v for k, v in os.environ.items()
                                 if not k.startswith("STRATALOG_")})
    stderr = result.stderr.decode()
    assert result.returncode != 0, stderr
    assert "User:ANONYMOUS may not WRITE any topic" in stderr, stderr
    assert ("stratalog acls add --allow-principal User:ANONYMOUS --operation WRITE --topic NAME"
            in stderr), stderr
    assert "may not IDEMPOTENT_WRITE" not in stderr, stderr
    stopped(server)
    # The grant the message names is enough.
    server = start_server(data, *SUPER_ANONYMOUS)
    acls_add(server.target, "--operation", "WRITE", "--topic", "no-write")
    stopped(server)
    server = start_server(data, *ACL_SERVER)
    result = subprocess.run([*CLI, "produce", "no-write", "--target", server.target],
                            input=b"hello\n", capture_output=True, timeout=120,
                            env={k: v for k, v in os.environ.items()
                                 if not k.startswith("STRATALOG_")})
    assert result.returncode == 0, result.stderr.decode()
    stopped(server)


# ------------------------------------------------------------------------ a managed server


@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server where ANONYMOUS may manage ACLs and create topics (cluster ALTER, DESCRIBE,
    CREATE) and nothing else until a test grants it."""
    data = tmp_path_factory.mktemp("acls") / "data"
    server = launch_server(data, *SUPER_ANONYMOUS)
    acls_add(server.target, "--cluster", "--operation", "Alter", "--operation", "Describe",
             "--operation", "Create")
    stopped(server)
    server = launch_server(data, *ACL_SERVER)
    yield server
    stopped(server)


@pytest.fixture
def client(managed: ServerProcess) -> Iterator[SyncClient]:
    with SyncClient(managed.target) as client:
        yield client


def allow(name: str, operation: AclOperation, *, pattern: PatternType = PatternType.LITERAL,
          host: str = "*", permission: AclPermissionType = AclPermissionType.ALLOW,
          principal: str = ANONYMOUS) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, pattern, principal, host, operation, permission)


def refused(call: Callable[[], Any]) -> NotAuthorizedError:
    with pytest.raises(NotAuthorizedError) as caught:
        call()
    return caught.value


def test_literal_and_prefixed_patterns(client: SyncClient) -> None:
    client.create_topic("lit-a")
    client.create_topic("pre-a")
    client.create_topic("pre-b")
    refused(lambda: client.produce("lit-a", 0, [b"x"]))
    client.create_acls([allow("lit-a", AclOperation.WRITE),
                        allow("pre-", AclOperation.WRITE, pattern=PatternType.PREFIXED)])
    client.produce("lit-a", 0, [b"x"])
    client.produce("pre-a", 0, [b"x"])
    client.produce("pre-b", 0, [b"x"])
    error = refused(lambda: client.fetch_by_offset("pre-a", 0, 0))
    assert (error.operation, error.resource) == ("READ", "Topic:pre-a")
    assert error.metadata["topic"] == "pre-a"


def test_deny_wins_over_allow(client: SyncClient) -> None:
    client.create_topic("deny-a")
    client.create_acls([allow("deny-", AclOperation.ALL, pattern=PatternType.PREFIXED)])
    client.produce("deny-a", 0, [b"x"])
    assert client.fetch_by_offset("deny-a", 0, 0).records[0].value == b"x"
    client.create_acls([allow("deny-a", AclOperation.READ,
                              permission=AclPermissionType.DENY, principal="User:*")])
    refused(lambda: client.fetch_by_offset("deny-a", 0, 0))
    client.produce("deny-a", 0, [b"y"])  # only READ is denied
    client.delete_acls([AclBindingFilter(ResourceType.TOPIC, "deny-a",
                                         permission_type=AclPermissionType.DENY)])
    assert client.fetch_by_offset("deny-a", 0, 0).records[0].value == b"x"


def test_hosts_are_matched(client: SyncClient) -> None:
    client.create_topic("host-a")
    client.create_acls([allow("host-a", AclOperation.WRITE, host="10.9.8.7")])
    refused(lambda: client.produce("host-a", 0, [b"x"]))  # we call from 127.0.0.1
    client.create_acls([allow("host-a", AclOperation.WRITE, host="127.0.0.1")])
    client.produce("host-a", 0, [b"x"])


def test_topics_are_not_revealed_without_describe(client: SyncClient) -> None:
    client.create_topic("seen-a")
    client.create_topic("hidden-a")
    # The same refusal for a topic that exists and one that does not.
    exists = refused(lambda: client.describe_topic("hidden-a"))
    missing = refused(lambda: client.describe_topic("hidden-nope"))
    assert str(exists).replace("hidden-a", "X") == str(missing).replace("hidden-nope", "X")
    client.create_acls([allow("seen-", AclOperation.DESCRIBE, pattern=PatternType.PREFIXED)])
    names = [t.name for t in client.list_topics()]
    assert "seen-a" in names and "hidden-a" not in names
    with pytest.raises(StratalogError) as caught:
        client.describe_topic("seen-nope")
    assert caught.value.reason == "UNKNOWN_TOPIC_OR_PARTITION"


def test_a_malformed_request_is_refused_as_malformed(managed: ServerProcess) -> None:
    with grpc.insecure_channel(managed.target) as channel:
        produce = channel.unary_unary("/stratalog.v1.Broker/Produce")
        with pytest.raises(grpc.RpcError) as caught:
            produce(b"\xff\xff\xff", timeout=CALL_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_acls_are_refused_naming_the_field(client: SyncClient) -> None:
    with pytest.raises(StratalogError) as caught:
        client.create_acls([allow("x", AclOperation.READ),
                            allow("y", AclOperation.READ, host="my-laptop")])
    assert caught.value.reason == "INVALID_REQUEST"
    assert caught.value.metadata["field"] == "creations[1].host"
    assert not client.describe_acls(AclBindingFilter(ResourceType.TOPIC, "x"))


def test_health_stays_open(managed: ServerProcess) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(managed.target) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                           timeout=CALL_TIMEOUT_S)
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_allow_everyone_if_no_acl_found(start_server, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_server(data, *SUPER_ANONYMOUS)
    with SyncClient(server.target) as client:
        client.create_topic("open")
        client.create_topic("closed")
        client.create_acls([allow("closed", AclOperation.READ, principal="User:someone")])
    stopped(server)
    server = start_server(data, *ACL_SERVER, "--allow-everyone-if-no-acl-found", "true")
    with SyncClient(server.target) as client:
        client.produce("open", 0, [b"x"])
        refused(lambda: client.produce("closed", 0, [b"x"]))
    stopped(server)


def test_acl_requests_to_a_server_without_authorizer(server: ServerProcess) -> None:
    with SyncClient(server.target) as client, pytest.raises(StratalogError) as caught:
        client.describe_acls()
    assert caught.value.reason == "INVALID_REQUEST"
    assert 'authorizer = "none"' in caught.value.message


# ------------------------------------------------------------------------ durability


def _binding(index: int) -> AclBinding:
    return allow(f"kill-{index:05d}", AclOperation.READ, principal="User:writer")


@pytest.mark.slow
def test_kill_9_during_acl_updates_keeps_every_acknowledged_acl(start_server, tmp_path):
    """CreateAcls one binding at a time while the server is killed at a random moment: after
    each restart the ACLs are the first N bindings, N at least the number acknowledged."""
    data = tmp_path / "data"
    created = 0
    rng = random.Random(13)
    for _ in range(4):
        server = start_server(data, *SUPER_ANONYMOUS)
        acknowledged = [created]
        done = threading.Event()

        def create(target: str = server.target, done: threading.Event = done,
                   acknowledged: list[int] = acknowledged) -> None:
            with SyncClient(target, timeout_s=5) as client:
                while not done.is_set():
                    try:
                        client.create_acls([_binding(acknowledged[0])])
                    except StratalogError:
                        return  # the server went away
                    acknowledged[0] += 1

        writer = threading.Thread(target=create)
        writer.start()
        threading.Event().wait(0.3 + rng.random() * 0.7)
        server.process.send_signal(signal.SIGKILL)
        server.process.wait()
        done.set()
        writer.join(30)
        server.stop()
        server = start_server(data, *SUPER_ANONYMOUS)
        with SyncClient(server.target) as client:
            names = [b.resource_name for b in client.describe_acls()
                     if b.principal == "User:writer"]
        assert names == [f"kill-{i:05d}" for i in range(len(names))]
        assert len(names) >= acknowledged[0]
        assert len(names) <= acknowledged[0] + 1  # at most the one in flight
        created = len(names)
        stopped(server)
    assert created > 0


def test_a_broken_acl_file_stops_the_start_naming_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "acls.json").write_text('{"version": 1, "acls": [{"torn')
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0", "--metrics-port",
         "-1", "--log-dirs", str(data), *ACL_SERVER],
        capture_output=True, timeout=120,
    )
    assert result.returncode == 1
    assert f"ACL file {data / 'acls.json'} is not UTF-8 JSON" in result.stderr.decode()
    # The log directory was closed cleanly on the way out.
    assert (data / ".kafka_cleanshutdown").exists()


# ------------------------------------------------------------------------ stratalog acls


def test_stratalog_acls_add_list_remove(managed: ServerProcess, client: SyncClient) -> None:
    target = managed.target
    added = stratalog(target, "acls", "add", "--allow-principal", "User:alice",
                      "--allow-principal", "User:bob", "--producer", "--topic", "cli-",
                      "--resource-pattern-type", "prefixed", "--transactional-id", "cli-app",
                      "--json")
    assert added.returncode == 0, added.stderr
    bindings = json.loads(added.stdout)["added"]
    assert len(bindings) == 2 * (3 + 2)  # 2 principals x (3 topic + 2 transactional id ops)
    denied = stratalog(target, "acls", "add", "--deny-principal", "User:mallory",
                       "--deny-host", "10.0.0.66", "--operation", "all", "--topic", "*")
    assert denied.returncode == 0, denied.stderr
    assert "Added ACLs for resource `ResourcePattern(resourceType=TOPIC, name=*, " \
           "patternType=LITERAL)`:" in denied.stdout.decode()

    listed = stratalog(target, "acls", "list", "--topic", "cli-", "--resource-pattern-type",
                       "prefixed", "--principal", "User:alice", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(b["operation"] for b in json.loads(listed.stdout)) == [
        "CREATE", "DESCRIBE", "WRITE",
    ]
    matching = stratalog(target, "acls", "list", "--topic", "cli-orders",
                         "--resource-pattern-type", "match").stdout.decode()
    assert "name=cli-, patternType=PREFIXED" in matching and "name=*," in matching
    assert "\t(principal=User:mallory, host=10.0.0.66, operation=ALL, permissionType=DENY)" \
        in matching
    everything = json.loads(stratalog(target, "acls", "list", "--json").stdout)
    assert len(everything) >= 11

    removed = stratalog(target, "acls", "remove", "--allow-principal", "User:bob",
                        "--topic", "cli-", "--resource-pattern-type", "prefixed", "--json")
    assert removed.returncode == 0, removed.stderr
    assert len(json.loads(removed.stdout)["removed"]) == 3
    left = client.describe_acls(AclBindingFilter(principal="User:bob"))
    assert {b.resource_type for b in left} == {ResourceType.TRANSACTIONAL_ID}
    nothing = stratalog(target, "acls", "remove", "--allow-principal", "User:bob",
                        "--topic", "cli-", "--resource-pattern-type", "prefixed")
    assert nothing.stdout.decode().strip() == "No ACL matched; nothing removed."


@pytest.mark.parametrize(("args", "words"), [
    (("add", "--allow-principal", "User:a", "--operation", "Read"), "name a resource"),
    (("add", "--topic", "t", "--operation", "Read"), "--allow-principal or --deny-principal"),
    (("add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Fly"),
     "not a AclOperation"),
    (("add", "--allow-principal", "User:a", "--topic", "t", "--producer", "--operation",
      "Read"), "not both"),
    (("remove", "--allow-principal", "User:a"), "--all"),
])
def test_stratalog_acls_usage_errors(managed: ServerProcess, args, words) -> None:
    result = stratalog(managed.target, "acls", *args)
    assert result.returncode == 2
    assert words in result.stderr.decode()


def test_stratalog_acls_refusals(managed: ServerProcess, server: ServerProcess) -> None:
    bad = stratalog(managed.target, "acls", "add", "--allow-principal", "alice", "--topic", "t")
    assert bad.returncode == 1
    assert "creations[0].principal" in bad.stderr.decode()
    off = stratalog(server.target, "acls", "list")
    assert off.returncode == 1
    assert "no authorizer" in off.stderr.decode()
