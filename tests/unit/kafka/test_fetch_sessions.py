"""The fetch session cache (server/kafka/fetch_sessions.py) alone: the rules of a request's
session id and epoch, incremental updates, what an incremental answer names, eviction, the
bounds and the principal check; ``check()`` after every step. kafka-python's client side of
KIP-227 (``kafka.consumer.fetcher.FetchSessionHandler``) is the oracle for what a client sends
and accepts."""

from __future__ import annotations

import random
from collections import OrderedDict

from kafka.consumer.fetcher import FetchSessionHandler
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.structs import TopicPartition

from stratalog.server.kafka.error_codes import Code
from stratalog.server.kafka.fetch_sessions import (
    FETCH_PARTITION_BYTES_MIN,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionCache,
    PartitionAnswer,
    PartitionWant,
    next_epoch,
)
from stratalog.server.kafka.hot_messages import _fetch_partition_layout

ALICE, BOB = "User:alice", "User:bob"


def _want(topic: str, partition: int, offset: int = 0) -> PartitionWant:
    return PartitionWant(topic, partition, offset, 1 << 20)


def _quiet(high_watermark: int = 10) -> PartitionAnswer:
    return PartitionAnswer(Code.NONE, high_watermark, high_watermark, 0, 0)


def _open(cache: FetchSessionCache, principal: str, wants: list[PartitionWant],
          now_ms: int = 0) -> int:
    """A full request's session id (0: none)."""
    context = cache.new_context(principal, INVALID_SESSION_ID, INITIAL_EPOCH, wants, [], now_ms)
    assert context.kind == "full" and context.wants() == wants
    error, session_id, answered = context.answer(
        {(w.topic, w.partition): _quiet() for w in wants}, now_ms)
    assert error == Code.NONE and answered == [(w.topic, w.partition) for w in wants]
    cache.check()
    return session_id


def test_the_partition_size_bound_is_the_decoders_v7_layout() -> None:
    assert _fetch_partition_layout(7).size == FETCH_PARTITION_BYTES_MIN


def test_next_epoch_wraps_to_one_and_keeps_final() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_sessionless_and_disabled_requests_open_nothing() -> None:
    cache = FetchSessionCache(10, 1000)
    wants = [_want("t", 0)]
    context = cache.new_context(ALICE, 0, FINAL_EPOCH, wants, [], 0)
    assert context.kind == "sessionless"
    assert context.answer({("t", 0): _quiet()}, 0) == (Code.NONE, 0, [("t", 0)])
    assert len(cache) == 0
    disabled = FetchSessionCache(0, 1000)
    context = disabled.new_context(ALICE, 0, INITIAL_EPOCH, wants, [], 0)
    assert context.kind == "sessionless"
    assert context.answer({("t", 0): _quiet()}, 0)[1] == INVALID_SESSION_ID
    context = disabled.new_context(ALICE, 1234, 1, wants, [], 0)
    assert (context.kind, context.error_code) == ("session_error", Code.FETCH_SESSION_ID_NOT_FOUND)
    disabled.check()


def test_incremental_updates_add_change_and_forget() -> None:
    cache = FetchSessionCache(10, 1000)
    session_id = _open(cache, ALICE, [_want("t", 0), _want("t", 1), _want("u", 0)])
    assert session_id != INVALID_SESSION_ID
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1
    # Added u/1, moved t/0 on, forgot t/1.
    context = cache.new_context(ALICE, session_id, 1, [_want("u", 1), _want("t", 0, 5)],
                                [("t", 1)], 1)
    cache.check()
    assert context.kind == "incremental" and session.epoch == 2
    assert [(w.topic, w.partition, w.fetch_offset) for w in context.wants()] == [
        ("t", 0, 5), ("u", 0, 0), ("u", 1, 0)]
    assert cache.partitions_cached == 3
    # Nothing changed for t/0 and u/0; u/1 is new (its bounds were never answered).
    error, answered_id, answered = context.answer(
        {("t", 0): _quiet(), ("u", 0): _quiet(), ("u", 1): _quiet()}, 1)
    assert (error, answered_id, answered) == (Code.NONE, session_id, [("u", 1)])


