"""An index file opened on first use: Kafka's ``LazyIndex``.

A partition of 10,000 segments opens 10,000 ``.log`` files when it loads, but reads rarely touch
the indexes of more than the active segment and a few others: mapping every ``.index`` and
``.timeindex`` and probing every ``.txnindex`` up front makes loading slow (KAFKA-7283). A
:class:`LazyIndex` holds the file's name and how to open it (a function and its arguments after
the path); :meth:`LazyIndex.get` opens it the first time, and the file operations a segment makes on all of its
files (rename, close, delete) act on the file alone while the index is not loaded.

One class serves the three indexes of a segment::

    LazyIndex(directory, "00000000000000000100.index", OffsetIndex, (100, max_index_size_bytes))

Concurrency: :meth:`~LazyIndex.get` is thread-safe: two racing first uses open one index, not
two (a double-checked lock; KAFKA-9156 was the race that mapped one file twice). The other
methods are the segment's single writer's. :meth:`~LazyIndex.rename_to` and
:meth:`~LazyIndex.delete_if_exists` take the same lock, so that a reader's first use never
opens the file under a name being changed or deleted; close does not need it (no read of the
segment overlaps its close). A segment's three indexes share one lock.

Crash behaviour: nothing of its own; the index classes say what their files hold after a crash.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from .errors import StorageIOError

__all__ = ["IndexFile", "LazyIndex"]


class IndexFile(Protocol):
    """What a :class:`LazyIndex` needs of the index it opens (the index classes have it)."""

    @property
    def path(self) -> Path: ...

    def rename_to(self, path: Path | str) -> None: ...

    def close(self) -> None: ...

    def delete_if_exists(self) -> bool: ...


IndexT = TypeVar("IndexT", bound=IndexFile)


class LazyIndex(Generic[IndexT]):
    """The index file ``directory / name``, opened by ``open_index(path, *args)`` on first use.

    Holds the directory, the file name (its path is built on first use too: most segments'
    index paths are never needed), how to open the index, and the index once open. No object
    of its own beyond that (no closure): a log of 10,000 segments holds 30,000 of these, and
    every object is one more for the garbage collector to visit. Invariant: while loaded,
    :attr:`path` is the index's own path.
    """

    __slots__ = ("_args", "_directory", "_lock", "_name", "_open_index", "_path", "loaded")

    def __init__(
        self,
        directory: Path,
        name: str,
        open_index: Callable[..., IndexT],
        args: tuple[object, ...] = (),
        lock: threading.Lock | None = None,
    ) -> None:
        """``lock``: a lock to share (a segment's three indexes share one), else a new one."""
        self._directory = directory
        self._name = name
        self._path: Path | None = None
        self._open_index = open_index
        self._args = args
        # The index once opened, None before: read it (never set it) for the cost of an
        # attribute where a call to get() costs a call, as the segment's read path does.
        self.loaded: IndexT | None = None
        self._lock = threading.Lock() if lock is None else lock

    @property
    def path(self) -> Path:
        """The index file's path (whether the file exists or not)."""
        path = self._path
        if path is None:
            path = self._directory / self._name
            self._path = path
        return path

    @property
    def is_loaded(self) -> bool:
        return self.loaded is not None

    def get(self) -> IndexT:
        """The index, opened (for a new offset or time index: created, preallocated) on the
        first call. Thread-safe."""
        index = self.loaded
        if index is None:
            with self._lock:
                index = self.loaded
                if index is None:
                    index = self._open_index(self.path, *self._args)
                    self.loaded = index
        return index

    def rename_to(self, path: Path) -> None:
        """Rename the file to ``path``: through the index if loaded, else the file alone (a
        file never created is not an error, Kafka LazyIndex.renameTo;
        docs/kafka-behaviours.md#index-files-mechanics). The new path holds even if the rename
        fails, as in Kafka, so that a later delete acts on the name the caller meant.

        Raises:
            StorageIOError: the rename failed.
        """
        with self._lock:
            index = self.loaded
            try:
                if index is not None:
                    index.rename_to(path)
                else:
                    old_path = self.path
                    try:
                        os.replace(old_path, path)
                    except OSError as exc:
                        # A file never created: nothing to rename. (The stat only on failure:
                        # a missing target directory is an ENOENT too.)
                        if not (isinstance(exc, FileNotFoundError) and not old_path.exists()):
                            raise StorageIOError(
                                f"failed to rename index file {old_path} to {path}: {exc}"
                            ) from exc
            finally:
                self._path = path
                self._name = path.name
                self._directory = path.parent

    def close(self) -> None:
        """Close the index (which trims a mapped one) if loaded; else nothing.

        Like every method but :meth:`get`, for the writer, which no first use overlaps then
        (the segment's reads do not overlap its close).
        """
        index = self.loaded
        if index is not None:
            index.close()

    def unload(self) -> None:
        """Close the index if loaded and forget it: the next :meth:`get` opens the file again
        (an inactive segment's files closed to save descriptors). The index is closed by
        :meth:`close`, which trims it to its entries (nothing to do for an index trimmed when
        its segment became inactive), so that a reopen counts no preallocated slot as an entry.

        Raises:
            StorageIOError: the trim failed; the index stays loaded and open.
        """
        with self._lock:
            index = self.loaded
            if index is None:
                return
            index.close()
            self.loaded = None

    def close_handler(self) -> None:
        """Close the index without writing to it, if loaded (Kafka's ``closeHandler``; an index
        with nothing to write on close, the transaction index, is simply closed)."""
        index = self.loaded
        if index is not None:
            close_handler = getattr(index, "close_handler", None)
            (close_handler or index.close)()

    def delete_if_exists(self) -> bool:
        """Close and delete the file (through the index if loaded); True if this call deleted it.

        Raises:
            StorageIOError: the file exists and could not be deleted.
        """
        with self._lock:
            if self.loaded is not None:
                return self.loaded.delete_if_exists()
            path = self.path
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise StorageIOError(f"failed to delete index file {path}: {exc}") from exc
            return True

    def __repr__(self) -> str:
        state = "loaded" if self.loaded is not None else "not loaded"
        return f"LazyIndex({str(self.path)!r}, {state})"
