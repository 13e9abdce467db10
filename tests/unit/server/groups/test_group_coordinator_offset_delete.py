"""OffsetDelete, as Kafka's OffsetMetadataManagerTest (testDeleteOffsets...) and ClassicGroupTest
(testValidateOffsetDelete, testIsSubscribedToTopic): tombstones for the partitions named, refused
for a topic the group's members subscribe to, for no group, and for a non-consumer group with
members; applied only once written, and kept by a reload."""

from __future__ import annotations

import pytest
from kafka.coordinator.assignors.range import RangePartitionAssignor

from stratalog.client.groups.consumer_protocol import Subscription, encode_subscription
from stratalog.server.groups import (
    GroupCoordinator,
    GroupIdNotFoundError,
    GroupState,
    GroupSubscribedToTopicError,
    InvalidGroupIdError,
    LeavingMember,
    NonEmptyGroupError,
    OffsetCommitTombstone,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    PartitionError,
    PartitionOffset,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    UnknownServerError,
)
from stratalog.server.groups.subscribed_topics import is_subscribed_to_topic, subscribed_topics


def delete(harness, partitions, group_id="g") -> OffsetDeleteResponse:
    token = harness.token()
    harness.run(harness.coordinator.delete_offsets(
        OffsetDeleteRequest(group_id, tuple(partitions)), token, harness.now_ms))
    return harness.answer(token)


def offsets(harness, group_id="g"):
    return {(f.topic, f.partition): f.offset for f in harness.fetch(group_id).partitions}


def stable_member(harness, metadata: bytes, protocol_type: str = "consumer") -> str:
    """One member joins with ``metadata`` for "range", leads, and syncs: a Stable group."""
    member_id, token = harness.join_new(protocols=(("range", metadata),),
                                        protocol_type=protocol_type)
    harness.advance(0)
    generation = harness.answer(token).generation_id
    harness.run(harness.coordinator.sync_group(SyncGroupRequest(
        "g", member_id, generation, None, protocol_type, None, ((member_id, b"x"),),
    ), harness.token(), harness.now_ms))
    assert harness.group().state is GroupState.STABLE
    return member_id


def tombstones(harness):
    return [r for _, r, _ in harness.log if isinstance(r, OffsetCommitTombstone)]


# -- refusals of the whole request --------------------------------------------------------------


@pytest.mark.parametrize(("group_id", "error"), [
    ("missing", GroupIdNotFoundError),
    ("", InvalidGroupIdError),
])
def test_no_group_or_a_bad_id_is_refused(harness, group_id, error):
    response = delete(harness, [("t", 0)], group_id)
    assert isinstance(response.error, error) and response.partitions == ()
    assert harness.log == []


def test_a_group_with_members_of_another_protocol_type_is_non_empty(harness):
    harness.commit({("t", 0): 5}, group_id="g")
    member_id = stable_member(harness, b"opaque", protocol_type="connect")
    harness.commit({("t", 1): 7}, member_id=member_id,
                   generation=harness.group().generation_id)
    response = delete(harness, [("t", 0)])
    assert isinstance(response.error, NonEmptyGroupError), response
    assert offsets(harness) == {("t", 0): 5, ("t", 1): 7} and tombstones(harness) == []


# -- which topics a group uses --------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_stable_consumer_group_refuses_its_subscribed_topics_and_writes_nothing(
        harness, version):
    harness.commit({("orders", 0): 5, ("old", 0): 9})
    stable_member(harness, encode_subscription(Subscription(topics=("orders", "payments")),
                                               version))
    response = delete(harness, [("old", 0), ("orders", 0), ("orders", 1)])
    assert response.error is None
    assert [(p.topic, p.partition, type(p.error)) for p in response.partitions] == [
        ("old", 0, type(None)),
        ("orders", 0, GroupSubscribedToTopicError),
        ("orders", 1, GroupSubscribedToTopicError),
    ]
    # All or nothing: the unsubscribed topic's offset stays too.
    assert tombstones(harness) == [] and offsets(harness) == {("orders", 0): 5, ("old", 0): 9}


