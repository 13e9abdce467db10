"""An I/O error on a write path takes the log directory offline (Kafka's LogDirFailureChannel).

Failures are injected at the system calls (``os.fsync``, ``os.pwrite``/``os.pwritev`` replaced in
this process for the duration of a test), never in our own code: the storage's reaction is what
is tested. What must hold after each failure: the records of the failed call are never readable
(the log end did not move past them), the log and every log of its directory refuse reads and
writes with LogDirOfflineError naming the topic-partition, the other directories serve, and the
next open recovers the directory as after a crash.
"""

from __future__ import annotations

import ctypes
import errno
import os
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.rpc.status import to_rpc_status
from stratalog.server.storage.clean_shutdown import marker_exists
from stratalog.server.storage.errors import LogDirOfflineError, StorageIOError
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.partition_log import PartitionLog

T0 = 1_700_000_000_000


def one_record(index: int) -> bytes:
    return build_batch([(T0 + index, None, b"v%d" % index, ())])


def values(log: PartitionLog) -> list[bytes | None]:
    found: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        fetched = log.fetch(offset, 1 << 20)
        found.extend(
            r.value for _, records in iter_batches(fetched.data) for r in records
            if r.offset >= offset
        )
        offset = fetched.next_offset
    return found


class FailingCall:
    """Stands in for a system call (``os.fsync``, ``os.pwritev`` ...): fails with ``code`` for
    descriptors whose path ends in ``suffix`` while ``armed``, else calls the real one."""

    def __init__(self, real, suffix: str, code: int = errno.EIO) -> None:
        self.real, self.suffix, self.code = real, suffix, code
        self.armed = True
        self.failures = 0

    def __call__(self, fd: int, *args):
        if self.armed and os.readlink(f"/proc/self/fd/{fd}").endswith(self.suffix):
            self.failures += 1
            raise OSError(self.code, os.strerror(self.code))
        return self.real(fd, *args)


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux's /proc only")


@pytest.mark.parametrize("how", ["flush.messages", "append(flush=True)"])
def test_a_failed_fsync_publishes_nothing_and_takes_the_log_offline(
    tmp_path: Path, monkeypatch, how: str
) -> None:
    config = {"flush.messages": "1"} if how == "flush.messages" else {}
    log = PartitionLog.open(tmp_path / "t-3", config)
    log.append(one_record(0), flush=True)
    failing = FailingCall(os.fsync, ".log")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(StorageIOError, match="fsync"):
        log.append(one_record(1), flush=how != "flush.messages")
    assert failing.failures == 1
    assert log.is_offline and log.log_end_offset == 1  # the record was never published
    with pytest.raises(LogDirOfflineError, match="partition t-3 is unavailable"):
        log.fetch(1, 100)
    with pytest.raises(LogDirOfflineError):
        log.fetch(0, 100)  # nothing is served from an offline log
    with pytest.raises(LogDirOfflineError):
        log.append(one_record(2))
    with pytest.raises(LogDirOfflineError):
        log.offset_for_timestamp(T0)
    monkeypatch.undo()
    log.close_for_deletion()
    # The next open decides: here the page cache still holds the record, and recovery keeps
    # it (a power loss could have taken it: then the log would end at 1).
    log = PartitionLog.open(tmp_path / "t-3", config)
    assert values(log) == [b"v0", b"v1"]
    log.append(one_record(2))
    assert values(log) == [b"v0", b"v1", b"v2"]
    log.close()


def test_a_failed_write_publishes_nothing_and_takes_the_log_offline(
    tmp_path: Path, monkeypatch
) -> None:
    log = PartitionLog.open(tmp_path / "t-0")
    log.append(one_record(0))
    for call in ("pwrite", "pwritev"):
        monkeypatch.setattr(os, call, FailingCall(getattr(os, call), ".log", errno.ENOSPC))
    with pytest.raises(StorageIOError) as failed:
        log.append(one_record(1))
    assert "STORAGE_FULL" in str(to_rpc_status(failed.value).details[0].value)
    assert log.is_offline and log.log_end_offset == 1
    monkeypatch.undo()
    with pytest.raises(LogDirOfflineError):
        log.append(one_record(1))
    log.close_for_deletion()
    log = PartitionLog.open(tmp_path / "t-0")
    assert values(log) == [b"v0"]  # the failed write was cut back: offset 1 is free again
    log.close()


