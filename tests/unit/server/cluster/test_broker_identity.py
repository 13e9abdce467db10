"""BrokerIdentity's checks (server/cluster/broker_identity.py): who may replicate, as which node.

The cluster tests (tests/cluster/test_broker_identity.py) run them through real servers; these
pin the decision table itself, every row, with the registrations a membership read gives.
"""

from __future__ import annotations

import pytest

from stratalog.server.cluster.broker_identity import BrokerIdentity
from stratalog.server.cluster.errors import UnregisteredReplicaError
from stratalog.server.cluster.membership import BrokerInfo
from stratalog.server.rpc import status
from stratalog.server.security.errors import NotABrokerError
from stratalog.server.security.principal import ANONYMOUS, Principal

BROKER_1 = Principal.user("CN=broker-1,O=example")
BROKER_2 = Principal.user("CN=broker-2,O=example")
ALICE = Principal.user("alice")
REGISTERED = {
    1: BrokerInfo(1, "10.0.0.1:50051", str(BROKER_1)),
    2: BrokerInfo(2, "10.0.0.2:50051", str(BROKER_2)),
}
SECURED = BrokerIdentity([str(BROKER_1), str(BROKER_2)])


def test_only_broker_principals_may_call() -> None:
    assert SECURED.authenticated
    SECURED.check_caller(BROKER_1)
    for caller in (ANONYMOUS, ALICE):
        with pytest.raises(NotABrokerError, match=f"{caller} is not a server of this cluster"):
            SECURED.check_caller(caller)


def test_a_broker_fetches_as_the_node_it_registered_as_only() -> None:
    SECURED.check_replica(BROKER_2, 2, REGISTERED, "orders", 0)
    with pytest.raises(NotABrokerError, match=(
            r"CN=broker-1,O=example may not fetch as replica 2: node 2 registered as "
            r"User:CN=broker-2,O=example")):
        SECURED.check_replica(BROKER_1, 2, REGISTERED, "orders", 0)
    # A registration without a principal (a server started without broker_principals) is
    # nobody's.
    unnamed = {2: BrokerInfo(2, "10.0.0.2:50051")}
    with pytest.raises(NotABrokerError, match="registered as no principal"):
        SECURED.check_replica(BROKER_2, 2, unnamed, "orders", 0)


def test_a_node_that_is_not_registered_is_refused_in_every_mode() -> None:
    for identity, caller in ((SECURED, BROKER_1), (BrokerIdentity(()), ANONYMOUS)):
        with pytest.raises(UnregisteredReplicaError,
                           match="orders-0: node 3 is not a live server of the cluster"):
            identity.check_replica(caller, 3, REGISTERED, "orders", 0)


def test_without_broker_principals_the_network_is_trusted() -> None:
    open_cluster = BrokerIdentity(())
    assert not open_cluster.authenticated
    open_cluster.check_caller(ANONYMOUS)
    open_cluster.check_replica(ANONYMOUS, 2, REGISTERED, "orders", 0)


def test_the_refusals_travel_as_permission_denied_and_not_leader_or_follower() -> None:
    denied = status.classify(NotABrokerError("not authorized: x"))
    assert denied is not None and (denied.code.name, denied.reason) == (
        "PERMISSION_DENIED", "NOT_AUTHORIZED")
    unknown = status.classify(UnregisteredReplicaError("orders", 0, 3))
    assert unknown is not None and (unknown.code.name, unknown.reason) == (
        "UNAVAILABLE", "NOT_LEADER_OR_FOLLOWER")  # retriable
