"""Membership and the controller against real processes: etcd and three servers on 127.0.0.1.

Each test starts its own etcd (tests/cluster/conftest.py) and servers with a 2 s session
timeout. What is checked is what etcd and the servers say through the Metadata RPC, never a
private state.
"""

from __future__ import annotations

import signal
import time

import grpc

from stratalog.v1 import broker_pb2 as pb
from stratalog.v1 import broker_pb2_grpc
from tests.integration.conftest import ServerProcess

from .conftest import SESSION_TIMEOUT_MS, metadata, wait_for

#: A takeover: the session timeout, one poll interval (timeout / 12), slack for this machine.
TAKEOVER_BOUND_S = SESSION_TIMEOUT_MS / 1000 * 3 + 5


def agreed_controller(servers: list[ServerProcess]) -> tuple[int, int] | None:
    """(controller id, epoch) if every server names the same one, else None."""
    seen = {(m.controller_id, m.controller_epoch) for m in map(metadata, servers)}
    if len(seen) == 1:
        controller = seen.pop()
        return controller if controller[0] >= 0 else None
    return None


def broker_ids(server: ServerProcess) -> list[int]:
    return [b.node_id for b in metadata(server).brokers]


def test_three_servers_register_and_agree_on_one_controller(start_member) -> None:
    servers = [start_member(node_id) for node_id in (1, 2, 3)]
    wait_for(lambda: all(broker_ids(s) == [1, 2, 3] for s in servers), "3 brokers everywhere")
    wait_for(lambda: agreed_controller(servers) is not None, "one controller agreed")
    controller_id, epoch = agreed_controller(servers)  # type: ignore[misc]
    assert controller_id in (1, 2, 3)
    assert epoch == 1  # one election in a new cluster
    answer = metadata(servers[0])
    assert answer.node_id == 1
    assert [b.address for b in answer.brokers] == [s.target for s in servers]


def test_killing_the_controller_elects_another_with_a_higher_epoch(start_member) -> None:
    servers = {node_id: start_member(node_id) for node_id in (1, 2, 3)}
    wait_for(lambda: agreed_controller(list(servers.values())) is not None, "a controller")
    old_id, old_epoch = agreed_controller(list(servers.values()))  # type: ignore[misc]
    servers.pop(old_id).kill()
    survivors = list(servers.values())
    took_s = wait_for(
        lambda: (agreed_controller(survivors) or (old_id, 0))[0] != old_id,
        "a new controller after kill -9 of the old one", timeout_s=TAKEOVER_BOUND_S,
    )
    new_id, new_epoch = agreed_controller(survivors)  # type: ignore[misc]
    assert new_id in servers
    assert new_epoch == old_epoch + 1
    assert took_s < TAKEOVER_BOUND_S
    wait_for(lambda: all(len(broker_ids(s)) == 2 for s in survivors), "the dead broker gone")


def test_a_cleanly_stopped_controller_hands_over_without_waiting_for_its_lease(
    start_member,
) -> None:
    # The session timeout is raised to a minute here: only the revoked lease can explain a
    # takeover within seconds.
    servers = {n: start_member(n, "--cluster-session-timeout-ms", "60000") for n in (1, 2)}
    wait_for(lambda: agreed_controller(list(servers.values())) is not None, "a controller")
    old_id, old_epoch = agreed_controller(list(servers.values()))  # type: ignore[misc]
    assert servers.pop(old_id).stop() == 0
    survivor = next(iter(servers.values()))
    wait_for(lambda: metadata(survivor).controller_id == survivor_id(survivor),
             "the survivor is controller", timeout_s=30)
    assert metadata(survivor).controller_epoch == old_epoch + 1
    assert broker_ids(survivor) == [survivor_id(survivor)]


def survivor_id(server: ServerProcess) -> int:
    return metadata(server).node_id


