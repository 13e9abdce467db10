"""The README's Quick start and docs/client.md's quick start, run as a reader runs them.

One server on a free port and a new data directory (``data`` in the reader's directory, as
``make run`` keeps it in ``./data``); then every fenced block, in the order a reader meets
them: the README's Quick start (its ``$`` commands, each exiting 0 and printing what the README
shows; its Python examples as scripts), then docs/client.md's quick start on the same server.
The conventions (``$`` lines and their output, ``...``, the ``<!-- docs-test: skip (why) -->``
marker) are tests/doc_blocks.py's. docs/spark.md's examples run in tests/spark/test_docs_spark.py
(they need Java).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.doc_blocks import PROJECT_ROOT, Reader, blocks

from .conftest import launch_server

README = PROJECT_ROOT / "README.md"
CLIENT_MD = PROJECT_ROOT / "docs" / "client.md"


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    directory = tmp_path_factory.mktemp("reader")
    server = launch_server(directory / "data")
    yield Reader.prepare(directory, server.target)
    code = server.stop(signal.SIGTERM)
    assert code == 0, f"server exited {code}; log:\n{server.log_text()[-4000:]}"


def _run_all(reader: Reader, path: Path, section: str) -> None:
    found = blocks(path, section)
    assert found, f"no fenced block under {section!r} in {path}"
    ran = [block for block in found if block.skip is None]
    assert ran, f"every block under {section!r} in {path} is skipped"
    for block in ran:
        reader.run(block)


def test_readme_quick_start(reader: Reader) -> None:
    _run_all(reader, README, "## Quick start")


def test_client_md_quick_start_after_the_readme(reader: Reader) -> None:
    """Runs after the README's (same server): its topics must not collide with the README's."""
    _run_all(reader, CLIENT_MD, "## Quick start")