def test_an_incremental_answer_names_only_partitions_with_news() -> None:
    cache = FetchSessionCache(10, 1000)
    keys = [("t", i) for i in range(6)]
    session_id = _open(cache, ALICE, [_want(*key) for key in keys])
    news = {
        ("t", 0): _quiet(),                                        # nothing new
        ("t", 1): PartitionAnswer(Code.NONE, 10, 10, 0, 100),      # records
        ("t", 2): _quiet(high_watermark=11),                       # high watermark (and LSO)
        ("t", 3): PartitionAnswer(Code.NONE, 10, 9, 0, 0),         # last stable offset
        ("t", 4): PartitionAnswer(Code.NONE, 10, 10, 3, 0),        # log start offset
        ("t", 5): PartitionAnswer(Code.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, 0),  # an error
    }
    context = cache.new_context(ALICE, session_id, 1, [], [], 1)
    assert context.answer(news, 1)[2] == keys[1:]
    cache.check()
    # The partition that carried records is read last next time (round-robin of max_bytes);
    # the error is said again, the rest have nothing new.
    context = cache.new_context(ALICE, session_id, 2, [], [], 2)
    assert [(w.topic, w.partition) for w in context.wants()] == [keys[0], *keys[2:], keys[1]]
    again = {key: news[key] if key != ("t", 1) else PartitionAnswer(Code.NONE, 10, 10, 0, 0)
             for key in keys}
    assert context.answer(again, 2)[2] == [("t", 5)]
    # After the error, the good answer's bounds are news again.
    context = cache.new_context(ALICE, session_id, 3, [], [], 3)
    assert context.answer({**again, ("t", 5): _quiet()}, 3)[2] == [("t", 5)]


def test_a_partition_both_named_and_forgotten_is_forgotten() -> None:
    """Kafka's FetchSession.update adds the request's partitions, then removes the forgotten."""
    cache = FetchSessionCache(10, 1000)
    session_id = _open(cache, ALICE, [_want("t", 0), _want("t", 1)])
    context = cache.new_context(ALICE, session_id, 1, [_want("t", 1, 9), _want("t", 2)],
                                [("t", 1), ("t", 2)], 1)
    assert [(w.topic, w.partition) for w in context.wants()] == [("t", 0)]
    cache.check()


def test_epochs_are_checked() -> None:
    cache = FetchSessionCache(10, 1000)
    session_id = _open(cache, ALICE, [_want("t", 0)])
    for epoch in (2, 7, 2**31 - 1):
        context = cache.new_context(ALICE, session_id, epoch, [], [], 1)
        assert (context.kind, context.error_code) == (
            "session_error", Code.INVALID_FETCH_SESSION_EPOCH)
        assert context.answer({}, 1) == (Code.INVALID_FETCH_SESSION_EPOCH, 0, [])
    assert cache.new_context(ALICE, session_id, 1, [], [], 1).kind == "incremental"
    # A retry of epoch 1 after the session moved on is refused, as Kafka does.
    assert cache.new_context(ALICE, session_id, 1, [], [], 1).error_code == (
        Code.INVALID_FETCH_SESSION_EPOCH)
    cache.check()


def test_a_session_moved_on_while_a_request_read_answers_invalid_epoch() -> None:
    cache = FetchSessionCache(10, 1000)
    session_id = _open(cache, ALICE, [_want("t", 0)])
    first = cache.new_context(ALICE, session_id, 1, [], [], 1)
    second = cache.new_context(ALICE, session_id, 2, [], [], 1)
    assert first.answer({("t", 0): _quiet()}, 1) == (
        Code.INVALID_FETCH_SESSION_EPOCH, session_id, [])
    assert second.answer({("t", 0): _quiet()}, 1) == (Code.NONE, session_id, [])
    # Closed meanwhile: the same.
    third = cache.new_context(ALICE, session_id, 3, [], [], 1)
    cache.new_context(ALICE, session_id, FINAL_EPOCH, [], [], 1)
    assert third.answer({("t", 0): _quiet()}, 1)[0] == Code.INVALID_FETCH_SESSION_EPOCH
    cache.check()


def test_closing_and_reopening() -> None:
    cache = FetchSessionCache(10, 1000)
    session_id = _open(cache, ALICE, [_want("t", 0)])
    # (id, -1): closed, served without a session.
    context = cache.new_context(ALICE, session_id, FINAL_EPOCH, [_want("t", 0)], [], 1)
    assert context.kind == "sessionless" and cache.get(session_id) is None
    session_id = _open(cache, ALICE, [_want("t", 0)])
    # (id, 0): closed, and a new session opened in its place.
    context = cache.new_context(ALICE, session_id, INITIAL_EPOCH, [_want("t", 1)], [], 2)
    new_id = context.answer({("t", 1): _quiet()}, 2)[1]
    assert cache.get(session_id) is None and new_id not in (0, session_id) and len(cache) == 1
    # Forgetting the last partition closes it.
    context = cache.new_context(ALICE, new_id, 1, [], [("t", 1)], 3)
    assert context.kind == "sessionless" and context.wants() == [] and len(cache) == 0
    cache.check()


