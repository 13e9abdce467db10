"""Bootstrap targets: one, several (a list or comma-separated), and the mistakes named."""

from __future__ import annotations

import pytest

from stratalog.client import Client, SyncClient
from stratalog.client.bootstrap import BOOTSTRAP_TARGETS_MAX, bootstrap_targets


def test_one_target_is_itself() -> None:
    assert bootstrap_targets("127.0.0.1:50051") == ("127.0.0.1:50051",)


def test_comma_separated_and_list_forms_agree() -> None:
    expected = ("db1:50051", "db2:50051", "db3:50051")
    assert bootstrap_targets("db1:50051, db2:50051 ,db3:50051") == expected
    assert bootstrap_targets(["db1:50051", "db2:50051", "db3:50051"]) == expected
    assert bootstrap_targets(("db1:50051", "db2:50051,db3:50051")) == expected


def test_repeats_are_dropped_keeping_the_first() -> None:
    assert bootstrap_targets("b:1,a:1,b:1") == ("b:1", "a:1")


def test_grpc_scheme_targets_are_never_split() -> None:
    # gRPC's ipv4: scheme takes its own comma-separated list, balanced by gRPC itself.
    assert bootstrap_targets("ipv4:127.0.0.1:1,127.0.0.1:2") == ("ipv4:127.0.0.1:1,127.0.0.1:2",)


@pytest.mark.parametrize(("text", "position"), [("a:1,,b:2", 2), ("a:1,", 2), (",a:1", 1)])
def test_an_empty_entry_is_named(text: str, position: int) -> None:
    with pytest.raises(ValueError, match=f"entry {position} is empty"):
        bootstrap_targets(text)


@pytest.mark.parametrize("bad", ["", "   ", None, 5, b"a:1", ["a:1", 7]])
def test_not_a_target_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match="target"):
        bootstrap_targets(bad)


def test_an_empty_list_and_too_many_are_value_errors() -> None:
    with pytest.raises(ValueError, match="empty"):
        bootstrap_targets([])
    many = ",".join(f"h{i}:1" for i in range(BOOTSTRAP_TARGETS_MAX + 1))
    with pytest.raises(ValueError, match=f"more than {BOOTSTRAP_TARGETS_MAX}"):
        bootstrap_targets(many)


async def test_clients_take_the_list_and_say_it() -> None:
    async with Client(["127.0.0.1:1", "127.0.0.1:2"]) as client:
        assert client.targets == ("127.0.0.1:1", "127.0.0.1:2")
        assert client.target == "127.0.0.1:1,127.0.0.1:2"
    with SyncClient("127.0.0.1:1,127.0.0.1:2") as sync:
        assert sync.targets == ("127.0.0.1:1", "127.0.0.1:2")
    with pytest.raises(ValueError, match="entry 2 is empty"):
        Client("127.0.0.1:1,,127.0.0.1:2")
