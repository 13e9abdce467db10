"""docs/client.md, "Consumer groups (the membership core)": its Python example runs as written."""

from __future__ import annotations

from pathlib import Path

from tests.doc_blocks import blocks

CLIENT_MD = Path(__file__).resolve().parents[3] / "docs" / "client.md"
SECTION = "## Consumer groups (the membership core)"


def test_the_sections_python_examples_run():
    python = [b for b in blocks(CLIENT_MD, SECTION) if b.language == "python" and b.skip is None]
    assert python, f"no Python example under {SECTION!r}"
    for block in python:
        exec(compile(block.text, block.where, "exec"), {})  # their asserts are the checks
