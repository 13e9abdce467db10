"""`stratalog serve` refusing to start: a mistyped setting, a busy port (issue 15, item 10).

Both are the user's to fix, so both are one line of ours, and neither leaves a data directory
behind: the checks run before anything touches the disk.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "stratalog.cli"]


def serve(data: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*CLI, "serve", "--log-dirs", str(data), "--metrics-port", "-1", *args],
                          capture_output=True, timeout=120)


def test_a_mistyped_setting_is_a_usage_error_with_the_closest_name(tmp_path: Path) -> None:
    # It was exit 1, "cannot open the log directories" and a list of 60 names.
    result = serve(tmp_path / "data", "--set", "log.segmnt.bytes=5")
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == [
        "stratalog serve: unknown setting 'log.segmnt.bytes' (did you mean "
        "'log.segment.bytes'?) from --set; every setting is listed by `stratalog serve --help` "
        "and in docs/configuration.md"]
    assert not (tmp_path / "data").exists()


def test_a_bad_storage_value_is_a_usage_error_before_the_disk(tmp_path: Path) -> None:
    result = serve(tmp_path / "data", "--set", "log.segment.bytes=5")
    assert result.returncode == 2
    assert "segment.bytes" in result.stderr.decode()
    assert not (tmp_path / "data").exists()


def test_a_port_in_use_is_one_line_of_ours_and_no_data_directory(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(tmp_path / "data", "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    err = result.stderr.decode()
    errors = [line for line in err.splitlines() if " ERROR " in line or line.startswith("E")]
    assert len(errors) == 1, err
    assert errors[0].endswith(f"port {port} is already in use on 127.0.0.1")
    assert "add_port" not in err
    assert not (tmp_path / "data").exists()


def test_print_settings_prints_every_value_and_starts_nothing(tmp_path: Path) -> None:
    """Issue 25 item 13: the start no longer logs ~66 `setting X = ...` lines; they are one
    command away, the given ones marked."""
    from stratalog.server.settings import SETTING_NAMES

    result = serve(tmp_path / "data", "--print-settings", "--listen", "127.0.0.1:1")
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    names = [line.split(" = ", 1)[0] for line in lines]
    assert set(SETTING_NAMES) <= set(names)
    assert "listen = '127.0.0.1:1'  (given)" in lines
    assert "max_connections = 1024" in lines  # a default: not marked
    assert not (tmp_path / "data").exists()
