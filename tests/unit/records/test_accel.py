"""The C record loops (records/_speedups.c) against the pure-Python reference (records/record.py).

Equal means: the same return values (records compare equal, keys and values are bytes), and for
bad input the same exception class with the same message. Inputs: Hypothesis-generated valid
records (nulls, empty and large fields, headers, extreme deltas and bases), random bytes, every
prefix of valid regions, random corruption of them, and hand-made varint edge cases. The C code
must never read outside its buffer: the prefix and corruption feeds are where it would, and a
read past the end of a bytes object would show up as a wrong result or message here (and as a
crash under a sanitizer).

These tests need the extension: the dev install builds it (``pip install -e '.[dev]'``), and
test_extension_is_built fails when it is missing, rather than the comparisons being skipped.
"""

from __future__ import annotations

import array
import gc
import os
import shutil
import subprocess
import sys
import sysconfig
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.records import (
    BatchBuilder,
    Compression,
    CorruptRecordError,
    Record,
    TimestampType,
    accel,
    build_batch,
    decode_batch,
    iter_records,
    summarize_records,
    wrap_int64,
)
from stratalog.records import record as reference
from stratalog.records.reader import decode_batch_columns

try:
    from stratalog.records import _speedups as c_impl
except ImportError:  # reported by test_extension_is_built; the other tests then fail on use
    c_impl = None

FORCED_PURE_PYTHON = os.environ.get(accel.PURE_PYTHON_ENV, "") not in ("", "0")
SOURCE = Path(accel.__file__).with_name("_speedups.c")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

SMALL_FIELDS = st.one_of(
    st.none(),
    st.binary(max_size=40),
    st.binary(min_size=60, max_size=200),  # two-byte length varints
)
# Three-byte length varints; repeated patterns, because drawing 20 KB of random bytes is slow.
LARGE_FIELDS = st.builds(
    lambda size, pattern: (pattern * (size // len(pattern) + 1))[:size],
    st.integers(8192, 20_000),
    st.binary(min_size=1, max_size=16),
)
FIELDS = st.one_of(SMALL_FIELDS, LARGE_FIELDS)
HEADERS = st.lists(
    st.tuples(
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
        st.one_of(st.none(), st.binary(max_size=300)),
    ),
    max_size=4,
).map(tuple)
DELTA64 = st.one_of(
    st.integers(-100, 100), st.integers(-(2**20), 2**20), st.integers(INT64_MIN, INT64_MAX)
)
DELTA32 = st.one_of(
    st.integers(0, 100), st.integers(-(2**20), 2**20), st.integers(INT32_MIN, INT32_MAX)
)
RECORD_FIELDS = st.tuples(DELTA32, DELTA64, FIELDS, FIELDS, HEADERS)
SMALL_HEADERS = st.lists(
    st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=20))), max_size=2
).map(tuple)
# Records small enough that every prefix and many corruptions of a few of them stay cheap.
SMALL_RECORD_FIELDS = st.tuples(DELTA32, DELTA64, SMALL_FIELDS, SMALL_FIELDS, SMALL_HEADERS)
BASE = st.one_of(st.integers(-1000, 10**13), st.sampled_from([INT64_MIN, INT64_MAX]))


def _region(fields: list[tuple]) -> bytes:
    out = bytearray()
    for offset_delta, timestamp_delta, key, value, headers in fields:
        reference.encode_record(out, offset_delta, timestamp_delta, key, value, headers)
    return bytes(out)


def _outcome(function, *args):
    """The result of ``function(*args)``, or the class and message of what it raised."""
    try:
        return ("returned", function(*args))
    except Exception as exc:  # compared, not swallowed: any difference fails the test
        return ("raised", type(exc), str(exc))