def test_a_failed_roll_takes_the_log_offline(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", {"segment.bytes": "100"})
    log.append(one_record(0))
    # The next segment's .log cannot be made: a directory stands in the way.
    (tmp_path / "t-0" / "00000000000000000001.log").mkdir()
    with pytest.raises(StorageIOError):
        log.append(one_record(1))
    assert log.is_offline and log.log_end_offset == 1
    log.close_for_deletion()
    (tmp_path / "t-0" / "00000000000000000001.log").rmdir()
    log = PartitionLog.open(tmp_path / "t-0", {"segment.bytes": "100"})
    log.append(one_record(1))
    assert values(log) == [b"v0", b"v1"]
    log.close()


def test_the_directory_goes_offline_and_the_others_serve(tmp_path: Path, monkeypatch) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    manager = LogManager.open(dirs)
    manager.create_topic("a", 2)  # a-0 in d0, a-1 in d1
    manager.create_topic("b", 2)  # b-0 in d0, b-1 in d1
    assert manager.log_dir_of("a", 0) == dirs[0].resolve()
    for topic in ("a", "b"):
        for partition in range(2):
            manager.get_log(topic, partition).append(one_record(0))
    failing = FailingCall(os.fsync, "a-0/00000000000000000000.log")
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(StorageIOError):
        manager.get_log("a", 0).flush()
    monkeypatch.undo()
    assert manager.offline_log_dirs == [dirs[0].resolve()]
    for topic in ("a", "b"):
        with pytest.raises(LogDirOfflineError) as offline:
            manager.get_log(topic, 0).fetch(0, 100)
        status = to_rpc_status(offline.value)
        assert status.message == str(offline.value)
        assert f"partition {topic}-0 is unavailable: its log directory is offline" in (
            status.message
        )
        assert str(tmp_path) not in status.message
        assert values(manager.get_log(topic, 1)) == [b"v0"]  # d1 serves
        manager.get_log(topic, 1).append(one_record(1))
    # New partitions go to the online directory; the catalogue is written there.
    manager.create_topic("c", 2)
    assert {manager.log_dir_of("c", p) for p in range(2)} == {dirs[1].resolve()}
    report = manager.run_maintenance()
    assert not report.errors
    manager.close()  # the offline directory gets no marker: the next start recovers it
    assert not marker_exists(dirs[0]) and marker_exists(dirs[1])
    manager = LogManager.open(dirs)
    assert manager.offline_log_dirs == []
    assert [t.name for t in manager.list_topics()] == ["a", "b", "c"]
    for topic in ("a", "b"):
        assert values(manager.get_log(topic, 0)) == [b"v0"]
        assert values(manager.get_log(topic, 1)) == [b"v0", b"v1"]
    manager.close()


def test_an_index_that_cannot_get_its_blocks_fails_the_append_not_the_process(
    tmp_path: Path, monkeypatch
) -> None:
    # A full disk under a sparse, mapped index would be SIGBUS at the map write; the blocks
    # are reserved with fallocate first, which says ENOSPC instead.
    from stratalog.server.storage import space

    if space._fallocate is None:
        pytest.skip("no fallocate here")
    real = space._fallocate

    def fallocate_on_a_full_disk(fd: int, mode: int, offset: int, length: int) -> int:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".index"):
            ctypes.set_errno(errno.ENOSPC)
            return -1
        return real(fd, mode, offset, length)

    log = PartitionLog.open(tmp_path / "t-0", {"index.interval.bytes": "0"})
    log.append(one_record(0))  # the first append gets no index entry
    monkeypatch.setattr(space, "_fallocate", fallocate_on_a_full_disk)
    with pytest.raises(StorageIOError, match="reserve") as failed:
        log.append(one_record(1))  # its entry is the index's first
    assert "STORAGE_FULL" in str(to_rpc_status(failed.value).details[0].value)
    assert log.is_offline and log.log_end_offset == 1
    monkeypatch.undo()
    log.close_for_deletion()
    log = PartitionLog.open(tmp_path / "t-0", {"index.interval.bytes": "0"})
    assert values(log)[0] == b"v0"
    log.close()
