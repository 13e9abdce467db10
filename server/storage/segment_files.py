"""A segment's four files and the users that hold them open: the base of :class:`Segment`.

A segment's files are its ``.log`` (:class:`~stratalog.server.storage.log_file.LogFile`) and its
three indexes, each opened on first use
(:class:`~stratalog.server.storage.lazy_index.LazyIndex`), all named after the segment's base
offset (20 digits) and a suffix that marks a file in a swap or a deletion::

    00000000000000000100.log[.deleted]        LogFile
    00000000000000000100.index[.deleted]      OffsetIndex     (created on first use)
    00000000000000000100.timeindex[.deleted]  TimeIndex       (created on first use)
    00000000000000000100.txnindex[.deleted]   TransactionIndex (only if ever appended to)

Kafka keeps every segment's files open for the life of the log; here only the active segment's
always are, and the :class:`~stratalog.server.storage.open_segments.OpenSegments` cache closes
the files of inactive segments beyond its capacity (``open_segments.py`` says why). This module
is what makes that safe: the count of the users of a segment's files, which the cache's close
checks and every use of the files takes (:class:`SegmentFiles`), and the renames, deletion and
closing on a failed disk that act on the four files together. What a segment does with its
files (appends, reads, recovery, the roll decision) is its subclass's,
:class:`~stratalog.server.storage.segment.Segment`: the read path counts its users inline, with
no call to this module in between.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Concatenate, ParamSpec, Self, TypeVar

from stratalog.records.log_layout import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    filename_prefix_from_offset,
)

from .config import LogConfig
from .errors import LogClosedError, StorageError, StorageIOError
from .lazy_index import LazyIndex
from .log_file import LogFile
from .offset_index import OffsetIndex
from .open_segments import OpenSegments
from .time_index import TimeIndex
from .txn_index import TransactionIndex

__all__ = ["SegmentFiles", "using_files"]

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_P = ParamSpec("_P")
_Files = TypeVar("_Files", bound="SegmentFiles")


def using_files(method: Callable[Concatenate[_Files, _P], _T]) -> Callable[
    Concatenate[_Files, _P], _T
]:
    """Hold the segment (its files open) for the call: :meth:`SegmentFiles.pinned` as a
    decorator, for the methods off the read path (those on it count themselves inline, a call
    less)."""

    @functools.wraps(method)
    def using_files(self: _Files, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        users = self._users
        self._pin()
        try:
            return method(self, *args, **kwargs)
        finally:
            users.pop()

    return using_files


class SegmentFiles:
    """The ``.log`` and the three lazily opened indexes of one segment, and who holds them open.

    Holds: the base offset (which names the files); the :class:`LogFile` (descriptor, path,
    published size); the three :class:`LazyIndex` (one lock for the three: a reader's first use
    of one waits for a rename of another); the users counted; whether the segment is active,
    its files closed by the cache, or closed for good; the lock that guards opening, closing and
    renaming the files; the cache that may close them.

    Open files: an inactive segment given an :class:`OpenSegments` cache may have its files
    closed by it (:meth:`try_close_files`) to save descriptors; the object stays, with
    everything it knows (size, max timestamp, roll state), and its files are reopened by the
    next use. Every method that uses the files holds the segment for the duration of the call:
    a *reference count* of users (a list that each use appends to and pops from: both atomic
    under the GIL, ~0.1 µs a use, no lock), which :meth:`try_close_files` checks after raising
    a flag that users check after counting themselves, so that either the closer sees the user
    and gives up, or the user sees the flag and waits on the segment's lock for the close to
    finish, then reopens. No file is ever closed under a reader. The active segment holds one
    count for as long as it is active (:meth:`activate`), so its files never close: every
    append and the reads at the end of the log find them open. Its indexes are preallocated
    and untrimmed, which a close and a reopen would misread (trimmed by
    :meth:`Segment.on_become_inactive`, before the count is released). The index objects
    (:attr:`offset_index`, :attr:`time_index`, :attr:`txn_index`) are only to be used inside
    :meth:`pinned`, or on the active segment.

    Invariants: a segment closed for good (:meth:`close_handlers`, :meth:`delete`, or the
    subclass's ``close``) never reopens its files; no file is closed while ``_users`` is not
    empty; the active segment is never in the cache.

    Crash behaviour: nothing of its own beyond the files': closing (by the cache) trims each
    index to its entries (already so for an inactive segment's) and unmaps it, whose pages stay
    in the page cache, and holds no unwritten state; a rename is atomic and
    leaves each file under its old or its new name (the loader resolves a half-renamed
    segment, ``recovery.py``).

    Concurrency: counting a user and the cache's :meth:`try_close_files` may run in any
    threads at once (see above); :meth:`activate`, the renames and the closes are the
    writer's (the owning log serialises them). :meth:`try_close_files` never waits for the
    files' lock, and nothing here calls the cache while holding it, so the two cannot deadlock.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        create: bool,
        file_suffix: str,
        open_segments: OpenSegments | None,
        active: bool,
    ) -> None:
        """Open (``create``: create, preallocated to ``segment.bytes`` when ``preallocate`` is
        set) the ``.log``; the indexes are opened on first use. The segment joins
        ``open_segments`` unless ``active``, in which case it holds one count of users until
        it is no longer active.

        Raises:
            StorageIOError: the ``.log`` is missing (or present, when creating), cannot be
                opened, or is longer than a segment can be.
        """
        stem = filename_prefix_from_offset(base_offset)
        self._base_offset = base_offset
        # A plain string for os.open: LogFile builds its Path only if asked for it.
        preallocate = config.preallocate
        self._log = LogFile.open(
            f"{directory}{os.sep}{stem}{LOG_FILE_SUFFIX}{file_suffix}",
            create,
            config.init_file_size if create and preallocate else 0,
            # A file sized to segment.bytes in advance needs no allocation per append.
            not preallocate,
        )
        # The indexes are opened on first use: loading a log of 10,000 segments opens none.
        # One lock for the three: a reader's first use of one waits for a rename of another.
        lock = threading.Lock()
        index_args = (base_offset, config.segment_index_bytes)
        self._offset_index = LazyIndex(
            directory, f"{stem}{INDEX_FILE_SUFFIX}{file_suffix}", OffsetIndex, index_args, lock
        )
        self._time_index = LazyIndex(
            directory, f"{stem}{TIME_INDEX_FILE_SUFFIX}{file_suffix}", TimeIndex, index_args, lock
        )
        self._txn_index = LazyIndex(
            directory,
            f"{stem}{TXN_INDEX_FILE_SUFFIX}{file_suffix}",
            TransactionIndex,
            (base_offset,),
            lock,
        )
        # The users holding the files open (one item each; the active segment holds one for
        # as long as it is active): see the class docstring.
        self._users: list[None] = [None] if active else []
        self._active = active
        # Raised by try_close_files before it looks at the users, and left raised while the
        # files are closed: a user who sees it takes the lock and reopens them.
        self._files_closed = False
        self._closed = False  # closed for good (close, delete): no reopening
        # Guards opening and closing the files (and renames, which a reopen must not overlap).
        self._files_lock = threading.Lock()
        self.referenced = True  # set by every use; cleared by the cache's hand (CLOCK)
        self._open_segments = open_segments
        if open_segments is not None and not active:
            open_segments.add(self)

    # ---------------------------------------------------------------- open files

    def _pin(self) -> None:
        """Count one more user of the files, reopening them if the cache closed them. The
        caller pops ``self._users`` when done (in a ``finally``)."""
        users = self._users
        users.append(None)
        self.referenced = True
        if self._files_closed:
            users.pop()
            self._pin_reopening()

    def _pin_reopening(self) -> None:
        """:meth:`_pin`'s slow path: wait for a close under way, reopen, count the user."""
        with self._files_lock:
            if self._closed:
                raise LogClosedError(f"segment {self._log.path} is closed")
            reopened = self._log.is_closed
            if reopened:
                self._log.reopen()
            self._users.append(None)
            self._files_closed = False
        # Outside the lock: the cache may close other segments (taking their locks).
        if reopened and self._open_segments is not None and not self._active:
            self._open_segments.add(self)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[Self]:
        """Hold the segment's files open for the block (reopening them if they were closed):
        the index objects are only to be used inside one, unless the segment is active."""
        self._pin()
        try:
            yield self
        finally:
            self._users.pop()

    @property
    def files_open(self) -> bool:
        """Whether the ``.log`` is open now (False after the cache closed it, or after close)."""
        return not self._log.is_closed

    @property
    def is_active(self) -> bool:
        return self._active

    def activate(self) -> None:
        """This segment takes the appends from now on: its files are opened if closed and stay
        open until :meth:`on_become_inactive` (it leaves the cache). Idempotent. Writer only.

        Raises:
            StorageIOError: a closed file could not be reopened. LogClosedError: closed.
        """
        if self._active:
            return
        self._pin()  # held while active: the cache never closes a segment in use
        self._active = True
        if self._open_segments is not None:
            self._open_segments.remove(self)

    def try_close_files(self) -> bool:
        """Close the files unless the segment is in use (a user counted, or the active
        segment); True when they are closed on return. Never waits: a segment whose lock is
        held (a reopen, a rename) is in use. Called by the :class:`OpenSegments` cache.

        An index is closed by trimming it to its entries (a no-op for an inactive segment's,
        trimmed when it stopped being active) so that a reopen counts no preallocated slot.
        """
        if not self._files_lock.acquire(blocking=False):
            return False
        try:
            if self._closed or self._log.is_closed:
                return True
            self._files_closed = True
            if self._users:
                self._files_closed = False
                return False
            try:
                for index in (self._offset_index, self._time_index, self._txn_index):
                    index.unload()
            except StorageError:
                # An index that would not trim stays open (a reopen would misread it); the
                # others are closed, and the next use reopens them.
                log.warning("keeping the files of segment %s open", self._log.path,
                            exc_info=True)
                self._files_closed = False
                return False
            self._log.close_handler()
            return True
        finally:
            self._files_lock.release()

    # ---------------------------------------------------------------- the files

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def log_path(self) -> Path:
        return self._log.path

    @property
    def offset_index_path(self) -> Path:
        return self._offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self._time_index.path

    @property
    def txn_index_path(self) -> Path:
        return self._txn_index.path

    @property
    def is_closed(self) -> bool:
        """Closed for good (:meth:`close`, :meth:`delete`); not the cache closing the files."""
        return self._closed

    @property
    def offset_index(self) -> OffsetIndex:
        """The offset index, opened (and created, preallocated) on first use. Inside
        :meth:`pinned` only, unless the segment is active (as the other two)."""
        return self._offset_index.loaded or self._offset_index.get()

    @property
    def time_index(self) -> TimeIndex:
        """The time index, opened (and created, preallocated) on first use."""
        return self._time_index.loaded or self._time_index.get()

    @property
    def txn_index(self) -> TransactionIndex:
        """The transaction index, opened on first use (its file is created on first append)."""
        return self._txn_index.loaded or self._txn_index.get()

    @property
    def indexes_loaded(self) -> tuple[bool, bool]:
        """Whether the offset and time indexes are open (for tests of laziness)."""
        return self._offset_index.is_loaded, self._time_index.is_loaded


    @property
    def last_modified_ms(self) -> int:
        """The ``.log`` file's modification time in ms."""
        path = self._log.path
        try:
            return os.stat(path).st_mtime_ns // 1_000_000
        except OSError as exc:
            raise StorageIOError(f"failed to stat segment file {path}: {exc}") from exc

    def set_last_modified_ms(self, timestamp_ms: int) -> None:
        """Set the modification time of the ``.log`` and index files (tests, retention)."""
        nanoseconds = timestamp_ms * 1_000_000
        for path in (self._log.path, self._offset_index.path, self._time_index.path):
            if path.exists():
                os.utime(path, ns=(nanoseconds, nanoseconds))

    # ---------------------------------------------------------------- closing, deleting, renaming

    def close_handlers(self) -> None:
        """Close the files without writing anything (the disk may have failed), for good."""
        with self._files_lock:
            self._closed = self._files_closed = True
            for index in (self._offset_index, self._time_index, self._txn_index):
                try:
                    index.close_handler()
                except Exception:
                    log.warning("could not close %s", index.path, exc_info=True)
            self._log.close_handler()
        if self._open_segments is not None:
            self._open_segments.remove(self)

    def delete(self) -> None:
        """Close the files and delete the four of them (missing ones are fine), for good."""
        with self._files_lock:
            self._closed = self._files_closed = True
            try:
                self._log.delete()
                for index in (self._offset_index, self._time_index, self._txn_index):
                    index.delete_if_exists()
            finally:
                if self._open_segments is not None:
                    self._open_segments.remove(self)

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename the segment's files from ``<name><old_suffix>`` to ``<name><new_suffix>``.

        Used to mark a segment ``.deleted`` before its asynchronous deletion. Index files that
        were never created are not an error (Kafka LazyIndex.renameTo;
        docs/kafka-behaviours.md#index-files-mechanics). Open descriptors stay valid.

        Raises:
            ValueError: a file name does not end with ``old_suffix``.
            StorageIOError: a rename failed.
        """

        def renamed(path: Path) -> Path:
            name = path.name
            if old_suffix and not name.endswith(old_suffix):
                raise ValueError(f"{path} does not end with {old_suffix!r}")
            stem = name[: len(name) - len(old_suffix)] if old_suffix else name
            return path.with_name(stem + new_suffix)

        # Under the files' lock: a reopen must not open the old name of a file just renamed.
        with self._files_lock:
            self._log.rename_to(renamed(self._log.path))
            for index in (self._offset_index, self._time_index, self._txn_index):
                index.rename_to(renamed(index.path))
