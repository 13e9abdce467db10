"""docs/groups.md, "Assignors and the consumer protocol": its Python examples run as written."""

from __future__ import annotations

from pathlib import Path

from tests.doc_blocks import blocks

GROUPS_MD = Path(__file__).resolve().parents[3] / "docs" / "groups.md"
SECTION = "## Assignors and the consumer protocol"


def test_the_sections_python_examples_run():
    python = [b for b in blocks(GROUPS_MD, SECTION) if b.language == "python" and b.skip is None]
    assert python, f"no Python example under {SECTION!r}"
    for block in python:
        exec(compile(block.text, block.where, "exec"), {})  # their asserts are the checks
