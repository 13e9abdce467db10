"""tests/doc_blocks.py, the docs tests' reading of fenced blocks: parsing, markers, matching."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.doc_blocks import Block, Reader, blocks, commands, output_matches

DOC = """# Title

## Quick start

<!-- docs-test: skip (never ends) -->
```
make run
```

```console
$ echo one \\
    two
one two
$ true
$ printf 'a\\nb\\n'
...
```

```python
print(1)
```

## Other

```sh
echo other
```
"""


def test_blocks_of_a_section_with_their_markers(tmp_path: Path) -> None:
    path = tmp_path / "doc.md"
    path.write_text(DOC)
    found = blocks(path, "## Quick start")
    assert [(b.line, b.language, b.skip) for b in found] == [
        (6, "", "never ends"), (10, "console", None), (19, "python", None),
    ]
    assert found[0].text == "make run\n"
    assert len(blocks(path)) == 4


def test_commands_and_their_output(tmp_path: Path) -> None:
    block = blocks(_write(tmp_path, DOC), "## Quick start")[1]
    assert [(c.line, c.text, c.expected) for c in commands(block)] == [
        (11, "echo one \\\n    two", "one two\n"),
        (14, "true", None),
        (15, "printf 'a\\nb\\n'", "...\n"),
    ]
    plain = Block(Path("x"), 1, "sh", "echo a\necho b \\\n  c\n", None)
    assert [(c.text, c.expected) for c in commands(plain)] == [
        ("echo a", None), ("echo b \\\n  c", None)]


def test_a_background_block_is_marked_and_not_run_as_a_block(tmp_path: Path) -> None:
    path = _write(tmp_path, "<!-- docs-test: background (runs until Ctrl-C) -->\n"
                            "```sh\nstratalog serve --log-dirs data\n```\n")
    [block] = blocks(path)
    assert (block.line, block.skip, block.background) == (2, None, "runs until Ctrl-C")
    # Run as a block, it would never end: only Reader.start_server runs it.
    with pytest.raises(AssertionError, match="start_server"):
        Reader(tmp_path, "127.0.0.1:1").run(block)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("<!-- docs-test: skip -->", "unknown docs-test marker"),
        ("<!-- docs-test: background -->", "unknown docs-test marker"),
        ("<!-- docs-test: run (x) -->", "unknown docs-test marker"),
        ("<!-- docs-test: skip (x) -->\ntext", "must be just before a fence"),
    ],
)
def test_bad_markers_are_errors(tmp_path: Path, marker: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        blocks(_write(tmp_path, f"{marker}\n```\nls\n```\n"))


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [
        ("a\nb\n", "a\nb\n", True),
        ("a\nb\n", "a\nc\n", False),
        ("a\n", "a\nb\n", False),  # more output than shown
        ("produced ... records in ... s\n", "produced 10 records in 0.5 s\n", True),
        ("produced ... records\n", "produced 10 records\nmore\n", False),
        ("a\n...\n", "a\n", True),  # "..." alone: any number of lines, none included
        ("a\n...\nz\n", "a\nb\nc\nz\n", True),
        ("...\nz\n", "z\n", True),
        ("x ...\n", "y 1\n", False),
        ("trailing\n", "trailing   \n", True),
    ],
)
def test_output_matches(expected: str, actual: str, matches: bool) -> None:
    assert output_matches(expected, actual) is matches


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(text)
    return path
