"""benchmarks/compile_hot_path.py: its module lists name real modules, and ``clean`` removes
exactly the extension files a build writes, never records' own C speedups or a source file."""

from __future__ import annotations

from pathlib import Path

from benchmarks.compile_hot_path import HOT_PATH_MODULES, MYPYC_MODULES, clean, compiled_files

_ROOT = Path(__file__).resolve().parents[3]
_SUFFIX = ".cpython-311-x86_64-linux-gnu.so"


def test_every_listed_module_is_a_source_file_of_the_repository() -> None:
    for module in HOT_PATH_MODULES:
        assert (_ROOT / (module.replace(".", "/") + ".py")).is_file(), module
    assert set(MYPYC_MODULES) <= set(HOT_PATH_MODULES)
    assert len(set(HOT_PATH_MODULES)) == len(HOT_PATH_MODULES)


def test_clean_removes_the_builds_files_and_nothing_else(tmp_path: Path) -> None:
    written = [
        tmp_path / "records" / f"varint{_SUFFIX}",
        tmp_path / "server" / f"hot_path__mypyc{_SUFFIX}",
        tmp_path / "server" / "storage" / f"segment{_SUFFIX}",
        tmp_path / "server" / "kafka" / "apis" / f"produce{_SUFFIX}",
    ]
    kept = [
        tmp_path / "records" / f"_speedups{_SUFFIX}",
        tmp_path / "records" / "varint.py",
        tmp_path / "server" / "storage" / "segment.py",
        tmp_path / "server" / "storage" / f"recovery{_SUFFIX}",  # not a hot-path module
    ]
    for path in written + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    assert compiled_files(tmp_path) == sorted(written)
    assert clean(tmp_path) == sorted(written)
    assert not any(path.exists() for path in written)
    assert all(path.exists() for path in kept)
    assert clean(tmp_path) == []
