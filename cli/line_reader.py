"""Lines of a file descriptor, handed over as they arrive: ``stratalog produce``'s input.

Intuition: a producer fed by a person at a terminal, or by ``tail -f app.log``, must send each
line when it comes, not when a chunk of ten thousand lines has filled up or the input has ended;
a producer fed by ``seq 1 1000000`` must still read in large blocks. Both hold when the event
loop reads only when the descriptor is readable (``loop.add_reader``) and then takes *whatever
is there* with one ``os.read(fd, read_bytes_max)``: a typed line from a terminal, what a pipe
holds (up to 64 KiB on Linux). A regular file is always readable (epoll refuses it), so it is
read directly, ``read_bytes_max`` at a time, which takes a page-cache copy, never a wait for a
writer. No thread is needed, and none is left blocked in a read when the command ends.

Format: a line ends at ``\n``; a ``\r`` before it is dropped too (``\r\n`` input), as Kafka's
console producer's ``BufferedReader.readLine``. The last line needs no ``\n``. Lines are
returned without their ending, as ``bytes``, in input order.

Limits (why memory stays bounded whatever the input): at most ``blocks_max`` blocks of
``read_bytes_max`` bytes wait to be taken; past that the reader stops watching the descriptor
until :meth:`LineReader.next_lines` takes them. A line that grows past ``line_bytes_max``
without an end raises :class:`LineTooLongError` instead of being held.

Crash behaviour: nothing is written; input read but not yet taken is lost with the process, as
any reader's buffer is.

Concurrency: event-loop only, one consumer. The descriptor is left blocking (making a shared
terminal or pipe non-blocking would change it for the shell and the other processes using it
too); a read happens only after the loop saw it readable, so it returns at once, unless another
process read the same pipe in between (then the loop waits in the read). The descriptor is not
closed here; :meth:`LineReader.close` stops watching it.
"""

from __future__ import annotations

import asyncio
import collections
import os
import stat

__all__ = ["LineReader", "LineTooLongError"]

#: Bytes asked of one ``os.read``: what a Linux pipe holds at most. Also about the most lines
#: one :meth:`LineReader.next_lines` returns (10,000 short lines): a caller that waits for the
#: oldest of its sends to be acknowledged must not find it holds most of what is in flight.
READ_BYTES_MAX = 64 << 10
#: Blocks read ahead of :meth:`LineReader.next_lines` at most.
BLOCKS_MAX = 16
#: Bytes of lines :meth:`LineReader.next_lines` returns at once, about (it stops taking blocks
#: past this; small blocks, as a slow writer leaves them, are joined up to it).
TAKE_BYTES_MAX = 64 << 10


class LineTooLongError(ValueError):
    """A line longer than the reader's ``line_bytes_max``: named by number and bytes."""


