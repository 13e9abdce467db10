"""The descriptor budget (descriptor_budget.py), the LogManager's checks with it, and the
rollback of a CreateTopic that failed half-way.

The defect of issue 13 is reproduced in a child process with a low RLIMIT_NOFILE whose manager is
told a far higher limit (so that the budget does not stop it): the creation runs out of
descriptors, and the rollback must still remove the topic completely.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratalog.server.storage.descriptor_budget import (
    DESCRIPTORS_PER_PARTITION,
    DescriptorBudget,
    raise_open_files_limit,
    read_open_files_limit,
)
from stratalog.server.storage.errors import (
    InsufficientSpaceError,
    ResourceLimitExceededError,
    StorageIOError,
    TooManyOpenFilesError,
)
from stratalog.server.storage.log_manager import LogManager
from stratalog.server.storage.space import free_bytes
from stratalog.server.storage.topic_catalog import read_catalog


def test_the_budget_leaves_the_cache_what_partitions_do_not_take() -> None:
    budget = DescriptorBudget(limit=2048, reserved=512, open_segments_max=100)
    assert budget.partitions_max == (2048 - 512) // DESCRIPTORS_PER_PARTITION == 256
    assert budget.open_segments_capacity(0) == 100
    assert budget.open_segments_capacity(200) == (2048 - 512 - 1200) // 6 == 56
    assert budget.open_segments_capacity(256) == 0
    assert budget.open_segments_capacity(1000) == 0
    budget.check_new_partitions("t", 200, 56)
    with pytest.raises(ResourceLimitExceededError) as refused:
        budget.check_new_partitions("t", 200, 57)
    assert refused.value.limit == "RLIMIT_NOFILE"
    assert "342 file descriptors" in str(refused.value)
    assert "336 are left" in str(refused.value) and "56 more partitions fit" in str(refused.value)


def test_the_start_is_refused_with_the_counts() -> None:
    budget = DescriptorBudget(limit=1024, reserved=512, open_segments_max=1000)
    budget.check_startup(85)
    with pytest.raises(TooManyOpenFilesError) as refused:
        budget.check_startup(200, 3000)
    message = str(refused.value)
    assert message.startswith("Too many open files: 1,712 descriptors needed for 200 "
                              "partitions of 3,000 segments")
    assert "RLIMIT_NOFILE is 1,024: raise it with ulimit -n" in message


def test_connections_come_out_of_the_limit_before_the_storage_share() -> None:
    # A server's connection caps (issue 24): 1,024 gRPC + 32 metrics connections.
    budget = DescriptorBudget(limit=2048, reserved=512, open_segments_max=100, connections=1056)
    assert budget.storage_limit == 2048 - 1056 - 512 == 480
    assert budget.partitions_max == 480 // DESCRIPTORS_PER_PARTITION == 80
    assert budget.open_segments_capacity(70) == (480 - 420) // 6 == 10
    budget.check_new_partitions("t", 0, 80)
    with pytest.raises(ResourceLimitExceededError) as refused:
        budget.check_new_partitions("t", 0, 81)
    assert "1,056 for connections: max_connections + metrics_connections_max" in str(
        refused.value)
    assert "80 more partitions fit" in str(refused.value)
    with pytest.raises(TooManyOpenFilesError) as failed:
        budget.check_startup(81)
    message = str(failed.value)
    assert message.startswith("Too many open files: 2,054 descriptors needed for 81 partitions")
    assert "1,056 for connections" in message
    assert "max_connections, metrics_connections_max or kafka_connections_max" in message
    # Connections alone beyond the limit: not even an empty server fits.
    with pytest.raises(TooManyOpenFilesError):
        DescriptorBudget(limit=1024, reserved=512, connections=1056).check_startup(0)


def test_the_soft_limit_is_raised_to_the_hard_limit() -> None:
    code = textwrap.dedent("""
        import resource
        from stratalog.server.storage.descriptor_budget import raise_open_files_limit
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, min(hard, 4096)))
        print(*raise_open_files_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    before, after, soft, hard = map(int, out)
    assert before == 256 and after == soft == hard
    # And in this process it changes nothing once done (the soft limit is the hard one).
    raise_open_files_limit()
    assert raise_open_files_limit()[0] == read_open_files_limit()[0]


def test_create_topic_beyond_the_budget_writes_nothing(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    manager = LogManager.open(dirs, open_files_limit=1024,
                              defaults={"log.open.segments.max": "50"})
    assert manager.open_segments.capacity == 50
    manager.create_topic("fits", 80)
    assert manager.open_segments.capacity == (1024 - 512 - 480) // 6 == 5
    with pytest.raises(ResourceLimitExceededError, match="cannot create topic big with 10 "):
        manager.create_topic("big", 10)
    assert [t.name for t in manager.list_topics()] == ["fits"]
    assert "big" not in read_catalog(dirs).topics
    assert not [p for d in dirs for p in d.iterdir() if p.name.startswith("big-")]
    manager.delete_topic("fits")
    assert manager.open_segments.capacity == 50
    manager.close()
    # A restart whose partitions do not fit is refused before loading anything.
    manager = LogManager.open(dirs, open_files_limit=100000)
    manager.create_topic("wide", 100)
    manager.close()
    with pytest.raises(TooManyOpenFilesError, match="1,112 descriptors needed for 100 "):
        LogManager.open(dirs, open_files_limit=1024)
    LogManager.open(dirs, open_files_limit=100000).close()  # nothing was harmed


def test_a_failed_creation_is_removed_from_the_catalogue_and_every_directory(
    tmp_path: Path,
) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    manager = LogManager.open(dirs)
    # Partition 2 goes to d0, where a file stands in the way of its directory.
    (dirs[0] / "t-2").write_bytes(b"not a partition")
    with pytest.raises(StorageIOError):
        manager.create_topic("t", 6)
    assert manager.list_topics() == []
    assert "t" not in read_catalog(dirs).topics
    live = [p.name for d in dirs for p in d.iterdir() if p.is_dir() and not p.name.endswith("-delete")]
    assert live == []
    assert (dirs[0] / "t-2").read_bytes() == b"not a partition"  # not ours: left alone
    (dirs[0] / "t-2").unlink()
    manager.create_topic("t", 6)  # the name is free again
    manager.close()
    manager = LogManager.open(dirs)
    assert [(t.name, len(t.partitions)) for t in manager.list_topics()] == [("t", 6)]
    manager.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="Linux's /proc only")
def test_a_creation_that_runs_out_of_descriptors_is_rolled_back_completely(
    tmp_path: Path,
) -> None:
    # The defect: the budget told a far higher limit than the process has, as before
    # it existed. The creation fails with EMFILE; the rollback, which closes what the creation
    # opened first, completes; the manager serves on and restarts.
    code = textwrap.dedent(f"""
        import resource
        from stratalog.server.storage.errors import StorageError
        from stratalog.server.storage.log_manager import LogManager
        from stratalog.server.storage.topic_catalog import read_catalog
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400))
        dirs = [{str(tmp_path / "d0")!r}]
        manager = LogManager.open(dirs, open_files_limit=1_000_000)
        try:
            manager.create_topic("huge", 1000)
        except StorageError as exc:
            assert "Too many open files" in str(exc), exc
        else:
            raise AssertionError("the creation did not fail")
        assert manager.list_topics() == []
        assert "huge" not in read_catalog(dirs).topics
        manager.create_topic("small", 5)
        manager.close()
        manager = LogManager.open(dirs, open_files_limit=1_000_000)
        assert [t.name for t in manager.list_topics()] == ["small"]
        manager.close()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
    directory = tmp_path / "d0"
    assert not [p for p in directory.iterdir() if p.name.startswith("huge-") and p.is_dir()
                and not p.name.endswith("-delete")]


def test_preallocated_segments_that_the_disk_cannot_hold_are_refused(tmp_path: Path) -> None:
    manager = LogManager.open([tmp_path / "d0"])
    segment_bytes = 2**31 - 1
    partitions = free_bytes(tmp_path) // segment_bytes + 1
    with pytest.raises(InsufficientSpaceError) as refused:
        manager.create_topic("prealloc", partitions,
                             {"preallocate": "true", "segment.bytes": str(segment_bytes)})
    assert refused.value.need_bytes == partitions * segment_bytes
    assert refused.value.free_bytes < refused.value.need_bytes
    assert str(tmp_path) not in str(refused.value)
    assert manager.list_topics() == []
    assert not [p for p in (tmp_path / "d0").iterdir() if p.name.startswith("prealloc-")]
    # What fits is preallocated as before.
    manager.create_topic("small", 1, {"preallocate": "true", "segment.bytes": "1048576"})
    segment = tmp_path / "d0" / "small-0" / "00000000000000000000.log"
    assert segment.stat().st_size == 1048576
    manager.close()
