"""The README's Quick start and docs/client.md's quick start, run as a reader runs them.

One server on a free port and a new data directory (``data`` in the reader's directory, as
``make run`` keeps it in ``./data``); then every fenced block, in the order a reader meets
them: the README's Quick start (its ``$`` commands, each exiting 0 and printing what the README
shows; its Python examples as scripts), its Python client example once more (a second run must
not fail because its topic exists), then docs/client.md's quick start and its Consumer
section's resume recipe on the same server. The conventions (``$`` lines and their output,
``...``, the ``<!-- docs-test: skip (why) -->`` marker) are tests/doc_blocks.py's.
docs/spark.md's examples run in tests/spark/test_docs_spark.py (they need Java), docs/security.md's
walk-through in test_docs_security.py (servers of its own, with TLS).
"""

from __future__ import annotations

import shutil
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
    yield Reader.prepare(directory, server.target, server.kafka_bootstrap)
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


def test_readme_kafka_clients(reader: Reader) -> None:
    """The README's Kafka clients section (issue 28): kcat and confluent-kafka on the same
    server, the gRPC command reading what they wrote."""
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (Debian's kcat package): the README's Kafka"
                    " section uses it")
    _run_all(reader, README, "## Kafka clients")


def test_readme_python_example_runs_again(reader: Reader) -> None:
    """Issue 25: the README's client example failed on its second run (its topic existed):
    run it again on the same server, where the Quick start's run made its topic."""
    [example] = [block for block in blocks(README, "## Quick start")
                 if block.language == "python" and "Client(" in block.text]
    printed = reader.run_python(example.text, f"{example.where}-again")
    assert "RecordMetadata(topic='orders'" in printed, printed


def test_client_md_quick_start_after_the_readme(reader: Reader) -> None:
    """Runs after the README's (same server): its topics must not collide with the README's."""
    _run_all(reader, CLIENT_MD, "## Quick start")


def test_client_md_consumer_resume_recipe(reader: Reader) -> None:
    """docs/client.md's Consumer section: the resume recipe reads on from a saved position,
    printing every record once, in order (issue 25: position() counted records fetched ahead,
    so the second read skipped them), and where the next run starts, as its comments show."""
    found = blocks(CLIENT_MD, "## Consumer")
    [recipe] = [block for block in found if block.skip is None]
    printed = reader.run_python(recipe.text, recipe.where).splitlines()
    assert printed == [f"{i} b'ticket {i}'" for i in range(5)] + ["next run starts at 5"]
