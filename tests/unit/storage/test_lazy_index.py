"""LazyIndex: one index per file however many threads race to use it first; renames before and
after loading; close and delete of an index never loaded touch nothing else."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from stratalog.server.storage.errors import StorageIOError
from stratalog.server.storage.lazy_index import LazyIndex
from stratalog.server.storage.offset_index import OffsetIndex
from stratalog.server.storage.time_index import TimeIndex
from stratalog.server.storage.txn_index import AbortedTxn, TransactionIndex

BASE_OFFSET = 100
NAME = "00000000000000000100.index"


def lazy_offset_index(directory: Path, opened: list[Path] | None = None) -> LazyIndex[OffsetIndex]:
    def open_index(path: Path, base_offset: int, max_index_size_bytes: int) -> OffsetIndex:
        if opened is not None:
            opened.append(path)
            time.sleep(0.02)  # widen the window in which a second first use could slip in
        return OffsetIndex(path, base_offset, max_index_size_bytes)

    return LazyIndex(directory, NAME, open_index, (BASE_OFFSET, 4096))


def snapshot(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(directory.iterdir())
    }


def test_racing_first_uses_open_one_index(tmp_path: Path) -> None:
    opened: list[Path] = []
    lazy = lazy_offset_index(tmp_path, opened)
    barrier = threading.Barrier(8)
    got: list[OffsetIndex] = []

    def first_use() -> None:
        barrier.wait()
        got.append(lazy.get())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert opened == [tmp_path / NAME]  # one file opened, and mapped, once
    assert len(got) == 8 and all(index is got[0] for index in got)
    assert lazy.loaded is got[0] and lazy.is_loaded
    lazy.close()


def test_nothing_is_opened_or_created_before_the_first_use(tmp_path: Path) -> None:
    opened: list[Path] = []
    lazy = lazy_offset_index(tmp_path, opened)
    assert lazy.path == tmp_path / NAME
    assert not lazy.is_loaded and lazy.loaded is None
    assert opened == [] and list(tmp_path.iterdir()) == []
    index = lazy.get()
    assert (tmp_path / NAME).stat().st_size == 4096  # created and preallocated now
    assert lazy.get() is index and opened == [tmp_path / NAME]
    lazy.close()


def test_rename_before_loading_moves_the_file_and_the_next_use_opens_it_there(
    tmp_path: Path,
) -> None:
    index = OffsetIndex(tmp_path / NAME, BASE_OFFSET, 4096)
    index.append(105, 4096)
    index.close()
    lazy = lazy_offset_index(tmp_path)
    target = tmp_path / (NAME + ".deleted")
    lazy.rename_to(target)
    assert not lazy.is_loaded  # renaming does not load
    assert lazy.path == target and target.exists() and not (tmp_path / NAME).exists()
    assert lazy.get().path == target
    assert lazy.get().lookup(107) == (105, 4096)
    lazy.close()


def test_rename_of_a_file_never_created_is_not_an_error(tmp_path: Path) -> None:
    # Kafka LazyIndex.renameTo (docs/kafka-behaviours.md#index-files-mechanics): a segment's index
    # files may not exist; renaming the segment still works.
    lazy = lazy_offset_index(tmp_path)
    target = tmp_path / (NAME + ".deleted")
    lazy.rename_to(target)
    assert lazy.path == target and list(tmp_path.iterdir()) == []
    lazy.get()  # created under the new name
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    lazy.close()


def test_rename_after_loading_goes_through_the_index(tmp_path: Path) -> None:
    lazy = lazy_offset_index(tmp_path)
    index = lazy.get()
    index.append(105, 4096)
    target = tmp_path / (NAME + ".deleted")
    lazy.rename_to(target)
    assert index.path == target == lazy.path
    index.append(110, 8192)  # still mapped, under its new name
    lazy.close()
    reopened = OffsetIndex(target, BASE_OFFSET, 4096)
    assert reopened.entries_list() == [(105, 4096), (110, 8192)]
    reopened.close()


def test_a_failed_rename_raises_and_keeps_the_new_name(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(b"")
    lazy = lazy_offset_index(tmp_path)
    target = tmp_path / "missing-directory" / NAME
    with pytest.raises(StorageIOError, match="failed to rename index file"):
        lazy.rename_to(target)
    assert lazy.path == target  # as Kafka: a later delete acts on the name meant


@pytest.mark.parametrize("operation", ["close", "close_handler"])
def test_closing_an_index_never_loaded_touches_nothing(tmp_path: Path, operation: str) -> None:
    # An untrimmed preallocated file stays as it is: closing would trim a loaded index.
    (tmp_path / NAME).write_bytes(b"\x00" * 4096)
    os.utime(tmp_path / NAME, ns=(1_000_000_000, 1_000_000_000))
    before = snapshot(tmp_path)
    opened: list[Path] = []
    lazy = lazy_offset_index(tmp_path, opened)
    getattr(lazy, operation)()
    assert snapshot(tmp_path) == before and opened == [] and not lazy.is_loaded


def test_close_of_a_loaded_index_trims_it_and_close_handler_does_not(tmp_path: Path) -> None:
    lazy = lazy_offset_index(tmp_path)
    lazy.get().append(105, 4096)
    lazy.close_handler()
    assert (tmp_path / NAME).stat().st_size == 4096
    other = LazyIndex(tmp_path, "other.index", OffsetIndex, (BASE_OFFSET, 4096))
    other.get().append(105, 4096)
    other.close()
    assert (tmp_path / "other.index").stat().st_size == 8


def test_delete_of_an_index_never_loaded_deletes_the_file_without_opening_it(
    tmp_path: Path,
) -> None:
    (tmp_path / NAME).write_bytes(b"\x00" * 4096)
    (tmp_path / "neighbour").write_bytes(b"keep")
    opened: list[Path] = []
    lazy = lazy_offset_index(tmp_path, opened)
    assert lazy.delete_if_exists() is True
    assert opened == [] and not lazy.is_loaded
    assert [p.name for p in tmp_path.iterdir()] == ["neighbour"]
    assert lazy.delete_if_exists() is False  # gone: nothing to do, nothing created
    assert [p.name for p in tmp_path.iterdir()] == ["neighbour"]


def test_delete_of_a_loaded_index_closes_and_deletes_it(tmp_path: Path) -> None:
    lazy = lazy_offset_index(tmp_path)
    index = lazy.get()
    assert lazy.delete_if_exists() is True
    assert index.is_closed and list(tmp_path.iterdir()) == []


def test_the_same_helper_serves_the_time_and_transaction_indexes(tmp_path: Path) -> None:
    time_index = LazyIndex(tmp_path, "a.timeindex", TimeIndex, (BASE_OFFSET, 4096))
    txn_index = LazyIndex(tmp_path, "a.txnindex", TransactionIndex, (BASE_OFFSET,))
    time_index.get().maybe_append(1_700_000_000_000, 105)
    txn_index.get().append(AbortedTxn(1, 100, 105, 106))
    txn_index.close_handler()  # the transaction index has no handler to close: it is closed
    assert txn_index.get().all_aborted_txns() == [AbortedTxn(1, 100, 105, 106)]  # reopens
    for lazy in (time_index, txn_index):
        lazy.rename_to(tmp_path / (lazy.path.name + ".deleted"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.timeindex.deleted", "a.txnindex.deleted"
    ]
    assert time_index.delete_if_exists() and txn_index.delete_if_exists()
    assert list(tmp_path.iterdir()) == []


def test_a_shared_lock_is_used(tmp_path: Path) -> None:
    lock = threading.Lock()
    lazy = LazyIndex(tmp_path, NAME, OffsetIndex, (BASE_OFFSET, 4096), lock)
    with lock:  # a writer holding the segment's lock: a first use waits for it
        waiter = threading.Thread(target=lazy.get)
        waiter.start()
        waiter.join(0.1)
        assert waiter.is_alive() and not lazy.is_loaded
    waiter.join()
    assert lazy.is_loaded
    lazy.close()
