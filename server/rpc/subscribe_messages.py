"""Subscribe messages shared by the streams that send them: a batch read once per reading.

Intuition: the subscribers of one partition that follow its end all wake on the same append and
read the same batches from the same offset. Each used to read them, build a FetchResponse and
serialize its own copy: one message of 960 KiB to 1,000 streams cost 1,000 reads and
serializations, and 1,000 copies beside gRPC's own 1,000 while gRPC waited for the clients
(issue 24, finding 10). gRPC needs a copy per call (it copies the bytes a write gives it into its
own buffers, and keeps a reference to them until the write completes); the bytes it is given can
be one object for every stream. :class:`SharedMessages` keeps, per *reading*, the message the
first stream builds, and the streams that make the same reading while it is built or sent wait
for it and send the same bytes object.

A reading is the key (``topic, partition, offset, lease bytes, format, isolation level,
signal``): the ``signal`` is the partition's append event the stream took *before* it read, so
two streams share a message only if no append (nor marker) came between their reads' starts, and
a message read later than the other would have been is a valid answer for it too (a later read,
as if the stream had come a moment later). Streams that report a timestamp match in their first
message never share.

Lifetime: an entry lives while a stream holds it, from :meth:`SharedMessages.join` until
:meth:`Share.release` (the stream's write returned, or it ended): nothing is kept for readers
to come, so no message outlives its last sender and nothing is held that is not being sent.

Failure: if the stream building the message fails or is cancelled, the streams waiting for it
read for themselves (:meth:`Share.wait` returns None), as they would have.

Invariants (:meth:`SharedMessages.check`): every entry has at least one holder; an entry's
message, once published, never changes.

Concurrency: event-loop only; every method is O(1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import NamedTuple

__all__ = ["Built", "Share", "SharedMessages"]


class Built(NamedTuple):
    """A Subscribe message built from one reading: the serialized message (None when there is
    nothing to send), the offset to read next, whether anything was read at all, and the
    records and bytes it carries (for the metrics of every stream that sends it)."""

    message: bytes | None
    next_offset: int
    read_any: bool
    records_out: int
    bytes_out: int


class _Entry:
    __slots__ = ("built", "holders")

    def __init__(self, built: asyncio.Future[Built | None]) -> None:
        self.built = built
        self.holders = 1


class Share:
    """One stream's part in a reading: whether it builds the message (``builder``), and its
    hold on the entry until :meth:`release`."""

    __slots__ = ("_entry", "_key", "_messages", "builder")

    def __init__(self, messages: SharedMessages, key: Hashable, entry: _Entry,
                 builder: bool) -> None:
        self._messages: SharedMessages | None = messages
        self._key = key
        self._entry = entry
        self.builder = builder

    async def wait(self) -> Built | None:
        """The message the builder built (not the builder's to call); None when the builder
        failed or was cancelled: read for yourself then. A cancellation of the caller does not
        reach the builder."""
        assert not self.builder
        return await asyncio.shield(self._entry.built)

    def publish(self, built: Built) -> None:
        """The builder's message, for every stream of the reading."""
        assert self.builder
        if not self._entry.built.done():
            self._entry.built.set_result(built)

    def release(self) -> None:
        """The stream is done with the message (its write returned, or it ended); the entry
        goes with its last holder. A builder that never published lets the waiting streams
        read for themselves. Later calls do nothing."""
        messages, self._messages = self._messages, None
        if messages is None:
            return
        entry = self._entry
        if self.builder and not entry.built.done():
            entry.built.set_result(None)
        entry.holders -= 1
        if not entry.holders and messages.entries.get(self._key) is entry:
            del messages.entries[self._key]


class SharedMessages:
    """The readings whose messages are being built or sent, by key. Event-loop only."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, _Entry] = {}

    def join(self, key: Hashable) -> Share:
        """A hold on the reading ``key``: the first stream builds its message, the others wait
        for it (:class:`Share`)."""
        entry = self.entries.get(key)
        if entry is None:
            entry = self.entries[key] = _Entry(asyncio.get_running_loop().create_future())
            return Share(self, key, entry, builder=True)
        entry.holders += 1
        return Share(self, key, entry, builder=False)

    def check(self) -> None:
        """Assert the invariants of the module docstring (for tests)."""
        for entry in self.entries.values():
            assert entry.holders >= 1, entry.holders
