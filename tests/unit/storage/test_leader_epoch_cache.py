"""LeaderEpochCache and leader-epoch-checkpoint: ports of Kafka's LeaderEpochFileCacheTest and
LeaderEpochCheckpointFile's format, plus a random-operation model test."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stratalog.records.leader_epoch_checkpoint import (
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
)
from stratalog.server.storage.checkpoints import LeaderEpochCheckpointFile
from stratalog.server.storage.errors import CorruptCheckpointError
from stratalog.server.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEntry,
    LeaderEpochCache,
)

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)


@pytest.fixture
def cache(checkpoint: LeaderEpochCheckpointFile) -> LeaderEpochCache:
    return LeaderEpochCache(checkpoint)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(*pair) for pair in pairs]


# ------------------------------------------------------------ LeaderEpochFileCacheTest


def test_previous_epoch(cache: LeaderEpochCache) -> None:
    assert cache.previous_epoch() is None
    cache.assign(2, 10)
    assert cache.previous_epoch() is None
    cache.assign(4, 15)
    assert cache.previous_epoch() == 2
    cache.assign(10, 20)
    assert cache.previous_epoch() == 4
    cache.truncate_from_end(18)
    assert cache.previous_epoch() == 2


def test_should_add_epoch_and_message_offset_to_cache(cache: LeaderEpochCache) -> None:
    cache.assign(2, 10)
    assert cache.latest_epoch == 2
    assert cache.entries == entries((2, 10))
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_should_return_log_end_offset_if_latest_epoch_requested(cache: LeaderEpochCache) -> None:
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_should_return_undefined_offset_if_undefined_epoch_requested(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == UNDEFINED


def test_should_not_overwrite_offset_for_a_leader_epoch_once_assigned(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(2, 9)
    assert not cache.assign(2, 10)
    assert cache.entries == entries((2, 9))
    assert cache.assign(2, 6)  # a lower offset for the same epoch does replace it
    assert cache.entries == entries((2, 6))


def test_should_enforce_monotonically_increasing_start_offsets(cache: LeaderEpochCache) -> None:
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.entries == entries((3, 9))


def test_should_return_unsupported_if_no_epoch_recorded(cache: LeaderEpochCache) -> None:
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED


def test_should_return_first_epoch_if_requested_epoch_less_than_first_epoch(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_should_truncate_if_matching_epoch_but_earlier_starting_offset(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(5, 11)
    cache.assign(6, 12)
    cache.assign(7, 13)
    cache.assign(7, 12)  # epoch 7 starts at an earlier offset
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)
    assert cache.entries == entries((5, 11), (7, 12))


def test_should_get_first_offset_of_subsequent_epoch_when_offset_requested_for_previous_epoch(
    cache: LeaderEpochCache,
) -> None:
    for epoch, offset in ((1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)):
        cache.assign(epoch, offset)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_should_return_next_available_epoch_if_there_is_no_exact_epoch_for_the_one_requested(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(0, 10)
    cache.assign(2, 13)
    cache.assign(4, 17)
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_should_return_invalid_offset_if_epoch_is_requested_which_is_not_tracked(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED


def test_should_support_epochs_that_do_not_start_from_zero(cache: LeaderEpochCache) -> None:
    cache.assign(2, 6)
    assert cache.end_offset_for(2, 7) == (2, 7)
    assert cache.entries == entries((2, 6))


def test_should_persist_epochs_between_instances(checkpoint: LeaderEpochCheckpointFile) -> None:
    LeaderEpochCache(checkpoint).assign(2, 6)
    again = LeaderEpochCache(checkpoint, LeaderEpochCheckpointFile(checkpoint.path).read())
    assert again.entries == entries((2, 6))
    assert checkpoint.path.read_bytes() == b"0\n1\n2 6\n"


def test_should_enforce_monotonically_increasing_epochs(cache: LeaderEpochCache) -> None:
    cache.assign(1, 5)
    cache.assign(2, 6)
    # An epoch in the past with a later offset: the later epochs are cut (the log diverged).
    cache.assign(1, 7)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED
    assert cache.entries == entries((1, 7))


def test_should_enforce_offsets_increase_monotonically(cache: LeaderEpochCache) -> None:
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.entries == entries((3, 5))


def test_should_increase_and_track_epochs_as_leaders_change_many_times(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    assert cache.end_offset_for(0, 5) == (0, 0)
    cache.assign(2, 5)
    assert cache.end_offset_for(2, 10) == (2, 10)
    assert cache.end_offset_for(1, 10) == (1, 5)
    assert cache.end_offset_for(0, 10) == (0, 0)


def test_should_increase_and_track_epochs_as_follower_receives_many_messages(
    cache: LeaderEpochCache,
) -> None:
    for offset in range(3):
        cache.assign(0, offset)
    assert cache.latest_epoch == 0
    assert cache.end_offset_for(0, 3) == (0, 3)
    for offset in range(3, 6):
        cache.assign(1, offset)
    assert cache.end_offset_for(1, 6) == (1, 6)
    for offset in range(6, 9):
        cache.assign(2, offset)
    assert cache.latest_epoch == 2
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


@pytest.fixture
def three(cache: LeaderEpochCache) -> LeaderEpochCache:
    cache.assign(2, 6)
    cache.assign(3, 8)
    cache.assign(4, 11)
    return cache


def test_should_drop_entries_on_epoch_boundary_when_removing_latest_entries(
    three: LeaderEpochCache,
) -> None:
    assert three.truncate_from_end(8)
    assert three.entries == entries((2, 6))


def test_should_drop_entries_between_epoch_boundary_when_removing_newest(
    three: LeaderEpochCache,
) -> None:
    three.truncate_from_end(9)
    assert three.latest_epoch == 3
    assert three.entries == entries((2, 6), (3, 8))


@pytest.mark.parametrize(("start", "expected"), [
    (8, [(3, 8), (4, 11)]),  # on an epoch boundary: (3, 8) kept
    (9, [(3, 9), (4, 11)]),  # between boundaries: epoch 3 now starts at 9
    (1, [(2, 6), (3, 8), (4, 11)]),  # before the first: nothing changes
    (6, [(2, 6), (3, 8), (4, 11)]),  # on the first: nothing changes
    (11, [(4, 11)]),
    (15, [(4, 15)]),  # beyond the last epoch's start: it starts there
    (UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
])
def test_truncate_from_start(three: LeaderEpochCache, start: int, expected: list) -> None:
    three.truncate_from_start(start)
    assert three.entries == entries(*expected)
    three.check()


def test_should_update_offset_between_epoch_boundaries_on_clear_earliest2(
    cache: LeaderEpochCache,
) -> None:
    cache.assign(0, 0)
    cache.assign(1, 7)
    cache.assign(2, 10)
    cache.truncate_from_start(5)
    assert cache.entries == entries((0, 5), (1, 7), (2, 10))


def test_should_clear_all_entries(three: LeaderEpochCache) -> None:
    three.clear_and_flush()
    assert three.entries == []
    assert three.checkpoint is not None and three.checkpoint.read() == []


def test_should_not_reset_epoch_history_tail_if_undefined_passed(three: LeaderEpochCache) -> None:
    assert not three.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert len(three) == 3


def test_empty_cache(cache: LeaderEpochCache) -> None:
    assert cache.latest_epoch is None
    assert cache.end_offset_for(7, 0) == UNDEFINED
    assert not cache.truncate_from_start(7)
    assert not cache.truncate_from_end(7)
    assert not cache.checkpoint.path.exists()  # nothing to write yet


def test_find_previous_epoch_and_entry(cache: LeaderEpochCache) -> None:
    assert cache.previous_epoch(2) is None and cache.previous_entry(2) is None
    cache.assign(2, 10)
    assert cache.previous_epoch(2) is None and cache.previous_entry(2) is None
    cache.assign(4, 15)
    assert cache.previous_epoch(4) == 2 and cache.previous_entry(4) == EpochEntry(2, 10)
    cache.assign(10, 20)
    assert cache.previous_epoch(10) == 4 and cache.previous_entry(10) == EpochEntry(4, 15)
    cache.truncate_from_end(18)
    assert cache.previous_epoch(cache.latest_epoch) == 2


def test_find_next_epoch(cache: LeaderEpochCache) -> None:
    cache.assign(0, 0)
    cache.assign(1, 100)
    cache.assign(2, 200)
    assert [cache.next_epoch(e) for e in (-1, 0, 1, 2, 100)] == [0, 1, 2, None, None]


def test_get_epoch_entry(cache: LeaderEpochCache) -> None:
    cache.assign(2, 100)
    cache.assign(3, 500)
    cache.assign(5, 1000)
    assert cache.epoch_entry(3) == EpochEntry(3, 500)
    assert cache.epoch_entry(4) is None


def test_should_fetch_epoch_for_given_offset(cache: LeaderEpochCache) -> None:
    cache.assign(0, 10)
    cache.assign(1, 20)
    cache.assign(5, 30)
    assert [cache.epoch_for_offset(o) for o in (25, 20, 30, 50, 5)] == [1, 1, 5, 5, None]


def test_should_write_checkpoint_on_truncation(
    three: LeaderEpochCache, checkpoint: LeaderEpochCheckpointFile
) -> None:
    three.truncate_from_end(11)
    three.truncate_from_start(8)
    assert checkpoint.read() == [(3, 8)]


def test_negative_entries_are_refused(cache: LeaderEpochCache) -> None:
    with pytest.raises(ValueError, match="invalid partition leader epoch entry"):
        cache.assign(-1, 0)
    with pytest.raises(ValueError, match="invalid partition leader epoch entry"):
        cache.assign(0, -5)
    assert cache.entries == []


def test_assign_all_writes_once_with_every_entry(
    cache: LeaderEpochCache, checkpoint: LeaderEpochCheckpointFile
) -> None:
    assert cache.assign_all([(1, 0), (1, 3), (3, 5), (4, 9)])
    assert checkpoint.read() == [(1, 0), (3, 5), (4, 9)]
    assert not cache.assign_all([(4, 12)])


# ------------------------------- the file format (records/leader_epoch_checkpoint.py)


def test_checkpoint_format_is_kafkas() -> None:
    assert format_leader_epoch_checkpoint([(0, 0), (3, 1200)]) == b"0\n2\n0 0\n3 1200\n"
    assert parse_leader_epoch_checkpoint(b"0\n2\n0 0\n3 1200\n") == [(0, 0), (3, 1200)]
    assert parse_leader_epoch_checkpoint(b"") == []
    assert parse_leader_epoch_checkpoint(b"0\n") == []
    assert parse_leader_epoch_checkpoint(b"0\r\n1\r\n5\t\t42\r\n") == [(5, 42)]
    assert format_leader_epoch_checkpoint([]) == b"0\n0\n"


@pytest.mark.parametrize(("data", "message"), [
    (b"1\n0\n", "Unrecognised version 1"),
    (b"0\n1\n1 2 3\n", "found 3 fields"),
    (b"0\n1\n7\n", "found 1 fields"),
    (b"0\n2\n1 2\n", r"Expected \[2\] entries, but found \[1\]"),
    (b"0\n1\nx 2\n", "not a decimal integer"),
    (b"0\n1\n2147483648 0\n", "outside"),  # an epoch is a Java int
    (b"0\n1\n1 9223372036854775808\n", "outside"),
    (b"\xff", "not UTF-8"),
])
def test_corrupt_checkpoints_name_file_and_line(
    checkpoint: LeaderEpochCheckpointFile, data: bytes, message: str
) -> None:
    checkpoint.path.write_bytes(data)
    with pytest.raises(CorruptCheckpointError, match=message) as info:
        checkpoint.read()
    assert str(checkpoint.path) in str(info.value)


def test_checkpoint_write_is_atomic_and_leaves_no_tmp(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.write([(1, 2)])
    checkpoint.write([(1, 2), (3, 4)])
    assert checkpoint.read() == [(1, 2), (3, 4)]
    assert sorted(p.name for p in checkpoint.path.parent.iterdir()) == [checkpoint.path.name]


def test_out_of_range_values_are_not_written(checkpoint: LeaderEpochCheckpointFile) -> None:
    with pytest.raises(ValueError, match="Java int"):
        checkpoint.write([(2**31, 0)])
    assert not checkpoint.path.exists()


# ------------------------------------------------------------ random operations vs a model


def _model_assign(model: list[tuple[int, int]], epoch: int, offset: int) -> None:
    if model and model[-1][0] == epoch and offset >= model[-1][1]:
        return
    while model and (model[-1][0] >= epoch or model[-1][1] >= offset):
        model.pop()
    model.append((epoch, offset))


def test_random_operations_match_a_plain_model(tmp_path: Path) -> None:
    rng = random.Random(17)
    for round_number in range(8):
        checkpoint = LeaderEpochCheckpointFile(tmp_path / f"round-{round_number}")
        cache = LeaderEpochCache(checkpoint)
        model: list[tuple[int, int]] = []
        for _ in range(120):
            op = rng.random()
            if op < 0.6:
                epoch, offset = rng.randrange(12), rng.randrange(60)
                cache.assign(epoch, offset)
                _model_assign(model, epoch, offset)
            elif op < 0.8:
                end = rng.randrange(-1, 60)
                cache.truncate_from_end(end)
                if end >= 0:
                    model = [(e, o) for e, o in model if o < end]
            else:
                start = rng.randrange(-1, 60)
                cache.truncate_from_start(start)
                if start >= 0:
                    below = [(e, o) for e, o in model if o <= start]
                    if below:
                        model = [(below[-1][0], start)] + [(e, o) for e, o in model if o > start]
            cache.check()
            assert [tuple(e) for e in cache.entries] == model
            # The file holds what memory holds, whenever the file exists.
            if checkpoint.path.exists():
                assert checkpoint.read() == model
            requested = rng.randrange(-1, 13)
            expected = _model_end_offset_for(model, requested, 100)
            assert cache.end_offset_for(requested, 100) == expected


def _model_end_offset_for(
    model: list[tuple[int, int]], requested: int, log_end_offset: int
) -> tuple[int, int]:
    if requested == UNDEFINED_EPOCH or not model:
        return UNDEFINED
    if requested == model[-1][0]:
        return requested, log_end_offset
    higher = [(e, o) for e, o in model if e > requested]
    if not higher:
        return UNDEFINED
    lower = [(e, o) for e, o in model if e <= requested]
    if not lower:
        return requested, higher[0][1]
    return lower[-1][0], higher[0][1]