def _columns_of(records: list[Record]) -> tuple[list, list, list, list, list]:
    return (
        [r.offset for r in records],
        [r.timestamp for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
    )


def _assert_same_decoding(
    data: bytes, count: int, base_offset=7, base_timestamp=1000, override=None
):
    """C and reference agree on decode, columns and walk of ``data``, and C raises only RecordErrors."""
    args = (count, base_offset, base_timestamp, override)
    expected = _outcome(reference.decode_records, data, *args)
    for buffer in (data, bytearray(data), memoryview(data)):
        got = _outcome(c_impl.decode_records, buffer, *args)
        assert got == expected
        columns = _outcome(c_impl.decode_columns, buffer, *args)
        if expected[0] == "returned":
            assert columns == ("returned", _columns_of(expected[1]))
            for value in (*columns[1][2], *columns[1][3]):
                assert value is None or type(value) is bytes
        else:
            assert columns == expected
    if INT64_MIN <= base_offset <= INT64_MAX and INT64_MIN <= base_timestamp <= INT64_MAX:
        # The Arrow layout: whole, and one offset range inside it.
        low = min(base_offset + 1, INT64_MAX)
        for bounds in ((None, None, False), (low, min(low + count // 2, INT64_MAX), True)):
            arrow = _outcome(accel.decode_arrow_reference, data, *args, *bounds)
            assert _outcome(c_impl.decode_arrow, data, *args, *bounds) == arrow
            if expected[0] == "raised":
                assert arrow == expected
    walked = _outcome(c_impl.walk_records, data, count)
    assert walked == _outcome(reference.walk_records, data, count)
    if walked[0] == "raised":
        assert walked[1] is CorruptRecordError
    return expected


# ------------------------------------------------------------------------------------------------
# The extension is there, and the public functions use it.


def test_extension_is_built():
    if FORCED_PURE_PYTHON:
        assert not accel.ACCELERATED
        assert accel.decode_records is reference.decode_records
        return
    assert c_impl is not None, "stratalog.records._speedups is not built: pip install -e '.[dev]'"
    assert accel.ACCELERATED
    assert accel.decode_records is c_impl.decode_records
    assert accel.walk_records is c_impl.walk_records
    assert accel.encode_record is c_impl.encode_record


def test_pure_python_fallback_runs_the_reference():
    # A fresh interpreter with the fallback forced: the same public API, the reference loops.
    batch = build_batch([(1000, b"k", b"v", (("h", None),)), (1001, None, b"w", ())])
    script = (
        "import sys\n"
        "from stratalog.records import accel, record, decode_batch, summarize_records\n"
        "from stratalog.records.reader import decode_batch_columns\n"
        "assert not accel.ACCELERATED\n"
        "assert accel.decode_records is record.decode_records\n"
        "assert accel.encode_record is record.encode_record\n"
        "batch = bytes.fromhex(sys.argv[1])\n"
        "header, records = decode_batch(batch)\n"
        "print(records)\n"
        "print(tuple(decode_batch_columns(batch)[1]))\n"
        "print(summarize_records(batch))\n"
    )
    env = dict(os.environ, **{accel.PURE_PYTHON_ENV: "1"})
    result = subprocess.run(
        [sys.executable, "-c", script, batch.hex()], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    _, records = decode_batch(batch)
    assert result.stdout.splitlines() == [
        repr(records),
        repr(tuple(decode_batch_columns(batch)[1])),
        repr(summarize_records(batch)),
    ]


def _run_python(script: str) -> list[str]:
    """stdout of ``script`` in a fresh interpreter that tries to load the extension."""
    env = {k: v for k, v in os.environ.items() if k != accel.PURE_PYTHON_ENV}
    result = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", script],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_a_missing_extension_falls_back_silently():
    # What a machine without a compiler installs: no _speedups at all. No warning (the -W
    # error above would turn one into a failure), and the builder gets the Python writer.
    assert _run_python(
        "import sys\n"
        "class NotBuilt:  # the finders' answer when the file is absent\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'stratalog.records._speedups':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NotBuilt())\n"
        "from stratalog.records import BatchBuilder, accel, decode_batch\n"
        "builder = BatchBuilder()\n"
        "builder.append(5, b'k', b'v')\n"
        "print(accel.ACCELERATED, BatchBuilder.__mro__[1].__name__)\n"
        "print(decode_batch(builder.build())[1])\n"
    ) == ["False PyRecordsWriter", repr([Record(0, 5, b"k", b"v")])]


def test_a_broken_extension_falls_back_with_a_warning():
    assert _run_python(
        "import sys, warnings\n"
        "class Broken:\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name == 'stratalog.records._speedups':\n"
        "            raise ImportError('built for something else')\n"
        "sys.meta_path.insert(0, Broken())\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from stratalog.records import accel\n"
        "print(accel.ACCELERATED)\n"
        "print([str(w.message) for w in caught if w.category is RuntimeWarning])\n"
    ) == [
        "False",
        repr(
            [
                "stratalog.records._speedups exists but does not import (built for something "
                "else); using the pure-Python record codec"
            ]
        ),
    ]


def test_c_source_compiles_without_warnings(tmp_path):
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler on this machine (the extension is optional)")
    include = sysconfig.get_paths()["include"]
    result = subprocess.run(
        [
            compiler,
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-fPIC",
            "-c",
            f"-I{include}",
            str(SOURCE),
            "-o",
            str(tmp_path / "speedups.o"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------------------------------------------
# Valid input: the same records, columns, walks and bytes.


@settings(deadline=None)
@given(st.lists(RECORD_FIELDS, max_size=8), BASE, BASE, st.one_of(st.none(), BASE))
def test_valid_regions_decode_and_walk_the_same(fields, base_offset, base_timestamp, override):
    data = _region(fields)
    outcome = _assert_same_decoding(data, len(fields), base_offset, base_timestamp, override)
    assert outcome[0] == "returned"
    assert len(outcome[1]) == len(fields)


@settings(deadline=None)
@given(RECORD_FIELDS, st.binary(max_size=5))
def test_encode_writes_the_same_bytes(fields, prefix):
    offset_delta, timestamp_delta, key, value, headers = fields
    expected, got = bytearray(prefix), bytearray(prefix)
    written = reference.encode_record(expected, offset_delta, timestamp_delta, key, value, headers)
    assert c_impl.encode_record(got, offset_delta, timestamp_delta, key, value, headers) == written
    assert got == expected


@settings(deadline=None)
@given(RECORD_FIELDS)
def test_encode_takes_any_bytes_like_and_keywords(fields):
    offset_delta, timestamp_delta, key, value, headers = fields
    expected = bytearray()
    reference.encode_record(expected, offset_delta, timestamp_delta, key, value, headers)
    as_bytearray = None if key is None else bytearray(key)
    as_view = None if value is None else memoryview(value)
    listed = [list(header) for header in headers]
    got = bytearray()
    c_impl.encode_record(
        got,
        timestamp_delta=timestamp_delta,
        offset_delta=offset_delta,
        key=as_bytearray,
        value=as_view,
        headers=listed,
    )
    assert got == expected


def test_decode_and_walk_take_keywords():
    data = _region([(0, 5, b"k", b"v", ()), (1, 2, None, b"w", (("h", b"x"),))])
    assert c_impl.decode_records(
        data=data, count=2, base_offset=10, base_timestamp=100, timestamp_override=None
    ) == reference.decode_records(data, 2, 10, 100)
    assert c_impl.walk_records(data=data, count=2) == reference.walk_records(data, 2)
    with pytest.raises(TypeError):
        c_impl.decode_records(data, 2, 10)
    with pytest.raises(TypeError):
        c_impl.walk_records(data, 2, count=2)
    with pytest.raises(TypeError):
        c_impl.walk_records(data, counts=2)


def test_decoded_records_are_ordinary_records():
    data = _region([(0, 5, b"k", b"v", (("h", b"x"), ("n", None))), (1, 2, None, b"", ())])
    records = c_impl.decode_records(data, 2, 2**62, 100)
    assert all(type(r) is Record for r in records)
    assert records == [
        Record(2**62, 105, b"k", b"v", (("h", b"x"), ("n", None))),
        Record(2**62 + 1, 102, None, b"", ()),
    ]
    assert hash(records[0]) == hash(Record(2**62, 105, b"k", b"v", (("h", b"x"), ("n", None))))
    with pytest.raises(AttributeError):
        records[0].key = b"other"  # type: ignore[misc]
    del data
    gc.collect()
    assert records[1] == Record(2**62 + 1, 102, None, b"", ())


def test_sums_past_int64_stay_exact():
    data = _region([(INT32_MAX, INT64_MAX, None, b"v", ()), (-5, INT64_MIN, None, b"w", ())])
    for base in (INT64_MAX, INT64_MIN, 2**70, -(2**70)):
        _assert_same_decoding(data, 2, base, base)
    records = c_impl.decode_records(data, 2, INT64_MAX, INT64_MAX)
    assert records[0].offset == INT64_MAX + INT32_MAX
    assert records[0].timestamp == 2 * INT64_MAX


@pytest.mark.parametrize("decode_arrow", ["c", "reference"])
def test_arrow_wraps_timestamps_past_int64_as_kafkas_reader_and_refuses_such_offsets(
    decode_arrow: str,
) -> None:
    decode = c_impl.decode_arrow if decode_arrow == "c" else accel.decode_arrow_reference
    data = _region([(0, -5, None, b"v", ()), (1, 5, None, b"w", ())])

    def timestamps(*args: object) -> list[int]:
        columns = accel.ArrowColumns._make(decode(data, 2, *args))
        return list(array.array("q", columns.timestamps))

    # The probe's records of issue 13: base -2^63 + 1 with delta -5, base 2^63 - 2 with +5.
    assert timestamps(0, INT64_MIN + 1) == [INT64_MAX - 3, INT64_MIN + 6]
    assert timestamps(0, INT64_MAX - 1) == [INT64_MAX - 6, INT64_MIN + 3]
    assert timestamps(0, INT64_MAX - 1) == [wrap_int64(INT64_MAX - 1 + d) for d in (-5, 5)]
    assert timestamps(0, 0, 2**64 + 7) == [7, 7]  # an override too
    with pytest.raises(CorruptRecordError, match="record 1: its offset is outside int64"):
        decode(data, 2, INT64_MAX, 0)


def test_wrap_int64_is_javas_long_arithmetic() -> None:
    assert [wrap_int64(v) for v in (0, -1, INT64_MAX, INT64_MIN)] == [0, -1, INT64_MAX, INT64_MIN]
    assert wrap_int64(INT64_MAX + 1) == INT64_MIN
    assert wrap_int64(INT64_MIN - 4) == INT64_MAX - 3
    assert wrap_int64(2**64 + 5) == 5


def test_timestamp_override_is_passed_through_as_is():
    data = _region([(0, 1, None, b"v", ()), (1, 2, None, b"w", ())])
    for override in (0, -1, 2**80, "anything"):
        _assert_same_decoding(data, 2, 0, 100, override)


# ------------------------------------------------------------------------------------------------
# Bad input: the same errors with the same messages, never a read outside the buffer.


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120), st.integers(-2, 12))
def test_random_bytes_fail_the_same(data, count):
    _assert_same_decoding(data, count)


@settings(max_examples=50, deadline=None)
@given(st.lists(SMALL_RECORD_FIELDS, min_size=1, max_size=4))
def test_every_prefix_fails_the_same(fields):
    data = _region(fields)
    for cut in range(len(data)):
        outcome = _assert_same_decoding(data[:cut], len(fields))
        assert outcome[0] == "raised"
        assert outcome[1] is CorruptRecordError


MUTATION = st.tuples(
    st.sampled_from(["set", "insert", "delete"]),
    st.integers(0, 10_000),
    st.integers(0, 255),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(SMALL_RECORD_FIELDS, min_size=1, max_size=4),
    st.lists(MUTATION, min_size=1, max_size=3),
    st.integers(-1, 1),
)
def test_random_corruption_fails_the_same(fields, mutations, count_change):
    damaged = bytearray(_region(fields))
    for kind, where, byte in mutations:
        if not damaged:
            break
        where %= len(damaged)
        if kind == "set":
            damaged[where] = byte
        elif kind == "insert":
            damaged.insert(where, byte)
        else:
            del damaged[where]
    _assert_same_decoding(bytes(damaged), len(fields) + count_change)


VARINT_CASES = [
    b"\x80",  # truncated after one byte
    b"\x80\x80",  # truncated after two
    b"\x80\x80\x80",  # the varint reader's own "truncated" message
    b"\xff\xff\xff\xff\x0f",  # a 5-byte length: -2**31 (zig-zag of 0xffffffff)
    b"\xff\xff\xff\xff\xff",  # too long for a varint
    b"\xff\xff\xff\xff\x7f",  # bits past 32 dropped, as Java does
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80",
]


@pytest.mark.parametrize("varint", VARINT_CASES)
@pytest.mark.parametrize("field", range(6))
def test_long_and_broken_varints_in_each_field(varint, field):
    # A record whose field number `field` (length, timestamp, offset, key length, value length,
    # header count) is replaced by the varint, then some plausible bytes after it.
    parts = [b"\x0e", b"\x00", b"\x02", b"\x00", b"\x01", b"\x02v", b"\x00"]
    position = [0, 2, 3, 4, 5, 6][field]
    parts[position] = varint + (b"v" if position == 5 else b"")
    data = b"".join(parts)
    for cut in (len(data), len(data) + 3):
        _assert_same_decoding((data + b"\x00\x01\x02")[:cut], 1)


def test_plain_and_checked_records_mixed_decode_and_walk_the_same():
    # The C readers take a fast path for a record with one- to three-byte varints and no
    # headers, and the checked path for anything else; a region that alternates between them
    # (deltas of 1 to 4 bytes, headers, null and large keys and values) must read as one.
    fields = []
    for index in range(3000):
        delta = (index * 997) % (1 << 22) - (1 << 21) if index % 7 == 0 else index
        headers = ((f"h{index}", b"v"),) if index % 11 == 0 else ()
        key = None if index % 3 else b"k" * (index % 200)
        value = None if index % 13 == 0 else bytes([index % 256]) * (index % 300)
        fields.append((index, delta, key, value, headers))
    data = _region(fields)
    outcome = _assert_same_decoding(data, len(fields), 0, 10**12)
    assert outcome[0] == "returned" and len(outcome[1]) == len(fields)
    # A record whose value length claims one byte more than it holds (its value then takes
    # the header count's byte): the fast path must hand it to the checked path, which fails it
    # with the reference's error.
    damaged = bytearray(_region([(0, 0, None, b"abc", ()), (1, 1, None, b"de", ())]))
    assert damaged[5:7] == b"\x06a"  # value length 3 (zig-zag 6), then "abc"
    damaged[5] = 0x08
    outcome = _assert_same_decoding(bytes(damaged), 2)
    assert outcome[0] == "raised" and outcome[1] is CorruptRecordError


def test_large_plain_regions_walk_the_same_without_the_gil():
    # Regions of 64 KiB or more are walked first with the GIL released, by a pass that takes
    # plain records only; a region it cannot take entirely (one record with headers, one
    # damaged byte near the end) is walked again by the checked path.
    fields = [(i, (i * 7919) % 40_000 - 20_000, None if i % 5 else b"key", b"v" * 100, ())
              for i in range(2000)]
    data = _region(fields)
    assert len(data) >= 64 * 1024
    walked = _outcome(c_impl.walk_records, data, len(fields))
    assert walked[0] == "returned" and walked == _outcome(reference.walk_records, data, 2000)
    with_headers = _region([*fields[:-1], (1999, 0, None, b"v", (("h", b"x"),))])
    _assert_same_decoding(with_headers, len(fields))
    for cut in (1, 2, 5):
        outcome = _assert_same_decoding(data[:-cut], len(fields))
        assert outcome[0] == "raised"
    outcome = _assert_same_decoding(data + b"\x00", len(fields))
    assert outcome[0] == "raised"
    assert _outcome(c_impl.walk_records, data, len(fields) + 1)[0] == "raised"
    assert _outcome(c_impl.walk_records, data, len(fields) - 1) == _outcome(
        reference.walk_records, data, len(fields) - 1)


def test_header_edge_cases_fail_the_same():
    # length | attrs | ts | off | key -1 | value -1 | header block ...
    def record(header_block: bytes) -> bytes:
        body = b"\x00\x00\x00\x01\x01" + header_block
        return bytes([len(body) << 1]) + body

    for block in (
        b"\x03",  # header count -2
        b"\x02\x03a\x01",  # key length -2
        b"\x02\x02a\x03",  # value length -2
        b"\x02\x02a\x7f",  # value length -64
        b"\x02\x02a\x10",  # value runs past record
        b"\x02\x02\xff\x01",  # invalid UTF-8 key: replacement character
        b"\x02\x02a\x02z",
        b"\x04\x02a\x01",  # second header missing
        b"\x02\x0ca\x01",  # key runs past record
        b"\x02",
        b"\x02\x02a",
        b"\x7e" + b"\x00" * 10,  # count far above the bytes left
    ):
        _assert_same_decoding(record(block), 1)


def test_huge_declared_counts_do_not_allocate():
    data = _region([(0, 0, None, b"v", ())])
    for count in (2**31 - 1, 2**40, INT64_MAX):
        outcome = _assert_same_decoding(data, count)
        assert outcome[1] is CorruptRecordError and "missing" in outcome[2]


def test_encode_errors_are_the_same_and_leave_out_untouched():
    cases = [
        (0, 2**63, None, b"v", ()),  # timestamp delta past int64
        (0, -(2**63) - 1, None, b"v", ()),
        (2**31, 0, None, b"v", ()),  # offset delta past int32
        (-(2**31) - 1, 0, None, b"v", ()),
        (2**70, 0, None, b"v", ()),
        (0, 0, None, b"v", (("\ud800", b"x"),)),  # lone surrogate header key
        (0, 0, None, b"v", (("ok", None), ("bad \udfff", None))),
    ]
    for case in cases:
        expected, got = bytearray(b"ab"), bytearray(b"ab")
        want = _outcome(reference.encode_record, expected, *case)
        assert want[0] == "raised"
        assert _outcome(c_impl.encode_record, got, *case) == want
        assert got == expected == b"ab"


def test_encode_rejects_programmer_errors_cleanly():
    out = bytearray(b"ab")
    for args in (
        (b"", 0, 0, None, b"v"),  # not a bytearray
        (out, 0, 0, "key", b"v"),  # str key
        (out, 0, 0, None, b"v", ((b"key", None),)),  # bytes header key
        (out, 0, 0, None, b"v", (("k",),)),  # not a pair
        (out, 0, 0, None, b"v", 5),  # headers not a sequence
        (out, 0.5, 0, None, b"v"),
    ):
        with pytest.raises((TypeError, ValueError)):
            c_impl.encode_record(*args)
    assert out == b"ab"
    view = memoryview(out)
    with pytest.raises(BufferError):  # an exported bytearray cannot grow
        c_impl.encode_record(out, 0, 0, None, b"v")
    view.release()
    assert out == b"ab"


TIMESTAMPS = st.one_of(
    st.integers(1_700_000_000_000, 1_700_000_100_000),
    st.integers(INT64_MIN, INT64_MAX),
    st.sampled_from([INT64_MIN, INT64_MAX, INT64_MAX + 1, INT64_MIN - 1, 2**100]),
)
APPEND = st.tuples(
    TIMESTAMPS,
    SMALL_FIELDS,
    SMALL_FIELDS,
    st.one_of(SMALL_HEADERS, st.just((("ok", None), ("\udc80", b"x")))),
)


def _writer_state(writer) -> tuple:
    return (
        bytes(writer._records),
        writer.records_count,
        writer._base_timestamp,
        writer._max_timestamp,
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(APPEND, max_size=12))
def test_records_writer_appends_the_same_as_the_reference(appends):
    # Errors included (timestamps outside int64, deltas that overflow, bad header keys): the
    # same outcome for each append, and the same state after it.
    c_writer, py_writer = c_impl.RecordsWriter(), accel.PyRecordsWriter()
    for timestamp, key, value, headers in appends:
        expected = _outcome(py_writer.append, timestamp, key, value, headers)
        assert _outcome(c_writer.append, timestamp, key, value, headers) == expected
        assert _writer_state(c_writer) == _writer_state(py_writer)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(APPEND, max_size=3),
    TIMESTAMPS,
    st.lists(SMALL_FIELDS, max_size=30),
    st.integers(0, 30),
    st.one_of(st.none(), st.integers(0, 3000)),
)
def test_append_values_is_append_per_value_in_c_and_in_the_reference(
    before, timestamp, values, start, max_bytes
):
    # The same outcome (result or error) and state from C and the reference, and the records
    # are exactly those of append() per value, up to the budget.
    c_writer, py_writer, per_value = (
        c_impl.RecordsWriter(), accel.PyRecordsWriter(), accel.PyRecordsWriter()
    )
    for writer in (c_writer, py_writer, per_value):
        for args in before:
            _outcome(writer.append, *args)
    start = min(start, len(values))
    expected = _outcome(py_writer.append_values, timestamp, values, start, max_bytes)
    assert _outcome(c_writer.append_values, timestamp, values, start, max_bytes) == expected
    assert _writer_state(c_writer) == _writer_state(py_writer)
    if expected[0] == "raised":
        # All or nothing: the writer is as before the call.
        assert _writer_state(py_writer) == _writer_state(per_value)
        return
    stop, added = expected[1]
    size_before = len(per_value._records)
    for value in values[start:stop]:
        per_value.append(timestamp, None, value)
    assert _writer_state(py_writer) == _writer_state(per_value)
    assert added == len(per_value._records) - size_before
    if max_bytes is not None:
        assert added <= max_bytes
        if stop < len(values):  # it stopped because the next record would not fit
            per_value.append(timestamp, None, values[stop])
            assert len(per_value._records) - size_before > max_bytes


def test_append_values_checks_its_arguments_alike():
    for make in (c_impl.RecordsWriter, accel.PyRecordsWriter):
        writer = make()
        with pytest.raises(TypeError, match="values must be a list or tuple, not generator"):
            writer.append_values(1, (v for v in [b"a"]))
        with pytest.raises(TypeError, match=r"values\[1\] must be bytes or None, not str"):
            writer.append_values(1, [b"a", "b"])
        with pytest.raises(ValueError, match=r"start 3 is outside \[0, 2\]"):
            writer.append_values(1, [b"a", b"b"], 3)
        with pytest.raises(ValueError, match="max_bytes must not be negative, got -1"):
            writer.append_values(1, [b"a"], 0, -1)
        assert _writer_state(writer) == (b"", 0, 0, 0)
        assert writer.append_values(7, (b"a", None), max_bytes=0) == (0, 0)
        assert writer.append_values(7, (b"a", None)) == (2, 15)
        assert writer.append_values(7, [b"xyz"], start=1) == (1, 0)
        assert _writer_state(writer)[1:] == (2, 7, 7)


def test_a_builder_filled_by_append_values_builds_the_batch_kafka_reads():
    builder = BatchBuilder()
    builder.append(1_000, b"k", b"first")
    size_before = builder.uncompressed_records_bytes
    stop, added = builder.append_values(2_000, [b"v%d" % i for i in range(100)] + [None])
    assert (stop, added) == (101, builder.uncompressed_records_bytes - size_before)
    batch = builder.build()
    _, records = decode_batch(batch)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == (
        [(0, 1_000, b"k", b"first")]
        + [(1 + i, 2_000, None, b"v%d" % i) for i in range(100)]
        + [(101, 2_000, None, None)]
    )


def test_records_writer_is_the_builder_base_and_checks_its_use():
    assert issubclass(BatchBuilder, accel.RecordsWriter)
    assert accel.RecordsWriter is (
        accel.PyRecordsWriter if FORCED_PURE_PYTHON else c_impl.RecordsWriter
    )
    writer = c_impl.RecordsWriter()
    assert writer.append(timestamp=10, key=None, value=b"v") == 0
    assert writer.append(5, b"k", None, headers=[("h", b"x")]) == 1
    assert _writer_state(writer)[1:] == (2, 10, 10)
    with pytest.raises(AttributeError):
        writer.records_count = 5  # read-only: the builder's invariants depend on it
    with pytest.raises(TypeError):
        c_impl.RecordsWriter(1)
    with pytest.raises(TypeError):
        writer.append(1.5, None, b"v")
    uninitialised = c_impl.RecordsWriter.__new__(c_impl.RecordsWriter)
    with pytest.raises(RuntimeError):
        uninitialised.append(1, None, b"v")


def test_a_later_timestamp_outside_int64_is_refused_before_it_breaks_the_header():
    # Its delta from the first timestamp fits int64, but the header's max_timestamp could not
    # hold it: refused at append (before: a struct.error at build), by both writers.
    builder = BatchBuilder()
    for writer in (builder, c_impl.RecordsWriter(), accel.PyRecordsWriter()):
        writer.append(10, None, b"v")
        with pytest.raises(ValueError, match="timestamp 9223372036854775808 is outside int64"):
            writer.append(INT64_MAX + 1, None, b"w")
        assert _writer_state(writer)[1:] == (1, 10, 10)
    assert decode_batch(builder.build())[1] == [Record(0, 10, None, b"v")]


# ------------------------------------------------------------------------------------------------
# The public functions that run the C loops.


@given(
    st.lists(st.tuples(BASE, FIELDS, FIELDS, HEADERS), min_size=1, max_size=6),
    st.sampled_from(list(Compression)),
    st.sampled_from(list(TimestampType)),
)
@settings(max_examples=60, deadline=None)
def test_batch_columns_hold_what_decode_batch_holds(records, codec, timestamp_type):
    records = [(ts % 2**40, key, value, headers) for ts, key, value, headers in records]
    batch = build_batch(records, compression=codec, timestamp_type=timestamp_type)
    header, decoded = decode_batch(batch)
    column_header, columns = decode_batch_columns(batch)
    assert column_header == header
    assert tuple(columns) == _columns_of(decoded)
    assert columns.offsets == [r.offset for r in decoded]


def test_reference_columns_equal_c_columns():
    data = _region([(0, 5, b"k", b"v", (("h", b"x"),)), (1, -3, None, None, ())])
    expected = accel.decode_columns_reference(data, 2, 10, 100)
    assert expected == c_impl.decode_columns(data, 2, 10, 100)
    assert accel.decode_columns(data, 2, 10, 100) == expected
    assert isinstance(accel.decode_columns(data, 2, 10, 100), accel.RecordColumns)


def test_readers_release_a_bytearray_they_read_in_place():
    batch = build_batch([(1000, None, b"v" * 50, ())] * 3)
    buf = bytearray(batch)
    decode_batch(buf)
    decode_batch_columns(buf)
    summarize_records(buf)
    list(iter_records(buf))
    buf += b"more"  # would raise BufferError if a view were still exported
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    for read in (decode_batch, decode_batch_columns, summarize_records):
        with pytest.raises(CorruptRecordError):
            read(damaged, verify_crc=False)
    damaged += b"more"


def test_builder_output_is_unchanged_by_the_c_encoder():
    records = [
        (1_700_000_000_000 + i, None if i % 3 else b"k%d" % i, b"v" * i, ()) for i in range(300)
    ]
    records[7] = (records[7][0], b"k", b"v", (("h", b"x"), ("n", None)))
    builder = BatchBuilder()
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    region = bytearray()
    base = records[0][0]
    for i, (timestamp, key, value, headers) in enumerate(records):
        reference.encode_record(region, i, timestamp - base, key, value, headers)
    assert builder.build()[61:] == region


def test_no_references_leak_on_success_or_error():
    # tracemalloc sees every object allocation: a new object leaked per record or per call grows
    # the traced memory by at least the rounds times its size. Reference counts of the inputs
    # catch the other kind of leak (a reference to an existing object never released). Both
    # checks were seen to fail on deliberately leaky builds.
    header = (("h", b"x"),)
    key, value = b"k", b"v" * 20
    good = _region([(i, i, key, value, header) for i in range(50)])
    bad = good[:-3]
    inputs = (header, key, value, good, bad)

    def work():
        c_impl.decode_records(good, 50, 0, 0)
        c_impl.decode_columns(good, 50, 2**63 - 10, 2**63 - 10)  # sums past int64: slow path
        c_impl.walk_records(good, 50)
        for function in (c_impl.decode_records, c_impl.decode_columns):
            with pytest.raises(CorruptRecordError):
                function(bad, 50, 0, 0)
        with pytest.raises(CorruptRecordError):
            c_impl.walk_records(bad, 50)
        out = bytearray()
        c_impl.encode_record(out, 0, 0, key, value, header)
        with pytest.raises(ValueError):
            c_impl.encode_record(out, 2**31, 0, key, value, header)
        with pytest.raises(UnicodeEncodeError):
            c_impl.encode_record(out, 0, 0, key, value, (*header, ("\ud800", None)))
        writer = c_impl.RecordsWriter()
        writer.append(10**15, key, value, header)  # not a cached small int
        with pytest.raises(ValueError):
            writer.append(INT64_MIN, key, value, header)  # the delta overflows int64
        with pytest.raises(ValueError):
            writer.append(2**64, key, value, header)

    for _ in range(20):
        work()
    gc.collect()
    references_before = [sys.getrefcount(x) for x in inputs]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(300):
            work()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 4096, f"{grown} bytes still allocated after 300 rounds"
    assert [sys.getrefcount(x) for x in inputs] == references_before