def test_unsubscribed_topics_of_a_stable_group_are_deleted_with_tombstones(harness):
    harness.commit({("orders", 0): 5, ("old", 0): 9, ("old", 1): 10})
    # A Kafka client's bytes (kafka-python's range assignor's subscription).
    stable_member(harness, RangePartitionAssignor.metadata({"orders"}).encode())
    response = delete(harness, [("old", 0), ("old", 1), ("old", 7), ("old", 0)])
    assert response == OffsetDeleteResponse(None, (
        PartitionError("old", 0, None), PartitionError("old", 1, None),
        PartitionError("old", 7, None),  # no offset: answered, nothing written
    ))
    assert tombstones(harness) == [OffsetCommitTombstone("g", "old", 0),
                                   OffsetCommitTombstone("g", "old", 1)]
    assert offsets(harness) == {("orders", 0): 5}


def test_an_empty_or_simple_group_deletes_any_topic(harness):
    harness.commit({("t", 0): 5, ("t", 1): 6})  # a simple group: no members, no protocol
    assert delete(harness, [("t", 0)]).partitions == (PartitionError("t", 0, None),)
    assert offsets(harness) == {("t", 1): 6}
    member_id = stable_member(harness, encode_subscription(Subscription(topics=("t",))))
    harness.leave(LeavingMember(member_id, None, None))
    assert harness.group().state is GroupState.EMPTY
    assert delete(harness, [("t", 1)]).partitions == (PartitionError("t", 1, None),)
    assert offsets(harness) == {}


def test_undecodable_consumer_metadata_counts_as_subscribed_to_everything(harness):
    harness.commit({("t", 0): 5})
    stable_member(harness, b"\x00")  # one byte: not even a version
    group = harness.group()
    assert subscribed_topics(group) is None and is_subscribed_to_topic(group, "anything")
    response = delete(harness, [("t", 0)])
    assert isinstance(response.partitions[0].error, GroupSubscribedToTopicError)
    assert offsets(harness) == {("t", 0): 5}


def test_a_negative_version_is_not_a_subscription(harness):
    stable_member(harness, b"\xff\xff" + encode_subscription(Subscription(topics=("t",)))[2:])
    assert subscribed_topics(harness.group()) is None


# -- the write ---------------------------------------------------------------------------------


def test_offsets_go_only_once_the_tombstones_are_written(harness):
    harness.commit({("t", 0): 5})
    harness.hold_writes = True
    token = harness.token()
    harness.run(harness.coordinator.delete_offsets(
        OffsetDeleteRequest("g", (("t", 0),)), token, harness.now_ms))
    assert harness.answer(token) is None and offsets(harness) == {("t", 0): 5}
    harness.release()
    assert harness.answer(token) == OffsetDeleteResponse(None, (PartitionError("t", 0, None),))
    assert offsets(harness) == {}


def test_a_failed_write_answers_its_error_and_keeps_the_offsets(harness):
    harness.commit({("t", 0): 5})
    harness.hold_writes = True
    token = harness.token()
    harness.run(harness.coordinator.delete_offsets(
        OffsetDeleteRequest("g", (("t", 0),)), token, harness.now_ms))
    harness.release(UnknownServerError("disk"))
    assert harness.answer(token) == OffsetDeleteResponse(UnknownServerError("disk"))
    assert offsets(harness) == {("t", 0): 5}


def test_a_pending_transactional_offset_is_tombstoned_too(harness):
    token = harness.token()
    harness.run(harness.coordinator.commit_transactional_offsets(TxnOffsetCommitRequest(
        "tx", 7, 0, "g", (PartitionOffset("t", 0, 3, -1, ""),), "", -1, None,
    ), token, harness.now_ms))
    assert harness.answer(token).partitions[0].error is None
    assert delete(harness, [("t", 0)]).partitions == (PartitionError("t", 0, None),)
    assert tombstones(harness) == [OffsetCommitTombstone("g", "t", 0)]
    harness.end_transaction(7, committed=True)  # the tombstone came after: nothing shows
    assert offsets(harness) == {}


def test_a_reload_keeps_the_deletion(harness):
    harness.commit({("t", 0): 5, ("t", 1): 6})
    delete(harness, [("t", 0)])
    reloaded = GroupCoordinator(harness.config, loading=True, now_ms=harness.now_ms)
    harness.replay_into(reloaded)
    reloaded.complete_load(harness.now_ms)
    assert reloaded.offsets.group_offsets("g").keys() == {("t", 1)}