def test_a_restarted_node_rejoins(start_member, tmp_path) -> None:
    servers = [start_member(node_id) for node_id in (1, 2, 3)]
    wait_for(lambda: broker_ids(servers[0]) == [1, 2, 3], "3 brokers")
    servers[2].kill()
    # Its registration lives until its lease expires: then node 3 is free again.
    wait_for(lambda: broker_ids(servers[0]) == [1, 2], "node 3 gone")
    restarted = start_member(3, data_dir=servers[2].data_dir)
    wait_for(lambda: all(broker_ids(s) == [1, 2, 3] for s in (servers[0], servers[1],
                                                              restarted)),
             "node 3 back everywhere")
    wait_for(lambda: agreed_controller([servers[0], servers[1], restarted]) is not None,
             "one controller agreed")


def test_a_duplicate_node_id_is_refused(start_member, etcd, tmp_path) -> None:
    from tests.integration.conftest import launch_server

    first = start_member(1)
    try:
        launch_server(tmp_path / "duplicate", "--cluster", etcd.url, "--node-id", "1")
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError("a second server with node id 1 started")
    assert "exited with 1" in message
    assert "node id 1 is already registered by a live server at " + first.target in message
    assert broker_ids(first) == [1]


def test_servers_keep_their_view_while_etcd_is_down(start_member, etcd) -> None:
    # Produce and fetch while etcd is down are the replication tests' (they need the replica
    # manager, which creates a replicated topic's logs); here: the views stay as they were,
    # and nobody is elected while etcd cannot record it.
    servers = [start_member(node_id) for node_id in (1, 2)]
    wait_for(lambda: agreed_controller(servers) is not None, "a controller")
    wait_for(lambda: all(broker_ids(s) == [1, 2] for s in servers), "both brokers seen")
    with grpc.insecure_channel(servers[0].target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        stub.CreateTopic(pb.CreateTopicRequest(name="orders", partitions=2,
                                               replication_factor=2), timeout=10)

    def leadership(server: ServerProcess) -> list[tuple[int, int, list[int]]]:
        return [(p.leader, p.leader_epoch, list(p.isr))
                for t in metadata(server).topics for p in t.partitions]

    wait_for(lambda: all(len(leadership(s)) == 2 for s in servers), "orders in every view")
    before = leadership(servers[0])
    etcd.stop()
    # Longer than a session: every lease would have expired, had etcd been there.
    time.sleep(SESSION_TIMEOUT_MS / 1000 * 2)
    # Metadata still answers from the last view: the brokers and leaders as they were.
    for server in servers:
        assert [b.node_id for b in metadata(server).brokers] == [1, 2]
        assert leadership(server) == before
    # Once etcd is back, the servers find it again: a controller is agreed on.
    etcd.start()
    wait_for(lambda: agreed_controller(servers) is not None, "a controller after etcd is back")
    wait_for(lambda: all(broker_ids(s) == [1, 2] for s in servers), "both brokers registered")


def test_a_frozen_server_registers_again_with_a_new_lease(start_member) -> None:
    servers = [start_member(node_id) for node_id in (1, 2)]
    wait_for(lambda: broker_ids(servers[0]) == [1, 2], "2 brokers")
    servers[1].process.send_signal(signal.SIGSTOP)
    try:
        # Frozen past its session: etcd expires its lease and deletes its registration.
        wait_for(lambda: broker_ids(servers[0]) == [1], "the frozen node gone")
    finally:
        servers[1].process.send_signal(signal.SIGCONT)
    # Its next renewal finds the lease expired: a new lease, and it registers again.
    wait_for(lambda: broker_ids(servers[0]) == [1, 2], "the node registered again")
    wait_for(lambda: agreed_controller(servers) is not None, "one controller agreed")
    assert "lease" in servers[1].log_text() and "expired" in servers[1].log_text()


def test_a_server_whose_etcd_does_not_answer_does_not_start(tmp_path) -> None:
    from tests.integration.conftest import launch_server

    from .conftest import free_port

    try:
        launch_server(tmp_path / "data", "--cluster", f"etcd://127.0.0.1:{free_port()}",
                      "--node-id", "1")
    except AssertionError as exc:
        message = str(exc)
    else:
        raise AssertionError("a server started without its etcd")
    assert "exited with 1" in message
    assert "no etcd endpoint answered" in message
