"""docs/security.md run as a reader runs it (issue 25: the docs test runs its steps).

Every fenced block of the page, in order, in a new directory (tests/doc_blocks.py's
conventions): the shell blocks that are not marked skipped run and must print what the page
shows; those marked ``background`` start a server as a reader starts one in another shell
(on free ports; a server already running is stopped first with Ctrl-C, as step 7 asks), and
the blocks after it run against it. That is "Trying it on one machine": certificates made with
openssl, users in a credential file, a TLS server with the authorizer and a pid file, the
client's options and what it is told without them, ACLs, a reload, and client certificates.
Each server must exit 0 after Ctrl-C.

The one thing the page leaves to the reader's eyes: after ``stratalog reload`` a person sees
the server log ``reloaded the credential file`` before typing the next command; the test waits
for that line (the signal is asynchronous), bounded.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.doc_blocks import (
    DOC_TARGET,
    PROJECT_ROOT,
    SHELL_LANGUAGES,
    BackgroundServer,
    Reader,
    blocks,
)

SECURITY_MD = PROJECT_ROOT / "docs" / "security.md"
RELOADED = "reloaded the credential file"
#: How long a reload may take to show in the log: generous, it only turns a hang into a failure.
RELOAD_TIMEOUT_S = 60.0


def _wait_for_reload(server: BackgroundServer, seen: int) -> None:
    deadline = time.monotonic() + RELOAD_TIMEOUT_S
    while server.log_text().count(RELOADED) <= seen:
        assert server.process.poll() is None, (
            f"the server exited after the reload; log:\n{server.log_text()[-4000:]}")
        assert time.monotonic() < deadline, (
            f"no {RELOADED!r} in the log within {RELOAD_TIMEOUT_S} s:\n"
            f"{server.log_text()[-4000:]}")
        time.sleep(0.1)


def test_security_md_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not found: docs/security.md's walk-through makes its "
                    "certificates with it")
    found = blocks(SECURITY_MD)
    backgrounds = [block for block in found if block.background is not None]
    assert len(backgrounds) == 2, "the walk-through starts a TLS server, then an mTLS one"
    reader = Reader.prepare(tmp_path / "reader", DOC_TARGET)
    server: BackgroundServer | None = None
    ran = 0
    try:
        for block in found:
            if block.background is not None:
                if server is not None:
                    assert server.interrupt() == 0, server.log_text()[-4000:]
                server, reader = reader.start_server(block, tmp_path / "server.log")
                continue
            if block.skip is not None or block.language not in SHELL_LANGUAGES:
                continue
            reloads = "stratalog reload" in block.text
            assert server is not None or not reloads, f"{block.where}: no server to reload"
            seen = server.log_text().count(RELOADED) if server is not None else 0
            reader.run(block)
            ran += 1
            if reloads:
                assert server is not None
                _wait_for_reload(server, seen)
        assert server is not None
        code = server.interrupt()
        assert code == 0, f"exit {code}; log:\n{server.log_text()[-4000:]}"
    finally:
        if server is not None:
            server.kill()
    assert ran >= 6, f"only {ran} blocks of {SECURITY_MD} ran"
    # A clean stop removes the pid file that step 6's reload used.
    assert not (reader.directory / "stratalog.pid").exists()
