"""The pure parts of benchmarks/bench_limits.py: the "off" server's flags really put every limit
the benchmark names out of the way, and its payloads are what its docstring says. Nothing here
starts a server (that is the benchmark's run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[3]
if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))

from benchmarks.bench_limits import (  # noqa: E402
    MIB,
    OFF_FLAGS,
    OUT_OF_THE_WAY_BYTES,
    _mib_batch,
    _zstd_batch,
    median_interval,
)
from stratalog.records import Compression, parse_header, validate_batch  # noqa: E402
from stratalog.server.settings import Settings, add_arguments, settings_from_args  # noqa: E402

#: Issue 24's limits on the paths the benchmark's workloads take.
BYTE_BUDGETS = ("session_buffer_bytes", "session_buffer_bytes_total",
                "produce_decompressed_bytes_in_flight_max",
                "subscribe_buffer_bytes_per_connection")


def _parsed(flags: tuple[str, ...]) -> Settings:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return settings_from_args(parser.parse_args(list(flags)), environ={})


def test_the_off_flags_lift_every_budget_and_leave_glibc_its_arenas() -> None:
    defaults, off = _parsed(()), _parsed(OFF_FLAGS)
    for name in BYTE_BUDGETS:
        assert getattr(defaults, name) < OUT_OF_THE_WAY_BYTES, name
        assert getattr(off, name) == OUT_OF_THE_WAY_BYTES, name
    assert defaults.malloc_arena_max == 2
    assert off.malloc_arena_max == 0
    # Nothing else differs: the comparison is of the limits alone.
    changed = {name for name in Settings.__dataclass_fields__
               if getattr(defaults, name) != getattr(off, name)} - {"sources", "explicit"}
    assert changed == {*BYTE_BUDGETS, "malloc_arena_max"}
    assert off.explicit == changed  # what the flags gave, and nothing else


def test_the_produce_payloads() -> None:
    batch = _mib_batch()
    assert MIB - 16 * 1024 < len(batch) <= MIB  # within a few records of it
    header = parse_header(batch)
    assert header.length + 12 == len(batch)  # one batch: base offset and length, then the rest
    assert header.attributes & 0x07 == Compression.NONE
    compressed, uncompressed_bytes = _zstd_batch()
    validate_batch(compressed)  # the CRC holds
    header = parse_header(compressed)
    assert header.attributes & 0x07 == Compression.ZSTD
    assert header.records_count == 10_000
    # ~1 MiB decompressed, several times smaller on the wire.
    assert 1_000_000 < uncompressed_bytes < 2 * MIB
    assert len(compressed) < uncompressed_bytes / 3


def test_the_median_interval_holds_the_median_and_widens_with_fewer_rounds() -> None:
    assert median_interval([1.0]) == (1.0, 1.0, 1.0)
    assert median_interval([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)  # few values: all of them
    values = [float(v) for v in range(100, 0, -1)]  # 1..100, unsorted on purpose
    median, low, high = median_interval(values)
    assert median == 50.5
    # ranks 50 -+ 9.8: the 41st and the 60th values
    assert (low, high) == (41.0, 60.0)
    # One wild round moves the interval by at most one rank.
    assert median_interval([*values[1:], 1e9])[1:] in ((41.0, 60.0), (42.0, 61.0))
    with pytest.raises(ValueError, match="no values"):
        median_interval([])
