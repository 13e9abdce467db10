"""records.batch_walk: the one walk from batch to batch, its tail rules, and that it is the only one."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from stratalog.records import build_batch
from stratalog.records.batch_walk import (
    END,
    READ_ON,
    STOP,
    ScannedBatch,
    batches_below,
    collect_in_block,
    find_in_block,
    iter_batch_headers,
    single_batch_header,
)
from stratalog.records.errors import CorruptRecordError, InvalidRecordError

# The two batches of test_batch.py, golden batches of docs/kafka-behaviours.md#records:
# hello/world (78 bytes) and a two-record batch (86 bytes).
HELLO_WORLD = bytes.fromhex(
    "0000000000000000000000420000000002eae98244000000000000000001a0a4b7f0d4000001a0a4b7f0d4"
    "ffffffffffffffffffffffffffff00000001200000000a68656c6c6f0a776f726c6400"
)
TWO_RECORDS = bytes.fromhex(
    "00000000000000000000004a0000000002d1f723ec0000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000216000000010a68656c6c6f0018000a02026b0a746865726500"
)
T0 = 1_700_000_000_000


def _log(batch_count: int, seed: int = 7) -> tuple[bytes, list[tuple[int, int, int]]]:
    """Batches with base offsets assigned, and their (position, last offset, max timestamp)."""
    rng = random.Random(seed)
    pieces, expected = [], []
    position = offset = 0
    for i in range(batch_count):
        count = rng.randint(1, 5)
        value = bytes(rng.randint(0, 300))
        batch = bytearray(build_batch([(T0 + i, None, value, ())] * count))
        batch[:8] = offset.to_bytes(8, "big")  # the base offset is outside the CRC
        pieces.append(bytes(batch))
        expected.append((position, offset + count - 1, T0 + i))
        position += len(batch)
        offset += count
    return b"".join(pieces), expected


def test_iteration_stops_at_partial_tail_and_rejects_tiny_size():
    # (Moved from test_batch.py with the walk.)
    two = TWO_RECORDS + HELLO_WORLD
    assert [h.position for h in iter_batch_headers(two + HELLO_WORLD[:40])] == [0, 86]
    assert [h.position for h in iter_batch_headers(two + b"\x00" * 17)] == [0, 86]
    tiny = bytearray(HELLO_WORLD)
    tiny[8:12] = (13).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="record size 13"):
        list(iter_batch_headers(two + bytes(tiny)))


@pytest.mark.parametrize("tail", [HELLO_WORLD[:40], HELLO_WORLD[:17], HELLO_WORLD[:1]])
def test_a_partial_tail_raises_where_whole_batches_are_promised(tail: bytes) -> None:
    data = TWO_RECORDS + tail
    assert [h.position for h in iter_batch_headers(data)] == [0]
    with pytest.raises(CorruptRecordError, match=(
        f"partial record batch at position 86: {len(tail)} bytes remain"
    )):
        list(iter_batch_headers(data, partial_tail_ok=False))


def test_zeros_end_a_walk_only_when_asked():
    # The preallocated tail of a segment file: zeros where a batch should start.
    data = TWO_RECORDS + bytes(100)
    assert [h.position for h in iter_batch_headers(data, zeros_end=True)] == [0]
    with pytest.raises(CorruptRecordError, match="record size 0 at position 86"):
        list(iter_batch_headers(data))


def test_start_and_end_bound_the_walk():
    data = TWO_RECORDS + HELLO_WORLD + TWO_RECORDS
    assert [h.position for h in iter_batch_headers(data, 86)] == [86, 164]
    # A batch running past ``end`` is a partial tail there.
    assert [h.position for h in iter_batch_headers(data, 0, 163)] == [0]


def test_a_bad_magic_is_invalid_and_names_the_position():
    bad = bytearray(HELLO_WORLD)
    bad[16] = 1
    with pytest.raises(InvalidRecordError, match="position 86 has magic 1"):
        list(iter_batch_headers(TWO_RECORDS + bytes(bad)))


@pytest.mark.parametrize("after", [b"", TWO_RECORDS], ids=["at-the-end", "before-more"])
def test_a_whole_batch_below_the_header_size_or_not_v2_raises_wherever_it_is(after: bytes) -> None:
    # A size field of 30: a 42-byte "batch", whole but smaller than the 61-byte header. At the
    # end fewer than 61 bytes are left (the walk cannot unpack a header there); before more
    # bytes it can: the same rule raises either way.
    small = bytearray(HELLO_WORLD[:42])
    small[8:12] = (30).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="position 86 declares 42 bytes, less than the "
                                                 "61-byte batch header"):
        list(iter_batch_headers(TWO_RECORDS + bytes(small) + after))
    small[16] = 1
    with pytest.raises(InvalidRecordError, match="position 86 has magic 1"):
        list(iter_batch_headers(TWO_RECORDS + bytes(small) + after))


def _single_batch_cases() -> list[bytes]:
    """One batch alone, and what is not one: several, tails, broken framing, empty."""
    bad_magic = bytearray(HELLO_WORLD)
    bad_magic[16] = 1
    tiny = bytearray(HELLO_WORLD)
    tiny[8:12] = (13).to_bytes(4, "big")
    small = bytearray(HELLO_WORLD[:42])
    small[8:12] = (30).to_bytes(4, "big")
    longer = bytearray(HELLO_WORLD)  # declares one byte more than there is
    longer[8:12] = (len(HELLO_WORLD) - 11).to_bytes(4, "big")
    shorter = bytearray(HELLO_WORLD)  # declares one byte less: a 1-byte tail after it
    shorter[8:12] = (len(HELLO_WORLD) - 13).to_bytes(4, "big")
    return [
        HELLO_WORLD, TWO_RECORDS, _log(1)[0], _log(1, seed=3)[0],
        TWO_RECORDS + HELLO_WORLD, HELLO_WORLD + HELLO_WORLD[:17], HELLO_WORLD + bytes(12),
        HELLO_WORLD[:-1], HELLO_WORLD[:61], HELLO_WORLD[:60], HELLO_WORLD[:17], b"",
        bytes(bad_magic), bytes(tiny), bytes(small), bytes(longer), bytes(shorter),
        bytes(len(HELLO_WORLD)),
    ]


@pytest.mark.parametrize("case", range(len(_single_batch_cases())))
def test_single_batch_header_is_the_walk_of_a_buffer_that_is_one_whole_batch(case: int) -> None:
    buf = _single_batch_cases()[case]
    single = single_batch_header(buf)
    try:
        walked = list(iter_batch_headers(buf, partial_tail_ok=False))
    except (CorruptRecordError, InvalidRecordError):
        walked = None  # the walk raises: not one whole batch
    if walked is not None and len(walked) == 1:
        assert single == walked[0] and single.end_position == len(buf)
        assert single_batch_header(memoryview(buf)) == single
    else:
        assert single is None


def test_batches_below_cuts_at_the_first_batch_starting_at_the_bound():
    data, expected = _log(6)
    ends = [position for position, _, _ in expected[1:]] + [len(data)]
    # Cut below the third batch's base offset: the first two batches.
    third_base = expected[1][1] + 1
    cut, next_offset, records = batches_below(data, third_base, 0)
    assert cut == data[: ends[1]] and next_offset == third_base
    assert records == third_base
    # Above everything: all of it; at or below the first: nothing.
    assert batches_below(data, 10**9, 0)[0] == data
    assert batches_below(data, 0, 0) == (b"", 0, 0)


def _find_in_blocks(data: bytes, offset: int, timestamp: int, block: int):
    """find_in_block over ``data`` read in blocks of ``block`` bytes, as log_file.py reads."""
    position, end, size = 0, len(data), 0
    buf_start, buf = 0, data[:block]
    while True:
        step = find_in_block(buf, buf_start, position, end, offset, timestamp, size)
        if len(step) == 7:
            found_position, _, last_offset, _, max_timestamp, found_in, found_start = step
            assert found_in[found_position - found_start :].startswith(
                data[found_position : found_position + 61]
            )
            return found_position, last_offset, max_timestamp
        how, position, size = step
        if how != READ_ON:
            return how, position
        buf_start, buf = position, data[position : position + block]


@pytest.mark.parametrize("block", [61, 100, 333, 4096])
def test_find_in_blocks_agrees_with_the_header_walk(block: int) -> None:
    data, expected = _log(40)
    rng = random.Random(block)
    for _ in range(30):
        offset = rng.randint(0, expected[-1][1] + 2)
        timestamp = rng.choice([-(2**63), T0 + rng.randint(0, 45)])
        want = next(
            ((position, last, ts) for position, last, ts in expected
             if last >= offset and ts >= timestamp),
            None,
        )
        got = _find_in_blocks(data, offset, timestamp, block)
        if want is None:
            assert got[0] == END
        else:
            assert got == want


def test_collect_in_block_takes_the_whole_headers_and_says_where_to_go_on():
    data, expected = _log(10)
    into: list[ScannedBatch] = []
    block = data[:500]
    how, position, *_ = collect_in_block(block, 0, 0, len(data), into)
    assert how == READ_ON
    taken = [p for p, _, _ in expected if p + 61 <= 500]
    assert len(into) == len(taken) and position == expected[len(taken)][0]
    how, position, *_ = collect_in_block(data[position:], position, position, len(data), into)
    assert how == END and len(into) == len(expected)
    assert [base + delta for base, _, _, _, delta, _, _ in into] == [e[1] for e in expected]


def test_collect_in_block_stops_at_a_torn_tail_and_checks_crcs_when_asked():
    data, expected = _log(4)
    torn = data[:-5]
    into: list[ScannedBatch] = []
    how, position, *_ = collect_in_block(torn, 0, 0, len(torn), into)
    assert (how, position, len(into)) == (STOP, expected[-1][0], 3)
    corrupt = bytearray(data)
    corrupt[expected[2][0] + 70] ^= 0xFF  # in the third batch's records: its CRC fails
    checked: list[tuple[int, int]] = []

    def check(relative: int, size_bytes: int, crc: int) -> bool:
        checked.append((relative, size_bytes))
        return False

    into = []
    how, position, *_ = collect_in_block(bytes(corrupt), 0, 0, len(data), into, check, 10**6)
    assert (how, position, len(into)) == (END, expected[2][0], 2)
    assert checked == [(expected[2][0], expected[3][0] - expected[2][0])]


# ------------------------------------------------------------------ one walk in the tree

REPOSITORY = Path(__file__).resolve().parents[3]
# What reads a batch header, and what steps a position over a batch.
_HEADER_NAMES = {"parse_header", "check_framing", "SCAN_FIELDS", "HEADER", "LENGTH_FIELD",
                 "LENGTH_OFFSET"}
_STEP_NAMES = {"end_position", "LOG_OVERHEAD", "size_bytes"}


def _walks(path: Path) -> list[str]:
    """The functions of ``path`` that walk batches: a loop stepping a position over batches in
    a function that reads batch headers."""
    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not _HEADER_NAMES & set(_names(function)):
            continue
        for loop in ast.walk(function):
            if isinstance(loop, (ast.While, ast.For)) and any(
                isinstance(node, (ast.Assign, ast.AugAssign))
                and _STEP_NAMES & set(_names(node.value))
                for node in ast.walk(loop)
            ):
                found.append(f"{function.name} (line {loop.lineno})")
                break
    return found


def _names(node: ast.AST):
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            yield child.id
        elif isinstance(child, ast.Attribute):
            yield child.attr


def test_the_batch_header_walk_exists_in_one_module_only():
    walks = {}
    for package in ("records", "server", "client", "cli", "spark"):
        for path in sorted((REPOSITORY / package).rglob("*.py")):
            found = _walks(path)
            if found:
                walks[path.relative_to(REPOSITORY).as_posix()] = found
    assert "records/batch_walk.py" in walks  # the detector sees the walk where it is
    others = {path: found for path, found in walks.items()
              if path != "records/batch_walk.py"}
    assert not others, (
        f"batches walked outside records/batch_walk.py: {others}; use iter_batch_headers, "
        "batches_below or the block walks there"
    )
