"""Kafka's request framing, sans-IO: a byte stream in, whole request frames out.

Format (Kafka's protocol guide, ``clients/src/main/java/org/apache/kafka/common/network/
NetworkReceive.java``): every request is ``int32 size`` followed by ``size`` bytes, the request
header then the body. A size below :data:`REQUEST_HEADER_BYTES_MIN` cannot hold a header; one
above ``request_bytes_max`` is refused before a byte of it is buffered (Kafka's
``socket.request.max.bytes``: ``InvalidReceiveException``, and the connection is closed).

:class:`FrameReader` buffers at most one frame's body plus what arrived with it (one read of
the socket). The caller is told the size of the next frame as soon as its prefix is in
(:attr:`FrameReader.pending_size`), so that it can reserve that many bytes of a server-wide
budget before the body is read (Kafka's ``queued.max.request.bytes`` memory pool): until then
it stops reading the socket.

Concurrency: none; one reader per connection.
"""

from __future__ import annotations

import struct

__all__ = ["REQUEST_HEADER_BYTES_MIN", "FrameError", "FrameReader", "frame_size_prefix"]

#: api_key (int16) + api_version (int16) + correlation_id (int32) + client_id length (int16).
REQUEST_HEADER_BYTES_MIN = 10

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The stream is not Kafka's framing (a size out of bounds): the connection must close."""


def frame_size_prefix(size: int) -> bytes:
    """The 4-byte size prefix of a frame of ``size`` bytes."""
    return _SIZE.pack(size)


class FrameReader:
    """Splits a byte stream into request frames (module docstring).

    ``feed`` takes what the socket gave; ``next_frame`` returns the next whole frame (its bytes
    after the size prefix) or None. Invariant: ``_buffer`` holds no whole frame that
    ``next_frame`` would not return, and at most one frame's prefix has been parsed.
    """

    __slots__ = ("_buffer", "_start", "pending_size", "request_bytes_max")

    def __init__(self, request_bytes_max: int) -> None:
        self.request_bytes_max = request_bytes_max
        self._buffer = bytearray()
        self._start = 0
        #: The size of the frame whose prefix was read and whose body is not all in yet.
        self.pending_size: int | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer) - self._start

    def feed(self, data: bytes) -> None:
        if self._start and self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        self._buffer += data

    def next_size(self) -> int | None:
        """The size of the next frame once its prefix is in (None before).

        Raises:
            FrameError: the size is out of bounds.
        """
        if self.pending_size is not None:
            return self.pending_size
        if len(self._buffer) - self._start < 4:
            return None
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        if size < REQUEST_HEADER_BYTES_MIN:
            raise FrameError(
                f"a request of {size} bytes cannot hold a request header (at least "
                f"{REQUEST_HEADER_BYTES_MIN}): this is not Kafka's protocol"
            )
        if size > self.request_bytes_max:
            raise FrameError(
                f"a request of {size} bytes is larger than kafka_request_bytes_max "
                f"({self.request_bytes_max}; Kafka's socket.request.max.bytes)"
            )
        self._start += 4
        self.pending_size = size
        return size

    def next_frame(self) -> bytes | None:
        """The next whole frame's bytes (a copy: the buffer is reused), or None."""
        size = self.next_size()
        if size is None or len(self._buffer) - self._start < size:
            return None
        start = self._start
        with memoryview(self._buffer) as view:  # one copy, and the buffer may grow again after
            frame = bytes(view[start:start + size])
        self._start = start + size
        self.pending_size = None
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        elif self._start > 1 << 16:
            # Keep the unread tail only: a long pipeline of small requests must not grow it.
            del self._buffer[:self._start]
            self._start = 0
        return frame
