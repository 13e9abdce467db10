"""The ACL file: every ACL binding of the server, in one small file replaced atomically.

Kafka keeps ACLs in its metadata log (KRaft) or in ZooKeeper; a single stratalog server keeps
them in ``acls.json`` in a log directory, rewritten whole on every change through
:func:`~stratalog.server.storage.durable.atomic_write` (write ``acls.json.tmp``, fsync, rename,
fsync the directory), as the checkpoints are. Format, UTF-8 JSON::

    {
      "version": 1,
      "acls": [
        {"resource_type": "TOPIC", "resource_name": "orders-", "pattern_type": "PREFIXED",
         "principal": "User:alice", "host": "*", "operation": "READ",
         "permission_type": "ALLOW"},
        ...
      ]
    }

Enum values are the names of :mod:`.acls`'s enums (broker.proto's without their prefix), in
the order the bindings were created. The file is small: ``acl_bindings_max`` bindings of at
most a few hundred bytes each.

Which directory: the one log directory that holds ``acls.json``, or the first of ``log_dirs``
for a server that has none yet (as ``__transaction_state`` is placed). The LogManager has locked
every log directory before the store opens, so no second server writes the file. Two
directories holding one each is refused at start: which set applies would be a guess.

A missing file: a server that has never run (no log directory holds ``meta.properties`` yet)
starts with no ACLs and writes an empty file at once, so that from then on the file's absence
means it was lost. A server that has run before and finds no file refuses to start, naming the
directories it looked in: starting empty would silently drop every ACL, and with
``allow_everyone_if_no_acl_found`` every DENY with them (a deleted file, a log directory not
mounted). ``acl_file_create_if_missing = true`` starts it empty all the same (turning the
authorizer on for an existing server's data, or on purpose after a loss); Kafka has no such
case, its ACLs live in its metadata log (docs/security.md, "Authorization").

Crash behaviour: a crash at any point of a write leaves the old file or the new one, complete
(durable.py's steps); a stray ``acls.json.tmp`` is ignored and overwritten by the next write. A
file that does not parse, has an unknown version or holds an invalid binding stops the server
at start with a message naming the file and the entry (it is never "repaired": dropping an ACL
would silently open or close access). An update whose write failed leaves the file and the
authorizer's bindings as they were.

In cluster mode the ACLs are the cluster's, in etcd (server/cluster/cluster_acls.py, the same
document under ``<prefix>/acls``), and this file is not read for decisions: a node's file is
imported into etcd when etcd holds no ACLs yet, then set aside as ``acls.json.imported``
(:meth:`AclStore.set_aside`); docs/security.md, "ACLs in a cluster".

Both stores are an :class:`AclStorage`: the authorizer reads ``bindings`` and ``revision`` and
changes the set only through :meth:`AclStorage.update`.

Concurrency: not thread-safe. :meth:`AclStore.write` and :meth:`AclStore.open` are blocking
(file I/O): call from an executor (:meth:`AclStore.update` does). The authorizer serialises its
updates (one write at a time) and only then swaps its in-memory set.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Protocol

from stratalog.server.storage.durable import atomic_write, fsync_directory

from .acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from .errors import InvalidAclError, SecurityConfigError

__all__ = [
    "ACL_FILE_NAME",
    "FORMAT_VERSION",
    "IMPORTED_SUFFIX",
    "AclChange",
    "AclStorage",
    "AclStore",
    "decode_acls",
    "encode_acls",
]

logger = logging.getLogger(__name__)

#: The file's name in its log directory.
ACL_FILE_NAME = "acls.json"
#: The ``version`` this code writes and the only one it reads.
FORMAT_VERSION = 1
#: Appended to the file's name once its ACLs were imported into a cluster's etcd.
IMPORTED_SUFFIX = ".imported"

#: An update of the ACLs: the bindings in force in, the new set out (None: no change). It may
#: raise (a limit) to refuse the update; it may be called again with a newer set when another
#: server changed the ACLs meanwhile (etcd), so it must not act beyond returning.
AclChange = Callable[[tuple[AclBinding, ...]], Sequence[AclBinding] | None]


class AclStorage(Protocol):
    """Where the ACLs in force are kept: :class:`AclStore` (a server's file) or the cluster's
    etcd key (server/cluster/cluster_acls.py). ``bindings`` is the set the storage held when
    last read or written; ``revision`` changes whenever ``bindings`` does (the authorizer
    rebuilds its index and empties its cache then)."""

    @property
    def bindings(self) -> tuple[AclBinding, ...]: ...

    @property
    def revision(self) -> int: ...

    async def update(self, change: AclChange, executor: Executor | None) -> None:
        """Apply ``change`` to the stored set, durably; afterwards ``bindings`` is what the
        storage holds (the old set if the write failed, which then raises)."""
        ...

_FIELDS = (
    "resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
    "permission_type",
)
_ENUMS: dict[str, type[Any]] = {
    "resource_type": ResourceType,
    "pattern_type": PatternType,
    "operation": AclOperation,
    "permission_type": AclPermissionType,
}


def encode_acls(bindings: Sequence[AclBinding]) -> bytes:
    """The file's bytes for ``bindings`` (one binding per line, for people reading it)."""
    lines = []
    for binding in bindings:
        entry = {
            name: (value.name if name in _ENUMS else value)
            for name in _FIELDS
            for value in (getattr(binding, name),)
        }
        lines.append("    " + json.dumps(entry, ensure_ascii=False))
    body = ",\n".join(lines)
    text = f'{{\n  "version": {FORMAT_VERSION},\n  "acls": [\n{body}\n  ]\n}}\n' if lines else (
        f'{{\n  "version": {FORMAT_VERSION},\n  "acls": []\n}}\n'
    )
    return text.encode("utf-8")


def decode_acls(data: bytes, path: Path | str = ACL_FILE_NAME, label: str = "ACL file"
                ) -> list[AclBinding]:
    """The bindings of a file's bytes, each validated as CreateAcls validates one; errors
    name ``label`` and ``path`` ("ACL file /data/acls.json", "etcd key /stratalog/acls").

    Raises:
        SecurityConfigError: not UTF-8 JSON, not this format, an unknown version, or an invalid
            binding; the message names ``path`` and the entry's index.
    """
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SecurityConfigError(f"{label} {path} is not UTF-8 JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("acls"), list):
        raise SecurityConfigError(
            f"{label} {path}: expected an object with \"version\" and an \"acls\" list"
        )
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise SecurityConfigError(
            f"{label} {path}: version {version!r} is not supported (this server reads "
            f"version {FORMAT_VERSION})"
        )
    bindings = []
    for index, entry in enumerate(document["acls"]):
        where = f"{label} {path}: acls[{index}]"
        if not isinstance(entry, dict) or set(entry) != set(_FIELDS):
            raise SecurityConfigError(f"{where}: expected an object with exactly the keys "
                                      f"{', '.join(_FIELDS)}; got {entry!r}")
        values: dict[str, Any] = {}
        for name in _FIELDS:
            raw = entry[name]
            if not isinstance(raw, str):
                raise SecurityConfigError(f"{where}.{name}: expected a string, got {raw!r}")
            enum_type = _ENUMS.get(name)
            if enum_type is None:
                values[name] = raw
            elif raw in enum_type.__members__:
                values[name] = enum_type[raw]
            else:
                raise SecurityConfigError(
                    f"{where}.{name}: {raw!r} is not one of {', '.join(enum_type.__members__)}"
                )
        try:
            bindings.append(AclBinding(**values).validated(f"acls[{index}]"))
        except InvalidAclError as exc:
            raise SecurityConfigError(f"{label} {path}: {exc}") from None
    return bindings


class AclStore:
    """The ACL file of one server: where it is, and what it held when last read or written.

    Holds the file's path and the bindings it holds (as loaded, then as last written). Crash
    behaviour and concurrency: see the module docstring (blocking; one writer at a time).
    """

    def __init__(self, path: Path, bindings: Sequence[AclBinding]) -> None:
        self.path = path
        self.bindings: tuple[AclBinding, ...] = tuple(bindings)
        self.revision = 0  # +1 whenever bindings change

    async def update(self, change: AclChange, executor: Executor | None) -> None:
        """:meth:`AclStorage.update`: ``change`` on the loop, the write in ``executor``."""
        updated = change(self.bindings)
        if updated is not None:
            await asyncio.get_running_loop().run_in_executor(executor, self.write, updated)

    def set_aside(self) -> Path | None:
        """Rename the file to ``acls.json.imported`` (durably), so that it is plainly not in
        force; None when there is no file. Blocking.

        Raises:
            OSError: the rename failed (the file stays where it was).
        """
        if not self.path.exists():
            return None
        target = self.path.with_name(self.path.name + IMPORTED_SUFFIX)
        os.replace(self.path, target)
        fsync_directory(self.path.parent)
        return target

    @classmethod
    def keep_ready(cls, log_dirs: Sequence[str | Path]) -> None:
        """With the authorizer off: write an empty ACL file in the first directory unless one
        of ``log_dirs`` holds one (never read: a file the authorizer would refuse is its
        business when it is turned on). So a server that turns the authorizer on later finds
        a file, and a missing one means a lost one (:meth:`open`). Blocking.

        Raises:
            StorageIOError: the write failed.
        """
        assert log_dirs, "a server has at least one log directory"
        if not any((Path(d) / ACL_FILE_NAME).exists() for d in log_dirs):
            cls(Path(log_dirs[0]) / ACL_FILE_NAME, ()).write(())

    @classmethod
    def open_to_import(cls, log_dirs: Sequence[str | Path]) -> AclStore:
        """The ACL file of a cluster member, to be imported into etcd or checked against it
        (server/cluster/cluster_acls.py): as :meth:`open` when a file exists; none is no error
        and writes nothing (the cluster's ACLs are etcd's, and an imported file was renamed).

        Raises:
            SecurityConfigError: as :meth:`open`.
        """
        assert log_dirs, "a server has at least one log directory"
        if not any((Path(d) / ACL_FILE_NAME).exists() for d in log_dirs):
            return cls(Path(log_dirs[0]) / ACL_FILE_NAME, ())
        return cls.open(log_dirs)

    @classmethod
    def open(
        cls, log_dirs: Sequence[str | Path], *, new_server: bool = True,
        create_if_missing: bool = False,
    ) -> AclStore:
        """Find and read the ACL file of a server with these log directories. None found:
        for a ``new_server`` (or with ``create_if_missing``), an empty set, written at once
        in the first directory; otherwise a refusal (the module docstring, "A missing file").

        Raises:
            SecurityConfigError: more than one directory holds an ACL file, the file is
                unreadable or invalid (see :func:`decode_acls`), or it is missing from a
                server that has run before.
            StorageIOError: the empty file could not be written.
        """
        assert log_dirs, "a server has at least one log directory"
        candidates = [Path(d) / ACL_FILE_NAME for d in log_dirs]
        found = [path for path in candidates if path.exists()]
        if len(found) > 1:
            raise SecurityConfigError(
                f"more than one ACL file: {', '.join(map(str, found))}; keep the one whose "
                "ACLs apply and move the others away"
            )
        if not found:
            if not new_server and not create_if_missing:
                raise SecurityConfigError(
                    f"the authorizer is on but no log directory holds its ACL file"
                    f" {ACL_FILE_NAME} (looked in {', '.join(map(str, log_dirs))}), and this"
                    " server has run before: its ACLs may have been lost (a deleted file, a"
                    " log directory not mounted). Restore the file, or start with"
                    " acl_file_create_if_missing = true to start with no ACLs"
                )
            store = cls(candidates[0], ())
            store.write(())
            if new_server:
                logger.info("no ACL file yet: wrote an empty one, %s", store.path)
            else:
                logger.warning("no ACL file found, starting with no ACLs"
                               " (acl_file_create_if_missing): wrote an empty one, %s",
                               store.path)
            return store
        path = found[0]
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise SecurityConfigError(f"cannot read the ACL file {path}: {exc}") from None
        bindings = decode_acls(data, path)
        logger.info("loaded %d ACL bindings from %s", len(bindings), path)
        return cls(path, bindings)

    def write(self, bindings: Sequence[AclBinding]) -> None:
        """Replace the file's bindings with ``bindings``, atomically and durably.

        Raises:
            StorageIOError: the write failed (disk full, I/O error). :attr:`bindings` is then
                what the file holds, read back: the old set, or the new one if only the fsync
                of the directory failed after the rename.
        """
        try:
            atomic_write(self.path, encode_acls(bindings))
        except BaseException:
            self._read_back()
            raise
        self._set(tuple(bindings))

    def _set(self, bindings: tuple[AclBinding, ...]) -> None:
        if bindings != self.bindings:
            self.bindings = bindings
            self.revision += 1

    def _read_back(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._set(())
            return
        except OSError:
            logger.exception("cannot read the ACL file %s back after a failed write; the ACLs"
                             " in force stay as they were", self.path)
            return
        try:
            self._set(tuple(decode_acls(data, self.path)))
        except SecurityConfigError:
            logger.exception("the ACL file %s does not read back after a failed write; the ACLs"
                             " in force stay as they were", self.path)
