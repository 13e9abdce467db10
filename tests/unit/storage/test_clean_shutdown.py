"""The clean-shutdown marker: consumed at load start, written last, only existence matters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stratalog.server.storage.clean_shutdown import (
    CLEAN_SHUTDOWN_FILE,
    consume_marker,
    marker_exists,
    read_marker,
    write_marker,
)
from stratalog.server.storage.durable import tmp_path_for
from stratalog.server.storage.errors import StorageIOError


def test_file_name_is_kafkas() -> None:
    assert CLEAN_SHUTDOWN_FILE == ".kafka_cleanshutdown"


def test_write_marker_bytes_are_kafkas(tmp_path: Path) -> None:
    write_marker(tmp_path, 42)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":42}'
    assert not tmp_path_for(tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_default_broker_epoch_is_minus_one(tmp_path: Path) -> None:
    write_marker(tmp_path)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":-1}'
    assert read_marker(tmp_path) == -1


def test_long_range_epochs(tmp_path: Path) -> None:
    write_marker(tmp_path, 2**63 - 1)
    assert read_marker(tmp_path) == 2**63 - 1
    for bad in (2**63, -(2**63) - 1, True, 1.0, "1"):
        with pytest.raises(ValueError):
            write_marker(tmp_path, bad)  # type: ignore[arg-type]
    assert read_marker(tmp_path) == 2**63 - 1


def test_clean_cycle(tmp_path: Path) -> None:
    # Startup with no marker (first start, or after a crash): unclean.
    assert consume_marker(tmp_path) is False
    # Clean shutdown writes it; the next startup sees it and removes it at once.
    write_marker(tmp_path, 7)
    assert marker_exists(tmp_path)
    assert consume_marker(tmp_path) is True
    assert not marker_exists(tmp_path)
    # A crash during loading (no write_marker) makes the start after it unclean (KAFKA-10471).
    assert consume_marker(tmp_path) is False


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage", b"{", b"[1,2]", b'{"version":0}', b'{"brokerEpoch":"x"}', b"\xff\xfe",
     b"version: 0\nbrokerEpoch: 5"],
)
def test_any_content_counts_as_clean(tmp_path: Path, content: bytes) -> None:
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(content)
    assert read_marker(tmp_path) is None  # the epoch cannot be read...
    assert consume_marker(tmp_path) is True  # ...but the shutdown was clean
    assert not marker_exists(tmp_path)


def test_read_marker(tmp_path: Path) -> None:
    assert read_marker(tmp_path) is None
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text(json.dumps({"brokerEpoch": 9, "version": 0}))
    assert read_marker(tmp_path) == 9
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_text('{"version":0,"brokerEpoch":true}')
    assert read_marker(tmp_path) is None


def test_read_marker_does_not_consume(tmp_path: Path) -> None:
    write_marker(tmp_path, 1)
    assert read_marker(tmp_path) == 1
    assert marker_exists(tmp_path)


def test_write_over_a_stray_tmp(tmp_path: Path) -> None:
    # A crash while writing the marker leaves at most a .tmp: the marker itself is absent, so
    # the next start is unclean, and the .tmp is not mistaken for the marker.
    tmp_path_for(tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b'{"version":0,"bro')
    assert not marker_exists(tmp_path)
    assert consume_marker(tmp_path) is False
    write_marker(tmp_path, 3)
    assert read_marker(tmp_path) == 3


def test_consume_marker_that_cannot_be_deleted_is_an_error(tmp_path: Path) -> None:
    # A directory of that name cannot be unlinked: carrying on would risk treating a crash
    # during loading as a clean shutdown, so it must fail loudly.
    (tmp_path / CLEAN_SHUTDOWN_FILE).mkdir()
    with pytest.raises(StorageIOError) as info:
        consume_marker(tmp_path)
    assert str(tmp_path / CLEAN_SHUTDOWN_FILE) in str(info.value)


def test_write_marker_in_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StorageIOError):
        write_marker(tmp_path / "missing", 1)