def test_another_principal_cannot_use_or_close_a_session() -> None:
    cache = FetchSessionCache(10, 1000)
    session_id = _open(cache, ALICE, [_want("t", 0)])
    context = cache.new_context(BOB, session_id, 1, [_want("secret", 0)], [], 1)
    assert (context.kind, context.error_code) == ("session_error", Code.FETCH_SESSION_ID_NOT_FOUND)
    assert context.wants() == []
    # Bob's close of Alice's id is a plain sessionless fetch of his own; her session lives on.
    assert cache.new_context(BOB, session_id, FINAL_EPOCH, [], [], 1).kind == "sessionless"
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1 and session.principal == ALICE
    assert cache.new_context(ALICE, session_id, 1, [], [], 1).kind == "incremental"
    cache.check()


def test_session_ids_are_random_unique_and_never_zero() -> None:
    cache = FetchSessionCache(50, 1000, rng=random.Random(7))
    ids = {_open(cache, ALICE, [_want("t", i)]) for i in range(50)}
    assert len(ids) == 50 and INVALID_SESSION_ID not in ids
    # Not consecutive: another client's id is not the next one.
    assert sorted(ids) != list(range(min(ids), min(ids) + 50))


def test_a_full_cache_evicts_the_least_recently_used_stale_session() -> None:
    evicted = []
    cache = FetchSessionCache(2, 1000, eviction_ms=100, on_evict=lambda: evicted.append(1))
    first = _open(cache, ALICE, [_want("t", 0)], now_ms=0)
    second = _open(cache, ALICE, [_want("t", 1)], now_ms=10)
    cache.new_context(ALICE, first, 1, [], [], 50)          # first is now the fresher
    # Not stale yet, and not created long enough ago: no room, session id 0.
    assert _open(cache, BOB, [_want("t", i) for i in range(2, 7)], now_ms=60) == INVALID_SESSION_ID
    # Past the interval the least recently used (second) goes.
    third = _open(cache, BOB, [_want("t", 2)], now_ms=111)
    assert third != INVALID_SESSION_ID and cache.get(second) is None
    assert cache.get(first) is not None and evicted == [1] and cache.evictions == 1


def test_a_larger_session_displaces_the_smallest_old_one() -> None:
    cache = FetchSessionCache(2, 1000, eviction_ms=100)
    small = _open(cache, ALICE, [_want("t", 0)], now_ms=0)
    big = _open(cache, ALICE, [_want("t", i) for i in range(3)], now_ms=0)
    # Both used recently (none stale), both created more than 100 ms ago.
    cache.new_context(ALICE, small, 1, [], [], 150)
    cache.new_context(ALICE, big, 1, [], [], 150)
    # A new session of 2 partitions displaces the smallest old one (1 partition); Kafka
    # refuses only a new session smaller than the smallest.
    assert _open(cache, BOB, [_want("u", 0), _want("u", 1)], now_ms=160) != INVALID_SESSION_ID
    assert cache.get(small) is None and cache.get(big) is not None
    # Now the smallest old one is big (3); a new one of 2 cannot displace it, and the new
    # session of 2 is not old enough to be evicted.
    assert _open(cache, BOB, [_want("v", 0), _want("v", 1)], now_ms=170) == INVALID_SESSION_ID


def test_cached_partitions_are_bounded() -> None:
    cache = FetchSessionCache(10, 5)
    # A request larger than the bound opens nothing.
    assert _open(cache, ALICE, [_want("t", i) for i in range(6)]) == INVALID_SESSION_ID
    session_id = _open(cache, ALICE, [_want("t", i) for i in range(4)])
    # A second one that would take the total past the bound gets none either (not stale).
    assert _open(cache, BOB, [_want("u", 0), _want("u", 1)], now_ms=1) == INVALID_SESSION_ID
    # Growing the session past it closes the session: the client starts over, full.
    context = cache.new_context(ALICE, session_id, 1, [_want("t", 4), _want("t", 5)], [], 2)
    assert (context.kind, context.error_code) == ("session_error", Code.FETCH_SESSION_ID_NOT_FOUND)
    assert len(cache) == 0 and cache.partitions_cached == 0
    cache.check()


