"""The ACL file: format, where it lives, refusals at start, and crashes during a write."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stratalog.server.security.acl_store import (
    ACL_FILE_NAME,
    IMPORTED_SUFFIX,
    AclStore,
    decode_acls,
    encode_acls,
)
from stratalog.server.security.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from stratalog.server.security.errors import SecurityConfigError
from stratalog.server.storage.errors import StorageIOError


def binding(name: str, principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(ResourceType.TOPIC, name, PatternType.PREFIXED, principal, host,
                      AclOperation.READ, AclPermissionType.ALLOW)


def test_round_trip_keeps_order_and_every_field() -> None:
    bindings = [
        binding("orders-"),
        AclBinding(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                   "User:CN=client,O=Ex", "::1", AclOperation.IDEMPOTENT_WRITE,
                   AclPermissionType.DENY),
        binding("é*", principal="User:*"),
    ]
    data = encode_acls(bindings)
    assert decode_acls(data) == bindings
    document = json.loads(data)
    assert document["version"] == 1
    assert document["acls"][1] == {
        "resource_type": "CLUSTER", "resource_name": "kafka-cluster",
        "pattern_type": "LITERAL", "principal": "User:CN=client,O=Ex", "host": "::1",
        "operation": "IDEMPOTENT_WRITE", "permission_type": "DENY",
    }
    assert decode_acls(encode_acls([])) == []


def test_a_new_server_gets_an_empty_set_in_its_first_log_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    store = AclStore.open(dirs)
    assert store.bindings == ()
    assert store.path == dirs[0] / ACL_FILE_NAME
    # Written at once: from now on, its absence means it was lost.
    assert store.path.exists() and AclStore.open(dirs, new_server=False).bindings == ()
    store.write([binding("x")])
    assert AclStore.open(dirs).bindings == (binding("x"),)


def test_a_server_that_ran_before_refuses_a_missing_file_unless_told(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    with pytest.raises(SecurityConfigError, match=r"has run before.*acl_file_create_if_missing"):
        AclStore.open(dirs, new_server=False)
    assert not (dirs[0] / ACL_FILE_NAME).exists()
    store = AclStore.open(dirs, new_server=False, create_if_missing=True)
    assert store.bindings == () and store.path.exists()


def test_the_file_is_found_in_whichever_log_dir_holds_it(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    (dirs[1] / ACL_FILE_NAME).write_bytes(encode_acls([binding("y")]))
    store = AclStore.open(dirs)
    assert store.path == dirs[1] / ACL_FILE_NAME
    assert store.bindings == (binding("y"),)


def test_two_acl_files_refuse_to_start(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
        (d / ACL_FILE_NAME).write_bytes(encode_acls([]))
    with pytest.raises(SecurityConfigError, match="more than one ACL file") as caught:
        AclStore.open(dirs)
    assert str(dirs[0]) in str(caught.value) and str(dirs[1]) in str(caught.value)


@pytest.mark.parametrize(("content", "words"), [
    (b"\xff\xfe", "not UTF-8 JSON"),
    (b'{"version": 1, "acls": [', "not UTF-8 JSON"),
    (b"[]", "expected an object"),
    (b'{"version": 2, "acls": []}', "version 2 is not supported"),
    (b'{"version": 1, "acls": [{"resource_type": "TOPIC"}]}', r"acls\[0\]: expected an object"),
    (json.dumps({"version": 1, "acls": [{
        "resource_type": "TOPIC", "resource_name": "t", "pattern_type": "LITERAL",
        "principal": "User:a", "host": "*", "operation": "READ", "permission_type": "MAYBE",
    }]}).encode(), r"acls\[0\].permission_type: 'MAYBE' is not one of"),
    (json.dumps({"version": 1, "acls": [{
        "resource_type": "TOPIC", "resource_name": "t", "pattern_type": "LITERAL",
        "principal": "alice", "host": "*", "operation": "READ", "permission_type": "ALLOW",
    }]}).encode(), r"acls\[0\].principal"),
    (json.dumps({"version": 1, "acls": [{
        "resource_type": "TOPIC", "resource_name": 5, "pattern_type": "LITERAL",
        "principal": "User:a", "host": "*", "operation": "READ", "permission_type": "ALLOW",
    }]}).encode(), "expected a string"),
])
def test_a_bad_file_stops_the_start_naming_the_file_and_entry(
    tmp_path: Path, content: bytes, words: str
) -> None:
    (tmp_path / ACL_FILE_NAME).write_bytes(content)
    with pytest.raises(SecurityConfigError, match=words) as caught:
        AclStore.open([tmp_path])
    assert str(tmp_path / ACL_FILE_NAME) in str(caught.value)


def test_a_stray_tmp_file_is_ignored_and_overwritten(tmp_path: Path) -> None:
    (tmp_path / ACL_FILE_NAME).write_bytes(encode_acls([binding("old")]))
    (tmp_path / (ACL_FILE_NAME + ".tmp")).write_bytes(b'{"version": 1, "acls": [{"torn')
    store = AclStore.open([tmp_path])
    assert store.bindings == (binding("old"),)
    store.write([binding("new")])
    assert not (tmp_path / (ACL_FILE_NAME + ".tmp")).exists()
    assert AclStore.open([tmp_path]).bindings == (binding("new"),)


def test_a_failed_write_leaves_file_and_bindings_as_they_were(tmp_path: Path) -> None:
    store = AclStore.open([tmp_path])
    store.write([binding("old")])
    # A directory where the temporary file goes: the write fails before touching the file.
    (tmp_path / (ACL_FILE_NAME + ".tmp")).mkdir()
    with pytest.raises(StorageIOError, match=ACL_FILE_NAME):
        store.write([binding("old"), binding("new")])
    assert store.bindings == (binding("old"),)
    assert AclStore.open([tmp_path]).bindings == (binding("old"),)


def test_a_failed_write_after_the_rename_reads_the_new_set_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = AclStore.open([tmp_path])
    store.write([binding("old")])
    # The directory fsync is the last step: when it fails, the file is already the new one.
    # (os.open of a directory with O_DIRECTORY is the step that fails here.)
    real_open = os.open

    def failing_directory_open(path: object, flags: int, *args: object) -> int:
        if flags & os.O_DIRECTORY:
            raise OSError(5, "Input/output error")
        return real_open(path, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", failing_directory_open)
    with pytest.raises(StorageIOError):
        store.write([binding("old"), binding("new")])
    monkeypatch.undo()
    assert store.bindings == (binding("old"), binding("new"))
    assert AclStore.open([tmp_path]).bindings == store.bindings


_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from stratalog.server.security.acl_store import AclStore
    from stratalog.server.security.acls import (
        AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType)
    store = AclStore.open([Path(sys.argv[1])])
    bindings = list(store.bindings)
    print("ready", flush=True)
    while True:
        # Large enough that a kill often lands in the middle of a write.
        bindings.append(AclBinding(ResourceType.TOPIC, f"t{len(bindings)}" + "x" * 900,
                        PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                        AclPermissionType.ALLOW))
        store.write(bindings)
""")


