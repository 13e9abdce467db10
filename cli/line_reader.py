"""Lines of a file descriptor, handed to the event loop as they arrive: ``stratalog produce``'s
input.

Intuition: a producer fed by a person at a terminal, or by ``tail -f app.log``, must send each
line when it comes, not when a chunk of ten thousand lines has filled up or the input has ended;
a producer fed by ``seq 1 1000000`` must still read in large blocks. Both hold when one thread
does blocking ``os.read(fd, read_bytes_max)`` calls, each of which returns *whatever is there*
(a typed line from a terminal, what a pipe holds, up to ``read_bytes_max`` of a file), and the
event loop takes every block that has arrived at once and splits it into lines.

Format: a line ends at ``\\n``; a ``\\r`` before it is dropped too (``\\r\\n`` input), as Kafka's
console producer's ``BufferedReader.readLine``. The last line needs no ``\\n``. Lines are
returned without their ending, as ``bytes``, in input order.

Limits (why memory stays bounded whatever the input): the thread reads a block only when it holds
one of ``blocks_max`` credits, and the event loop gives a credit back for each block it takes;
so at most ``blocks_max * read_bytes_max`` bytes wait between the two. A line that grows past
``line_bytes_max`` without an end raises :class:`LineTooLongError` instead of being held.

Crash behaviour: nothing is written; input read but not yet taken is lost with the process,
as any reader's buffer is.

Concurrency: :meth:`LineReader.start` and :meth:`LineReader.next_lines` are event-loop only (one
consumer). The reading thread is a daemon and touches only the descriptor, the credits and
``loop.call_soon_threadsafe``: a command that stops while the thread waits in ``read`` (a
terminal where nobody types) exits without joining it. The descriptor is not closed here.
"""

from __future__ import annotations

import asyncio
import os
import threading

__all__ = ["LineReader", "LineTooLongError"]

#: Bytes asked of one ``os.read`` (a pipe gives at most what it holds, 64 KiB on Linux).
READ_BYTES_MAX = 1 << 20
#: Blocks read ahead of the event loop at most.
BLOCKS_MAX = 8
#: Bytes of lines :meth:`LineReader.next_lines` returns at once, about (it stops taking blocks
#: past this, so that one call never splits all ``BLOCKS_MAX`` blocks while records wait).
TAKE_BYTES_MAX = 1 << 20


class LineTooLongError(ValueError):
    """A line longer than the reader's ``line_bytes_max``: named by number and bytes."""


class LineReader:
    """Reads ``fd`` in a daemon thread; :meth:`next_lines` returns the lines that have arrived.

    Holds the partial line at the end of what was read (as a list of blocks, joined when its
    end comes), the count of lines and bytes returned, and the queue of blocks from the thread.
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
        self._credits = threading.Semaphore(blocks_max)
        self._blocks: asyncio.Queue[bytes | OSError] | None = None
        self._partial: list[bytes] = []  # the start of a line whose end has not come yet
        self._partial_bytes = 0
        self._ended = False
        self._error: LineTooLongError | None = None  # raised by the next next_lines()
        #: Lines returned so far (the number of the last line returned).
        self.lines_read = 0
        #: Bytes taken from the thread so far (for a progress bar).
        self.bytes_read = 0

    def start(self) -> None:
        """Start the reading thread (on the running event loop)."""
        assert self._blocks is None, "started twice"
        loop = asyncio.get_running_loop()
        self._blocks = asyncio.Queue()
        threading.Thread(
            target=self._read_blocks, args=(loop, self._blocks), name="stratalog-line-reader",
            daemon=True,
        ).start()

    def _read_blocks(self, loop: asyncio.AbstractEventLoop, blocks: asyncio.Queue) -> None:
        """The thread: read blocks until end of input (``b""``) or an error, each handed over
        with ``call_soon_threadsafe``; stop when the loop is closed."""
        while True:
            self._credits.acquire()
            try:
                block: bytes | OSError = os.read(self._fd, self._read_bytes_max)
            except OSError as exc:
                block = exc
            try:
                loop.call_soon_threadsafe(blocks.put_nowait, block)
            except RuntimeError:  # the loop is closed: the command is over
                return
            if not isinstance(block, bytes) or not block:
                return

    async def next_lines(self) -> list[bytes] | None:
        """The lines that arrived since the last call, waiting until at least one whole line
        (or the end of input) is there; ``None`` at the end of input.

        Raises:
            LineTooLongError: a line passed ``line_bytes_max`` bytes.
            OSError: reading failed (the error of ``os.read``).
        """
        blocks = self._blocks
        assert blocks is not None, "start() first"
        if self._error is not None:
            raise self._error
        while not self._ended:
            block = await self._take(blocks)
            taken = [block]
            size = len(block)
            while block and size < TAKE_BYTES_MAX and not blocks.empty():
                block = await self._take(blocks)
                taken.append(block)
                size += len(block)
            self.bytes_read += size
            if not block:
                self._ended = True
            lines = self._split(taken)
            if lines:
                return lines
            if self._error is not None:
                raise self._error
        return None

    async def _take(self, blocks: asyncio.Queue) -> bytes:
        block = await blocks.get()
        self._credits.release()
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
