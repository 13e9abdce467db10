"""cli/line_reader.py: lines as they arrive from a pipe, in order, each once, with bounded
memory; against a plain ``split`` of the same bytes."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from stratalog.cli.line_reader import LineReader, LineTooLongError

# Bounds each wait in these tests: they only turn a hang into a failure.
WAIT_S = 30.0


async def _collect(reader: LineReader) -> list[bytes]:
    lines: list[bytes] = []
    while (got := await asyncio.wait_for(reader.next_lines(), WAIT_S)) is not None:
        assert got, "next_lines() returned no line without the end of input"
        lines.extend(got)
    return lines


def _expected(data: bytes) -> list[bytes]:
    if not data:
        return []
    lines = (data[:-1] if data.endswith(b"\n") else data).split(b"\n")
    return [line.removesuffix(b"\r") for line in lines]


@pytest.mark.parametrize("data", [
    b"", b"\n", b"a", b"a\n", b"a\nb", b"a\r\nb\r\n", b"\n\n", b"a\r\r\n", b"x\ry\n",
])
def test_line_endings_and_a_last_line_without_one(data):
    async def main() -> list[bytes]:
        read_fd, write_fd = os.pipe()
        os.write(write_fd, data)
        os.close(write_fd)
        try:
            reader = LineReader(read_fd, line_bytes_max=1024)
            reader.start()
            return await _collect(reader)
        finally:
            reader.close()
            os.close(read_fd)

    assert asyncio.run(main()) == _expected(data)


def test_random_writes_split_anywhere_give_the_same_lines_with_small_blocks():
    rng = random.Random(25)
    data = b"".join(
        rng.choice([b"", b"k:v", b"x" * rng.randrange(1, 300)]) + rng.choice([b"\n", b"\r\n"])
        for _ in range(3000)
    )

    async def main() -> tuple[list[bytes], int, int]:
        read_fd, write_fd = os.pipe()
        reader = LineReader(read_fd, line_bytes_max=4096, read_bytes_max=97, blocks_max=2)
        reader.start()

        async def write() -> None:
            position = 0
            while position < len(data):
                size = rng.randrange(1, 700)
                # A thread: the pipe may be full until the reader catches up.
                await asyncio.to_thread(os.write, write_fd, data[position:position + size])
                position += size
            os.close(write_fd)

        writer = asyncio.create_task(write())
        try:
            lines = await _collect(reader)
            await asyncio.wait_for(writer, WAIT_S)
        finally:
            reader.close()
            os.close(read_fd)
        return lines, reader.lines_read, reader.bytes_read

    lines, count, size = asyncio.run(main())
    assert lines == _expected(data)
    assert count == len(lines) and size == len(data)


def test_a_line_is_returned_as_soon_as_it_is_written_with_the_input_still_open():
    async def main() -> None:
        read_fd, write_fd = os.pipe()
        try:
            reader = LineReader(read_fd, line_bytes_max=1024)
            reader.start()
            os.write(write_fd, b"first\nsecond half")
            assert await asyncio.wait_for(reader.next_lines(), WAIT_S) == [b"first"]
            os.write(write_fd, b" done\n")
            assert await asyncio.wait_for(reader.next_lines(), WAIT_S) == [b"second half done"]
            assert reader.lines_read == 2
        finally:
            reader.close()
            os.close(write_fd)
            os.close(read_fd)

    asyncio.run(main())


def test_a_line_past_the_limit_is_an_error_naming_it_before_its_end_comes():
    async def main() -> str:
        read_fd, write_fd = os.pipe()
        try:
            reader = LineReader(read_fd, line_bytes_max=1000, read_bytes_max=256)
            reader.start()
            os.write(write_fd, b"ok\n" + b"y" * 1500)  # no end: never held whole
            assert await asyncio.wait_for(reader.next_lines(), WAIT_S) == [b"ok"]
            with pytest.raises(LineTooLongError) as raised:
                await asyncio.wait_for(reader.next_lines(), WAIT_S)
            return str(raised.value)
        finally:
            reader.close()
            os.close(write_fd)
            os.close(read_fd)

    assert asyncio.run(main()).startswith("line 2 is longer than 1000 bytes")


def test_the_reader_holds_at_most_its_blocks_ahead_of_the_loop():
    async def main() -> tuple[int, int]:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            reader = LineReader(read_fd, line_bytes_max=1 << 20, read_bytes_max=1000,
                                blocks_max=3)
            reader.start()
            # Nobody calls next_lines(): the reader takes 3 blocks, then the pipe fills and
            # stays full (a reader without the bound would drain all 4 MB).
            written = full = 0
            while written < 4 << 20 and full < 20:
                try:
                    written += os.write(write_fd, b"z" * 999 + b"\n")
                    full = 0
                except BlockingIOError:
                    full += 1
                    await asyncio.sleep(0.05)
            return written, len(reader._blocks)
        finally:
            reader.close()
            os.close(write_fd)
            os.close(read_fd)

    written, queued = asyncio.run(main())
    assert queued <= 3
    assert written < 1 << 20  # the pipe's buffer and 3 blocks, not the 4 MB offered


@pytest.mark.parametrize("data", [b"y" * 150 + b"\nnext", b"x" * 150])
def test_a_too_long_line_in_the_first_read_is_an_error_at_once(data):
    async def main() -> None:
        read_fd, write_fd = os.pipe()
        try:
            reader = LineReader(read_fd, line_bytes_max=100)
            reader.start()
            os.write(write_fd, data)  # the input stays open
            with pytest.raises(LineTooLongError, match=r"^line 1 is longer than 100 bytes"):
                await asyncio.wait_for(reader.next_lines(), WAIT_S)
        finally:
            reader.close()
            os.close(write_fd)
            os.close(read_fd)

    asyncio.run(main())


def test_a_regular_file_is_read_in_blocks_with_the_same_lines(tmp_path):
    rng = random.Random(7)
    data = b"".join(b"line %d %s\n" % (i, b"w" * rng.randrange(0, 50)) for i in range(5000))
    path = tmp_path / "input.txt"
    path.write_bytes(data + b"no end")

    async def main() -> tuple[list[bytes], int]:
        fd = os.open(path, os.O_RDONLY)
        reader = LineReader(fd, line_bytes_max=4096, read_bytes_max=1000)
        try:
            reader.start()  # epoll refuses a regular file: it is read directly
            return await _collect(reader), reader.bytes_read
        finally:
            reader.close()
            os.close(fd)

    lines, size = asyncio.run(main())
    assert lines == _expected(data + b"no end")
    assert size == len(data) + len(b"no end")
