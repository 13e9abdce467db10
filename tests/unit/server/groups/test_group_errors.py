"""The error tree carries Kafka's codes, names and retriable flags: checked against
kafka-python's kafka.errors, an independent table of Kafka's protocol errors."""

from __future__ import annotations

import inspect

import kafka.errors
import pytest

from stratalog.server import groups
from stratalog.server.groups import GroupError, UnknownServerError

LEAVES = [
    cls
    for _, cls in inspect.getmembers(groups, inspect.isclass)
    if issubclass(cls, GroupError) and cls is not GroupError
]
BY_CODE = {
    cls.errno: cls
    for cls in vars(kafka.errors).values()
    if inspect.isclass(cls) and issubclass(cls, kafka.errors.BrokerResponseError)
    and isinstance(getattr(cls, "errno", None), int)
}


def test_every_leaf_is_exported_and_codes_are_unique():
    assert len(LEAVES) == 18
    assert len({cls.code for cls in LEAVES}) == len(LEAVES)


@pytest.mark.parametrize("cls", [c for c in LEAVES if c is not UnknownServerError],
                         ids=lambda c: c.__name__)
def test_code_name_and_retriable_agree_with_kafka_python(cls):
    oracle = BY_CODE[cls.code]
    assert (cls.kafka_name, cls.retriable) == (oracle.message, oracle.retriable)


def test_errors_compare_by_kind_and_message():
    assert groups.UnknownMemberIdError("x") == groups.UnknownMemberIdError("x")
    assert groups.UnknownMemberIdError("x") != groups.IllegalGenerationError("x")
    assert groups.UnknownMemberIdError("x") != groups.UnknownMemberIdError("y")
