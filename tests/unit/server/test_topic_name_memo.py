"""server.topic_name_memo: names checked by the engine's rules once, refused ones every time,
and a bound on what is remembered."""

from __future__ import annotations

import pytest

from stratalog.server.storage.errors import InvalidTopicError
from stratalog.server.topic_name_memo import ValidTopicNames


def test_topic_names_are_checked_once_and_bad_ones_every_time() -> None:
    names = ValidTopicNames()
    assert names.check("orders") == "orders"
    assert "orders" in names
    assert names.check("orders") == "orders"
    for _ in range(2):  # a refused name is never remembered as valid
        with pytest.raises(InvalidTopicError, match="Topic name is invalid"):
            names.check("bad/name")
    assert "bad/name" not in names
    assert len(names) == 1


def test_remembered_topic_names_are_bounded() -> None:
    limit = 100
    names = ValidTopicNames(limit)
    for i in range(limit + 10):
        names.check(f"topic-{i}")
    assert 0 < len(names) <= limit
    assert names.check("topic-0") == "topic-0"  # forgotten names are simply checked again
    with pytest.raises(ValueError, match="max_names"):
        ValidTopicNames(0)


def test_every_memo_is_its_own() -> None:
    first, second = ValidTopicNames(), ValidTopicNames()
    first.check("orders")
    assert "orders" not in second