def test_random_operations_keep_the_invariants() -> None:
    """Random opens, incremental updates, closes and foreign principals against a plain
    model of each session's partitions."""
    rng = random.Random(2026)
    cache = FetchSessionCache(8, 40, eviction_ms=50, rng=random.Random(1))
    model: dict[int, tuple[str, int, OrderedDict[tuple[str, int], int]]] = {}
    principals = [ALICE, BOB]
    now = 0
    for _ in range(2000):
        now += rng.randrange(0, 20)
        action = rng.random()
        principal = rng.choice(principals)
        wants = [_want(rng.choice("ab"), rng.randrange(6), rng.randrange(100))
                 for _ in range(rng.randrange(0, 6))]
        if action < 0.3 or not model:
            evictions = cache.evictions
            context = cache.new_context(principal, 0, INITIAL_EPOCH, wants, [], now)
            answers = {(w.topic, w.partition): _quiet() for w in wants}
            error, session_id, _ = context.answer(answers, now)
            assert error == Code.NONE
            evicted = [i for i in model if cache.get(i) is None]
            assert len(evicted) == cache.evictions - evictions
            for session_id_evicted in evicted:
                del model[session_id_evicted]
            if session_id:
                model[session_id] = (principal, 1, OrderedDict(
                    ((w.topic, w.partition), w.fetch_offset) for w in wants))
        else:
            session_id = rng.choice(list(model))
            owner, epoch, partitions = model[session_id]
            if action < 0.4:
                cache.new_context(principal, session_id, FINAL_EPOCH, [], [], now)
                if principal == owner:
                    del model[session_id]
                continue
            forgotten = [(rng.choice("ab"), rng.randrange(6)) for _ in range(rng.randrange(3))]
            stale = rng.random() < 0.1
            context = cache.new_context(principal, session_id, epoch + stale, wants, forgotten,
                                        now)
            if principal != owner:
                assert context.error_code == Code.FETCH_SESSION_ID_NOT_FOUND
            elif stale:
                assert context.error_code == Code.INVALID_FETCH_SESSION_EPOCH
            else:
                for w in wants:
                    partitions[(w.topic, w.partition)] = w.fetch_offset
                for key in forgotten:
                    partitions.pop(key, None)
                if context.kind == "session_error":  # past the partition bound
                    assert context.error_code == Code.FETCH_SESSION_ID_NOT_FOUND
                    del model[session_id]
                elif not partitions:
                    assert context.kind == "sessionless"
                    del model[session_id]
                else:
                    assert context.kind == "incremental"
                    got = {(w.topic, w.partition): w.fetch_offset for w in context.wants()}
                    assert got == dict(partitions)
                    model[session_id] = (owner, epoch + 1, partitions)
                    context.answer({key: _quiet() for key in got}, now)
        cache.check()
        assert {s.id for s in cache} == set(model)


def test_kafka_pythons_session_handler_agrees() -> None:
    """kafka-python's FetchSessionHandler builds the requests (its FetchRequest classes) and
    checks the answers (its FetchResponse): a full open, then incremental requests naming only
    the moved partitions, each answer accepted as the session's."""
    handler = FetchSessionHandler(node_id=0)
    cache = FetchSessionCache(10, 1000)
    positions = OrderedDict((TopicPartition("t", i), 0) for i in range(20))

    def poll(records_at: set[int], now_ms: int) -> list[tuple[str, int]]:
        request = handler.build_next(OrderedDict(
            (tp, _FetchPartition(partition=tp.partition, current_leader_epoch=-1,
                                 fetch_offset=offset, last_fetched_epoch=-1,
                                 partition_max_bytes=1 << 20))
            for tp, offset in positions.items()))
        wants = [_want(t.topic, p.partition, p.fetch_offset)
                 for t in request.to_send for p in t.partitions]
        forgotten = [(f.topic, p) for f in request.to_forget for p in f.partitions]
        context = cache.new_context(ALICE, request.id, request.epoch, wants, forgotten, now_ms)
        answers = {(w.topic, w.partition): PartitionAnswer(
            Code.NONE, 100, 100, 0, 10 if w.partition in records_at else 0)
            for w in context.wants()}
        error, session_id, answered = context.answer(answers, now_ms)
        assert error == Code.NONE
        response = FetchResponse(
            throttle_time_ms=0, error_code=0, session_id=session_id, responses=[
                _Topic(topic=t, partitions=[_Partition(
                    partition_index=p, error_code=0, high_watermark=100, last_stable_offset=100,
                    log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
                    records=b"")]) for t, p in answered])
        response = FetchResponse.decode(response.encode(version=12), version=12)
        assert handler.handle_response(response)
        cache.check()
        return answered

    assert len(poll(set(), 0)) == 20                      # full: all of them
    assert handler.next_metadata.epoch == 1               # the session opened
    assert poll(set(), 1) == []                           # nothing new: nothing named
    assert poll({3, 7}, 2) == [("t", 3), ("t", 7)]
    positions[TopicPartition("t", 3)] = 10
    positions[TopicPartition("t", 7)] = 10
    assert poll(set(), 3) == []                           # only the two moved were sent
    session = cache.get(handler.next_metadata.session_id)
    assert session is not None and session.epoch == handler.next_metadata.epoch == 4
    assert session.partitions[("t", 3)].fetch_offset == 10
    del positions[TopicPartition("t", 0)]
    poll(set(), 4)
    assert ("t", 0) not in session.partitions and len(session.partitions) == 19


_FetchPartition = FetchRequest.FetchTopic.FetchPartition
_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