@pytest.mark.slow
def test_kill_9_during_writes_leaves_a_whole_set(tmp_path: Path) -> None:
    """A writer killed at random moments: the file always reads back as some complete set,
    each one a prefix of the sequence written, and never shrinks between kills."""
    last = 0
    for round_ in range(8):
        process = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE
        )
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        # Part of what is tested: each round's kill lands later in the writer's run.
        time.sleep(0.05 + 0.03 * round_)
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
        bindings = AclStore.open([tmp_path]).bindings
        names = [b.resource_name for b in bindings]
        assert names == [f"t{i}" + "x" * 900 for i in range(len(names))]
        assert len(names) >= last
        last = len(names)
    assert last > 0


def test_the_revision_moves_with_the_bindings_and_only_then(tmp_path: Path) -> None:
    store = AclStore.open([tmp_path])
    assert store.revision == 0
    store.write([binding("a")])
    assert store.revision == 1
    store.write([binding("a")])  # the same set again: no change for the authorizer to see
    assert store.revision == 1
    # update: a change that returns None writes nothing; one that returns a set writes it.
    written = []

    def change(current: tuple[AclBinding, ...]) -> list[AclBinding] | None:
        written.append(current)
        return None

    asyncio.run(store.update(change, None))
    assert written == [(binding("a"),)] and store.revision == 1
    asyncio.run(store.update(lambda current: [*current, binding("b")], None))
    assert store.bindings == (binding("a"), binding("b")) and store.revision == 2
    assert AclStore.open([tmp_path]).bindings == store.bindings


def test_set_aside_renames_the_file_durably(tmp_path: Path) -> None:
    store = AclStore.open_to_import([tmp_path])
    assert not (tmp_path / ACL_FILE_NAME).exists()  # a cluster member writes none
    assert store.set_aside() is None  # no file yet
    store.write([binding("a")])
    moved = store.set_aside()
    assert moved == tmp_path / (ACL_FILE_NAME + IMPORTED_SUFFIX)
    assert not (tmp_path / ACL_FILE_NAME).exists()
    assert decode_acls(moved.read_bytes()) == [binding("a")]
    assert AclStore.open_to_import([tmp_path]).bindings == ()  # the next start finds none
