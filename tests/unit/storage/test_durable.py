"""atomic_write and fsync_directory: old-or-new content, stray .tmp files, clear errors."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stratalog.server.storage.durable import (
    TMP_FILE_SUFFIX,
    atomic_write,
    fsync_directory,
    tmp_path_for,
)
from stratalog.server.storage.errors import StorageIOError


def test_creates_a_new_file_with_exactly_the_bytes(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint"
    atomic_write(target, b"0\n0\n")
    assert target.read_bytes() == b"0\n0\n"
    assert not tmp_path_for(target).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_replaces_existing_content_whole(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"a much longer old content than the new one")
    atomic_write(target, b"new")
    assert target.read_bytes() == b"new"


def test_empty_content(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    atomic_write(target, b"")
    assert target.read_bytes() == b""


def test_large_content_is_written_completely(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    target = tmp_path / "big"
    atomic_write(target, data)
    assert target.read_bytes() == data


def test_accepts_bytearray_and_memoryview(tmp_path: Path) -> None:
    atomic_write(tmp_path / "a", bytearray(b"xyz"))
    atomic_write(tmp_path / "b", memoryview(b"0123456789")[2:5])
    assert (tmp_path / "a").read_bytes() == b"xyz"
    assert (tmp_path / "b").read_bytes() == b"234"


def test_tmp_path_is_beside_the_target() -> None:
    assert tmp_path_for(Path("/d/recovery-point-offset-checkpoint")) == Path(
        "/d/recovery-point-offset-checkpoint.tmp"
    )
    assert TMP_FILE_SUFFIX == ".tmp"


def test_crash_before_rename_leaves_old_content_and_next_write_overwrites_stray_tmp(
    tmp_path: Path,
) -> None:
    # A crash between writing the .tmp and the rename leaves exactly this state on disk: the
    # old file intact and a (possibly partial, possibly longer) .tmp beside it.
    target = tmp_path / "checkpoint"
    atomic_write(target, b"old complete content\n")
    stray = tmp_path_for(target)
    stray.write_bytes(b"torn new content that is longer than what comes next, and garbage\x00\xff")
    # Readers of the target see the old content, untouched by the stray temporary file.
    assert target.read_bytes() == b"old complete content\n"
    atomic_write(target, b"new\n")
    # O_TRUNC: nothing of the stray file's longer content survives.
    assert target.read_bytes() == b"new\n"
    assert not stray.exists()


def test_stray_tmp_without_target(tmp_path: Path) -> None:
    target = tmp_path / "meta.properties"
    tmp_path_for(target).write_bytes(b"half written")
    assert not target.exists()
    atomic_write(target, b"whole")
    assert target.read_bytes() == b"whole"
    assert not tmp_path_for(target).exists()


def test_killed_writer_leaves_old_or_new_never_torn(tmp_path: Path) -> None:
    # A child rewrites the file in a loop, alternating two contents of different lengths, and is
    # killed with SIGKILL at some point; whatever moment that was, the file holds one of the two
    # complete contents. (This samples crash points; the step-by-step states are tested above.)
    target = tmp_path / "f"
    old = b"A" * 10_000
    new = b"B" * 30_000
    atomic_write(target, old)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from stratalog.server.storage.durable import atomic_write
        target = Path({str(target)!r})
        contents = [{old!r}, {new!r}]
        sys.stdout.write("ready\\n"); sys.stdout.flush()
        i = 0
        while True:
            atomic_write(target, contents[i % 2], fsync=False)
            i += 1
        """
    )
    for _ in range(5):
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        # Let it run a random while, so that the kill lands at different steps of a write.
        time.sleep(random.uniform(0.0, 0.05))
        child.kill()
        child.wait()
        child.stdout.close()
        assert target.read_bytes() in (old, new)


def test_missing_parent_directory_is_a_storage_io_error_naming_the_path(tmp_path: Path) -> None:
    target = tmp_path / "no-such-dir" / "checkpoint"
    with pytest.raises(StorageIOError) as info:
        atomic_write(target, b"12345")
    message = str(info.value)
    assert str(target) in message
    assert "5 bytes" in message
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_directory_in_the_way_keeps_it_and_removes_tmp(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "inside").write_bytes(b"keep")
    with pytest.raises(StorageIOError) as info:
        atomic_write(target, b"data")
    assert str(target) in str(info.value)
    # The failed rename neither destroyed what was there nor left the temporary file behind.
    assert (target / "inside").read_bytes() == b"keep"
    assert not tmp_path_for(target).exists()


def test_fsync_directory_works_on_a_directory(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"1")
    fsync_directory(tmp_path)  # must not raise


def test_fsync_directory_on_missing_or_non_directory_is_a_storage_io_error(
    tmp_path: Path,
) -> None:
    with pytest.raises(StorageIOError) as info:
        fsync_directory(tmp_path / "missing")
    assert str(tmp_path / "missing") in str(info.value)
    regular = tmp_path / "regular"
    regular.write_bytes(b"")
    with pytest.raises(StorageIOError):
        fsync_directory(regular)
