"""Every reference in the repository resolves to something a reader of the repository can open.

Code comments, docstrings and docs cite Kafka's behaviours as Kafka's class and method plus a
section of ``docs/kafka-behaviours.md``, which names Kafka's source file and tests (for example
"(Kafka LogSegment.shouldRoll; docs/kafka-behaviours.md#roll)"). This test reads every source
and documentation file (``.py``, ``.pyi``, ``.md``, ``.proto``, ``.toml``, ``.c``, ``.h``,
``.sh``, ``Makefile``) and fails, naming file, line and text, on:

* **a tag into the old specification document** (the letter B, a dash and a number in square
  brackets, alone or in lists such as one bracket around two tags): that document is not in the
  repository, so nobody can follow the tag;
* **a mention of that document by its file name**, for the same reason;
* **a link to a section that does not exist**: ``docs/<file>.md#anchor`` anywhere (taken from the
  repository root), and in Markdown every relative link ``[text](<file>.md#anchor)`` or
  ``[text](#anchor)`` (taken from the linking file's directory). The anchor must be the GitHub
  slug of a heading of that file (or an explicit ``<a id>``/``<a name>``), and the file must exist.

Not read: virtual environments, caches, build output, ``tests/fixtures/`` (data) and this file,
whose samples are the detector's own test cases (the last tests below).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path, PurePosixPath

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = Path(__file__).resolve()
SUFFIXES = {".py", ".pyi", ".md", ".proto", ".toml", ".c", ".h", ".sh"}
NAMES = {"Makefile"}
SKIPPED_DIRS = {
    ".git", ".venv", "venv", "node_modules", "__pycache__", ".pytest_cache", ".hypothesis",
    ".ruff_cache", ".mypy_cache", "build", "dist", "fixtures", "results", "cluster-data",
}

# Built from pieces so that the rewrite script leaves this file alone.
OLD_TAG = re.compile(r"\[" + "B" + r"-\d+")
OLD_DOCUMENT = re.compile("kafka-storage-" + "reference")
# docs/<file>.md#anchor, in any file, from the repository root.
ROOT_LINK = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.md)#([\w-]+)")
# [text](target.md#anchor) or [text](#anchor) in Markdown, from the linking file's directory.
MARKDOWN_LINK = re.compile(r"\]\(((?:[\w./-]+\.md)?)#([\w-]+)\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def scanned_files(root: Path) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path == THIS_FILE:
            continue
        if path.is_file() and (path.suffix in SUFFIXES or path.name in NAMES):
            found.append(path)
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to
    hyphens (``## Index files: mechanics`` -> ``index-files-mechanics``)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # keeps letters, digits, _, - and spaces
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    """The anchors of a Markdown text: its headings' slugs (the n-th repeat gets ``-n``), outside
    code fences, and explicit HTML anchors."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            anchors.add(base if n == 0 else f"{base}-{n}")
            seen[base] = n + 1
        anchors.update(HTML_ANCHOR.findall(line))
    return anchors


@cache
def anchors_of_file(path: Path) -> frozenset[str] | None:
    if not path.is_file():
        return None
    return frozenset(anchors_of(path.read_text(encoding="utf-8")))


def problems(root: Path, path: Path, text: str) -> list[str]:
    """What does not resolve in ``text``, the contents of ``path`` under ``root``."""
    rel = PurePosixPath(path.relative_to(root).as_posix())
    found = []

    def check_link(line_no: int, line: str, target: Path, anchor: str, shown: str) -> None:
        anchors = anchors_of_file(target.resolve())
        if anchors is None:
            found.append(f"{rel}:{line_no}: {shown}: no such file ({line.strip()})")
        elif anchor not in anchors:
            found.append(f"{rel}:{line_no}: {shown}: no such heading ({line.strip()})")

    for line_no, line in enumerate(text.splitlines(), 1):
        if OLD_TAG.search(line):
            found.append(f"{rel}:{line_no}: a tag into the old specification: {line.strip()}")
        if OLD_DOCUMENT.search(line):
            found.append(f"{rel}:{line_no}: names a document not in the repository: {line.strip()}")
        for m in ROOT_LINK.finditer(line):
            check_link(line_no, line, root / m.group(1), m.group(2), m.group(0))
        if path.suffix == ".md":
            for m in MARKDOWN_LINK.finditer(line):
                target = path.parent / m.group(1) if m.group(1) else path
                check_link(line_no, line, target, m.group(2), m.group(0)[2:-1])
    return found


# ------------------------------------------------------------------------------- the repository


def test_every_reference_resolves() -> None:
    found = []
    for path in scanned_files(PROJECT_ROOT):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found.extend(problems(PROJECT_ROOT, path, text))
    assert not found, f"{len(found)} references do not resolve:\n" + "\n".join(found)


def test_the_reference_document_has_the_sections_the_code_cites() -> None:
    anchors = anchors_of_file(PROJECT_ROOT / "docs" / "kafka-behaviours.md")
    assert anchors is not None
    for section in ("sources", "roll", "append", "reads", "log-loading", "retention"):
        assert section in anchors


# ------------------------------------------------------------------------- the detector itself


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Roll", "roll"),
        ("Index files: mechanics", "index-files-mechanics"),
        ("The embedded API", "the-embedded-api"),
        ("Point reads: `max_records`", "point-reads-max_records"),
        ("Log compaction: the cleaner (issue 16)", "log-compaction-the-cleaner-issue-16"),
        ("`make docker-test`", "make-docker-test"),
        ("See [the client](client.md)", "see-the-client"),
        ("On-disk formats", "on-disk-formats"),
    ],
)
def test_slug(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_repeated_headings_and_fences() -> None:
    text = "# A\n## Errors\n```\n# not a heading\n```\n## Errors\n<a id=\"here\"></a>\n"
    assert anchors_of(text) == {"a", "errors", "errors-1", "here"}


def sample_tree(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n## Roll\ntext\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("name", "text", "flagged"),
    [
        ("a.py", "# (Kafka LogSegment.shouldRoll; docs/guide.md#roll)\n", False),
        ("a.py", "# (Kafka LogSegment.shouldRoll; docs/guide.md#rolls)\n", True),
        ("a.py", "# see docs/missing.md#roll\n", True),
        ("a.py", "# [" + "B-11]: roll\n", True),
        ("a.py", "# ([" + "B-4, B-13])\n", True),
        ("a.py", "# [" + "B-11]/[" + "B-12]\n", True),
        ("a.py", "# the " + "kafka-storage-" + "reference.md §2 table\n", True),
        ("a.py", "x = items[B - 1]  # not a tag\n", False),
        ("docs/b.md", "See [the roll](guide.md#roll).\n", False),
        ("docs/b.md", "See [the roll](guide.md#rol).\n", True),
        ("docs/b.md", "## Here\nSee [below](#here) and [nowhere](#there).\n", True),
        ("docs/b.md", "## Here\nSee [below](#here).\n", False),
        ("docs/b.md", "Kafka's [LocalLog.roll](../docs/guide.md#roll).\n", False),
        ("README.md", "See docs/guide.md#roll and [it](docs/guide.md#guide).\n", False),
    ],
)
def test_the_detector_on_samples(tmp_path: Path, name: str, text: str, flagged: bool) -> None:
    root = sample_tree(tmp_path)
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    anchors_of_file.cache_clear()
    assert bool(problems(root, path, text)) is flagged, problems(root, path, text)
