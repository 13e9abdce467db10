"""The transaction index (stratalog.server.storage.txn_index).

Ports the intent of Kafka's TransactionIndexTest, checks the entry bytes against
docs/kafka-behaviours.md#transaction-index and Kafka TransactionIndex.truncateTo
(docs/kafka-behaviours.md#truncation), TransactionIndex.sanityCheck
(docs/kafka-behaviours.md#sanity-checks) and TransactionIndex.collectAbortedTxns
(docs/kafka-behaviours.md#aborted-transactions), and runs random operations against a plain list
model.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stratalog.server.storage.errors import CorruptIndexError, InvalidOffsetError, StorageIOError
from stratalog.server.storage.txn_index import (
    ABORTED_TXN_SIZE_BYTES,
    AbortedTxn,
    TransactionIndex,
    TxnIndexSearchResult,
)

FOUR = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "00000000000000000000.txnindex"


@pytest.fixture
def index(path: Path):
    idx = TransactionIndex(path, 0)
    yield idx
    idx.close()


def append_all(idx: TransactionIndex, txns: list[AbortedTxn]) -> None:
    for txn in txns:
        idx.append(txn)


# --------------------------------------------------------------------------- Kafka's tests


def test_position_set_correctly_when_opened(path: Path, index: TransactionIndex) -> None:
    append_all(index, FOUR)
    index.close()
    reopened = TransactionIndex(path, 0)
    another = AbortedTxn(3, 50, 60, 55)
    reopened.append(another)
    assert reopened.all_aborted_txns() == [*FOUR, another]
    reopened.close()


def test_sanity_check(path: Path, index: TransactionIndex) -> None:
    append_all(index, FOUR)
    index.sanity_check()
    index.close()
    # Open with a larger base offset to fake entries that belong to an earlier segment.
    reopened = TransactionIndex(path, 100)
    with pytest.raises(CorruptIndexError, match=r"less than the start offset 100"):
        reopened.sanity_check()
    reopened.close()
    # lastOffset == base offset is fine.
    TransactionIndex(path, 10).sanity_check()


@pytest.mark.parametrize("last_offset", [15, 10])
def test_last_offset_must_increase(index: TransactionIndex, last_offset: int) -> None:
    index.append(AbortedTxn(1, 5, 15, 13))
    with pytest.raises(InvalidOffsetError, match=rf"{last_offset} is not above .* 15"):
        index.append(AbortedTxn(0, 0, last_offset, 11))
    assert index.all_aborted_txns() == [AbortedTxn(1, 5, 15, 13)]


def test_reopened_index_still_requires_increasing_last_offsets(
    path: Path, index: TransactionIndex
) -> None:
    # Deliberate difference from Kafka, which forgets the last offset when reopening.
    append_all(index, FOUR)
    index.close()
    reopened = TransactionIndex(path, 0)
    assert reopened.last_offset == 50
    with pytest.raises(InvalidOffsetError):
        reopened.append(AbortedTxn(9, 40, 45, 46))
    reopened.close()


def test_collect_aborted_transactions(index: TransactionIndex) -> None:
    append_all(index, FOUR)
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult(FOUR, False)
    assert index.collect_aborted_txns(0, 32) == TxnIndexSearchResult(FOUR[:3], True)
    assert index.collect_aborted_txns(0, 35) == TxnIndexSearchResult(FOUR, True)
    assert index.collect_aborted_txns(10, 35) == TxnIndexSearchResult(FOUR, True)
    assert index.collect_aborted_txns(11, 35) == TxnIndexSearchResult(FOUR[1:], True)
    assert index.collect_aborted_txns(20, 41) == TxnIndexSearchResult(FOUR[2:], False)
    aborted, complete = index.collect_aborted_txns(0, 100)  # unpacks like (list, is_complete)
    assert aborted == FOUR and complete is False


def test_truncate(index: TransactionIndex) -> None:
    txns = [
        AbortedTxn(0, 0, 10, 2),
        AbortedTxn(1, 5, 15, 16),
        AbortedTxn(2, 18, 35, 25),
        AbortedTxn(3, 32, 50, 40),
    ]
    append_all(index, txns)
    index.truncate_to(51)
    assert index.collect_aborted_txns(0, 100).aborted_txns == txns
    index.truncate_to(50)
    assert index.collect_aborted_txns(0, 100).aborted_txns == txns[:3]
    assert index.last_offset == 35
    index.append(AbortedTxn(4, 36, 40, 41))  # appends continue after the cut
    index.truncate_to(0)
    assert index.all_aborted_txns() == []
    assert index.last_offset is None
    index.append(AbortedTxn(5, 1, 2, 3))
    index.reset()
    assert index.collect_aborted_txns(0, 100).aborted_txns == []
    assert index.path.stat().st_size == 0


def test_aborted_txn_serde() -> None:
    # docs/kafka-behaviours.md#transaction-index: AbortedTxn(pid=983493, first=137, last=299,
    # lso=200).
    txn = AbortedTxn(983493, 137, 299, 200)
    data = txn.to_bytes()
    assert data == bytes.fromhex(
        "000000000000000f01c50000000000000089000000000000012b00000000000000c8"
    )
    assert len(data) == ABORTED_TXN_SIZE_BYTES == 34
    assert AbortedTxn.from_bytes(data) == txn
    assert (txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset) == (
        983493,
        137,
        299,
        200,
    )


def test_rename_index(tmp_path: Path, index: TransactionIndex) -> None:
    renamed = tmp_path / "renamed.txnindex"
    index.append(AbortedTxn(0, 0, 10, 2))
    index.rename_to(renamed)
    assert index.path == renamed
    index.append(AbortedTxn(1, 5, 15, 16))
    assert [t.first_offset for t in index.collect_aborted_txns(0, 100).aborted_txns] == [0, 5]
    assert renamed.stat().st_size == 2 * 34


def test_rename_of_a_never_created_index_is_not_an_error(tmp_path: Path, path: Path) -> None:
    idx = TransactionIndex(path, 0)
    target = tmp_path / "x.txnindex.deleted"
    idx.rename_to(target)
    assert idx.path == target
    assert not target.exists()


def test_update_parent_dir(tmp_path: Path, index: TransactionIndex) -> None:
    parent = tmp_path / "parent"
    parent.mkdir()
    index.update_parent_dir(parent)
    assert index.path.parent == parent
    assert index.path.name == "00000000000000000000.txnindex"


def test_flush(path: Path) -> None:
    idx = TransactionIndex(path, 0)
    idx.flush()
    assert not path.exists()
    idx.append(AbortedTxn(0, 0, 10, 2))
    idx.flush()
    assert path.stat().st_size == 34
    idx.close()


def test_delete_if_exists(path: Path, index: TransactionIndex) -> None:
    assert index.delete_if_exists() is False, "never created"
    index.append(AbortedTxn(0, 0, 10, 2))
    assert path.exists()
    assert index.delete_if_exists() is True
    assert not path.exists()
    assert index.is_empty


def test_is_empty(path: Path, index: TransactionIndex) -> None:
    assert index.is_empty
    path.touch()
    assert TransactionIndex(path, 0).is_empty, "an empty file"
    index.append(AbortedTxn(0, 0, 10, 2))
    assert not index.is_empty


def test_do_not_create_file_until_needed(path: Path) -> None:
    idx = TransactionIndex(path, 0)
    assert not path.exists()
    idx.reset()
    idx.truncate_to(0)
    idx.flush()
    idx.sanity_check()
    assert idx.all_aborted_txns() == []
    assert idx.collect_aborted_txns(0, 10) == TxnIndexSearchResult([], False)
    assert not path.exists()
    idx.append(AbortedTxn(0, 0, 10, 2))
    assert path.exists()
    idx.close()


def test_append_and_collect_after_close(index: TransactionIndex) -> None:
    index.close()
    index.append(AbortedTxn(0, 0, 10, 2))
    index.close()
    index.append(AbortedTxn(1, 5, 15, 16))
    index.close()
    assert [t.first_offset for t in index.collect_aborted_txns(0, 100).aborted_txns] == [0, 5]
    index.close()
    assert len(index.all_aborted_txns()) == 2


# ---------------------------------------------------------------- files and corruptions


def test_trailing_partial_entry_is_ignored_then_cut_before_an_append(path: Path) -> None:
    path.write_bytes(FOUR[0].to_bytes() + FOUR[1].to_bytes()[:20])
    idx = TransactionIndex(path, 0)
    assert idx.all_aborted_txns() == [FOUR[0]]
    assert idx.last_offset == 10
    idx.append(FOUR[1])
    assert path.read_bytes() == FOUR[0].to_bytes() + FOUR[1].to_bytes()
    assert idx.all_aborted_txns() == FOUR[:2]
    idx.close()


def test_version_above_zero_is_corrupt(path: Path) -> None:
    entry = bytearray(FOUR[0].to_bytes())
    entry[0] = 1
    path.write_bytes(FOUR[1].to_bytes() + bytes(entry))
    # Opening succeeds (as in Kafka, so that the segment can be opened and recovered) ...
    idx = TransactionIndex(path, 0)
    assert idx.last_offset is None
    # ... and the sanity check reports the entry, naming the file and the byte position.
    with pytest.raises(CorruptIndexError, match=r"version 1 at byte 34 .*" + re.escape(str(path))):
        idx.sanity_check()
    idx.reset()  # what recovery does first
    idx.append(FOUR[0])
    assert idx.all_aborted_txns() == [FOUR[0]]
    idx.close()
    path.write_bytes(bytes(entry) + FOUR[1].to_bytes())
    idx = TransactionIndex(path, 0)
    for call in (idx.all_aborted_txns, idx.sanity_check, lambda: idx.collect_aborted_txns(0, 9)):
        with pytest.raises(CorruptIndexError, match="version 1 at byte 0"):
            call()
    idx.close()


def test_version_low_byte_is_not_checked_like_kafka(path: Path) -> None:
    # Kafka reads the version as the first byte only: 0x0001 passes as version 0.
    entry = bytearray(FOUR[0].to_bytes())
    entry[1] = 1
    path.write_bytes(bytes(entry))
    assert TransactionIndex(path, 0).all_aborted_txns() == [FOUR[0]]


def test_from_bytes_rejects_a_short_buffer() -> None:
    with pytest.raises(CorruptIndexError, match="33 bytes"):
        AbortedTxn.from_bytes(bytes(33))


def test_field_outside_int64_is_rejected(index: TransactionIndex) -> None:
    with pytest.raises(ValueError, match="producer_id"):
        index.append(AbortedTxn(2**63, 0, 1, 2))
    assert index.is_empty


def test_write_failure_is_a_storage_io_error(tmp_path: Path) -> None:
    idx = TransactionIndex(tmp_path / "missing-dir" / "0.txnindex", 0)
    with pytest.raises(StorageIOError, match="missing-dir"):
        idx.append(FOUR[0])


def test_many_entries_are_read_across_chunks(path: Path, index: TransactionIndex) -> None:
    txns = [AbortedTxn(i, 3 * i, 3 * i + 1, 3 * i + 2) for i in range(10_000)]
    append_all(index, txns)
    assert path.stat().st_size == 10_000 * 34
    assert index.all_aborted_txns() == txns
    assert index.collect_aborted_txns(29_998, 30_001) == TxnIndexSearchResult(txns[9999:], False)
    index.truncate_to(15_000)
    assert index.entries == 5000


def test_concurrent_collects_see_only_whole_entries(index: TransactionIndex) -> None:
    txns = [AbortedTxn(i, 2 * i, 2 * i + 1, 2 * i + 1) for i in range(3000)]
    done = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not done.is_set():
                seen = index.all_aborted_txns()
                assert seen == txns[: len(seen)]
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers:
        thread.start()
    try:
        append_all(index, txns)
    finally:
        done.set()
        for thread in readers:
            thread.join()
    assert errors == []
    assert index.all_aborted_txns() == txns


# -------------------------------------------------------------------- model-based testing


@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 20), st.integers(0, 30)),
        max_size=30,
    ),
    st.integers(-5, 400),
    st.integers(-5, 400),
)
def test_collect_matches_its_definition(
    shape: list[tuple[int, int, int]], fetch_offset: int, upper_bound_offset: int
) -> None:
    directory = Path(tempfile.mkdtemp(prefix="txn-collect-"))
    try:
        idx = TransactionIndex(directory / "0.txnindex", 0)
        txns, last = [], 0
        for pid, step, lso_step in shape:
            last += step
            txn = AbortedTxn(pid, max(0, last - pid), last, last + lso_step)
            idx.append(txn)
            txns.append(txn)
        expected, complete = [], False
        for txn in txns:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                expected.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                complete = True
                break
        assert idx.collect_aborted_txns(fetch_offset, upper_bound_offset) == (expected, complete)
        idx.close()
    finally:
        shutil.rmtree(directory)


class TransactionIndexMachine(RuleBasedStateMachine):
    """Random appends, truncations, resets, closes and reopens against a list."""

    BASE = 100

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="txn-index-"))
        self.path = self.dir / "00000000000000000100.txnindex"
        self.index = TransactionIndex(self.path, self.BASE)
        self.model: list[AbortedTxn] = []

    def teardown(self) -> None:
        self.index.close()
        shutil.rmtree(self.dir)

    @rule(pid=st.integers(0, 5), step=st.integers(-3, 20), span=st.integers(0, 200))
    def append(self, pid: int, step: int, span: int) -> None:
        last = (self.model[-1].last_offset if self.model else self.BASE) + step
        txn = AbortedTxn(pid, last - span, last, last + 1)
        if self.model and last <= self.model[-1].last_offset:
            with pytest.raises(InvalidOffsetError):
                self.index.append(txn)
            return
        self.index.append(txn)
        self.model.append(txn)

    @rule(offset=st.integers(BASE - 5, BASE + 400))
    def truncate_to(self, offset: int) -> None:
        self.index.truncate_to(offset)
        cut = next((i for i, t in enumerate(self.model) if t.last_offset >= offset), None)
        if cut is not None:
            self.model = self.model[:cut]

    @rule()
    def reset(self) -> None:
        self.index.reset()
        self.model = []

    @rule()
    def close(self) -> None:
        self.index.close()

    @rule()
    def reopen(self) -> None:
        self.index.close()
        self.index = TransactionIndex(self.path, self.BASE)

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.index.all_aborted_txns() == self.model
        assert self.index.entries == len(self.model)
        assert self.index.last_offset == (self.model[-1].last_offset if self.model else None)
        if self.path.exists():
            assert self.path.read_bytes() == b"".join(t.to_bytes() for t in self.model)
        else:
            assert self.model == []
        if all(t.last_offset >= self.BASE for t in self.model):
            self.index.sanity_check()
        else:
            with pytest.raises(CorruptIndexError):
                self.index.sanity_check()


TransactionIndexMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_transaction_index_against_a_list = TransactionIndexMachine.TestCase