class LineReader:
    """Reads ``fd`` when it is readable; :meth:`next_lines` returns the lines that have arrived.

    Holds the blocks read and not yet taken, the partial line at the end of what was taken (as
    a list of blocks, joined when its end comes), and the count of lines and bytes returned.
    Invariant: lines come out in input order, each once; after :meth:`next_lines` returned
    ``None`` (end of input) it returns ``None`` again.

    Args:
        fd: the descriptor to read (stdin's 0, or an open file's); left open.
        line_bytes_max: a longer line raises :class:`LineTooLongError`.
        read_bytes_max, blocks_max: see the module docstring.
    """

    def __init__(
        self,
        fd: int,
        *,
        line_bytes_max: int,
        read_bytes_max: int = READ_BYTES_MAX,
        blocks_max: int = BLOCKS_MAX,
    ) -> None:
        assert line_bytes_max > 0 and read_bytes_max > 0 and blocks_max > 0
        self._fd = fd
        self._line_bytes_max = line_bytes_max
        self._read_bytes_max = read_bytes_max
        self._blocks_max = blocks_max
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watching = False  # add_reader is on
        self._regular = False  # a regular file: read directly
        self._blocks: collections.deque[bytes | OSError] = collections.deque()
        self._arrived: asyncio.Future[None] | None = None  # next_lines() waits on it
        self._partial: list[bytes] = []  # the start of a line whose end has not come yet
        self._partial_bytes = 0
        self._ended = False  # the last block (b"" or an error) was read
        self._error: LineTooLongError | None = None  # raised by the next next_lines()
        #: Lines returned so far (the number of the last line returned).
        self.lines_read = 0
        #: Bytes taken so far (for a progress bar).
        self.bytes_read = 0

    def start(self) -> None:
        """Start watching the descriptor (on the running event loop)."""
        assert self._loop is None, "started twice"
        self._loop = asyncio.get_running_loop()
        self._regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        if not self._regular:
            try:
                self._watch(True)
            except PermissionError:  # epoll refuses it too (/dev/null): never waits either
                self._regular = True

    def close(self) -> None:
        """Stop watching the descriptor (it stays open). Idempotent."""
        self._watch(False)

    def _watch(self, on: bool) -> None:
        if on == self._watching or self._loop is None:
            return
        if on:
            self._loop.add_reader(self._fd, self._on_readable)
        else:
            self._loop.remove_reader(self._fd)
        self._watching = on

    def _read(self) -> bytes | OSError:
        try:
            return os.read(self._fd, self._read_bytes_max)
        except OSError as exc:
            return exc

    def _on_readable(self) -> None:
        block = self._read()
        if isinstance(block, BlockingIOError):
            return  # a descriptor someone else made non-blocking, and nothing after all
        self._blocks.append(block)
        if not isinstance(block, bytes) or not block or len(self._blocks) >= self._blocks_max:
            self._watch(False)  # the end, or enough waiting: next_lines() resumes it
        if self._arrived is not None and not self._arrived.done():
            self._arrived.set_result(None)

    async def next_lines(self) -> list[bytes] | None:
        """The lines that arrived since the last call, waiting until at least one whole line
        (or the end of input) is there; ``None`` at the end of input.

        Raises:
            LineTooLongError: a line passed ``line_bytes_max`` bytes.
            OSError: reading failed (the error of ``os.read``).
        """
        assert self._loop is not None, "start() first"
        if self._error is not None:
            raise self._error
        while not self._ended:
            taken: list[bytes] = []
            size = 0
            while not self._ended and size < TAKE_BYTES_MAX:
                if not self._blocks and taken:
                    break  # take what has arrived; do not wait for more
                block = await self._take()
                taken.append(block)
                size += len(block)
                if not block:
                    self._ended = True
            self.bytes_read += size
            lines = self._split(taken)
            if lines:
                return lines
            if self._error is not None:
                raise self._error
        return None

    async def _take(self) -> bytes:
        """The next block, waiting for one; ``b""`` at the end of input."""
        if self._regular:
            block = self._read()
        else:
            while not self._blocks:
                self._arrived = self._loop.create_future()  # type: ignore[union-attr]
                try:
                    await self._arrived
                finally:
                    self._arrived = None
            block = self._blocks.popleft()
            if isinstance(block, bytes) and block:
                self._watch(True)  # room again (a no-op while watching)
        if isinstance(block, OSError):
            self._ended = True
            raise block
        return block

    def _too_long(self, size: int) -> str:
        return (f"line {self.lines_read + 1} is longer than {self._line_bytes_max} bytes "
                f"({size} bytes and no end yet)")

    def _split(self, taken: list[bytes]) -> list[bytes]:
        """The whole lines of the partial line followed by ``taken`` (all of them at the end
        of input); what follows the last ``\\n`` stays partial."""
        data = b"".join(taken)
        end = data.rfind(b"\n")
        if end < 0 and not self._ended:
            self._partial.append(data)
            self._partial_bytes += len(data)
            if self._partial_bytes > self._line_bytes_max:
                raise LineTooLongError(self._too_long(self._partial_bytes))
            return []
        if self._partial:
            data = b"".join(self._partial) + data
            end = data.rfind(b"\n")
            self._partial.clear()
            self._partial_bytes = 0
        if self._ended:
            if not data:
                return []
            complete, rest = (data[:-1] if data.endswith(b"\n") else data), b""
        else:
            complete, rest = data[:end], data[end + 1:]
        lines = complete.split(b"\n")
        if b"\r" in complete:
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        if len(complete) > self._line_bytes_max:  # only then can one line be too long
            for index, line in enumerate(lines):
                if len(line) > self._line_bytes_max:
                    raise LineTooLongError(
                        f"line {self.lines_read + 1 + index} is longer than "
                        f"{self._line_bytes_max} bytes ({len(line)} bytes)"
                    )
        self.lines_read += len(lines)
        if rest:
            self._partial.append(rest)
            self._partial_bytes = len(rest)
            if self._partial_bytes > self._line_bytes_max:
                # The lines before it go out first; the next call raises.
                self._error = LineTooLongError(self._too_long(self._partial_bytes))
        return lines
