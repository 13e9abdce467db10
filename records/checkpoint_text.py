"""The text container of Kafka's checkpoint files (``CheckpointFile``), UTF-8, ``\\n`` line ends::

    0                              line 1: the format version, always 0
    2                              line 2: the number of entry lines that follow
    <entry line>                   one per entry, fields separated by whitespace
    <entry line>

Two formats fill it: the offset checkpoints (:mod:`~stratalog.records.offset_checkpoint`:
``<topic> <partition> <offset>``) and ``leader-epoch-checkpoint``
(:mod:`~stratalog.records.leader_epoch_checkpoint`: ``<leader epoch> <start offset>``).

Parsing follows Kafka exactly, so that text Kafka accepts is accepted and text it rejects is
rejected: no lines, or only the version line, is empty; a version other than 0, or a line that is
not a decimal int where one is expected (Java's ``parseInt``/``parseLong``: an optional sign and
ASCII digits) is an error, and so is an entry count that does not match the count line. Lines end
at ``\\n``, ``\\r`` or ``\\r\\n`` (``BufferedReader.readLine``).

Sans-IO: bytes in, values out.
"""

from __future__ import annotations

import re

from .entry_field import Buffer
from .errors import CorruptOffsetCheckpointError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "OFFSET_CHECKPOINT_VERSION",
    "check_entry_count",
    "checkpoint_entry_lines",
    "malformed_line",
    "parse_java_int",
    "split_fields",
]

# Java's int and long: Kafka's offsets, timestamps and partitions are one or the other.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# The only version of the offset checkpoint format Kafka has ever written.
OFFSET_CHECKPOINT_VERSION = 0

# What Java's Integer.parseInt / Long.parseLong accept, restricted to ASCII digits: Python's int()
# would also take spaces, underscores and non-ASCII digits, which Kafka's files never contain.
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
# More significant digits than any Java long has (19): out of range without parsing.
_DIGITS_MAX = 19
# Java's "\\s+" is ASCII whitespace only: space, \t, \n, \x0b, \f, \r.
_WHITESPACE_RE = re.compile(r"\s+", re.ASCII)
# Java's BufferedReader.readLine ends a line at \n, \r or \r\n.
_LINE_END_RE = re.compile(r"\r\n|\r|\n")
# A malformed line is quoted in the error up to this many characters.
_QUOTED_LINE_CHARS_MAX = 200


def _split_lines(text: str) -> list[str]:
    """Lines as BufferedReader.readLine returns them: a final line end adds no empty line."""
    lines = _LINE_END_RE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def malformed_line(line: str, line_number: int, why: str) -> CorruptOffsetCheckpointError:
    shown = line if len(line) <= _QUOTED_LINE_CHARS_MAX else line[:_QUOTED_LINE_CHARS_MAX] + "..."
    return CorruptOffsetCheckpointError(
        f"Malformed line {line_number}: {shown!r} ({why})", line_number=line_number
    )


def parse_java_int(text: str, line_number: int, low: int, high: int, line: str | None = None) -> int:
    """``text`` as Java's parseInt/parseLong would read it, within [low, high]; ``line`` is the
    whole line to quote in the error (default: ``text``)."""
    shown = line if line is not None else text
    if not _DECIMAL_RE.fullmatch(text):
        raise malformed_line(shown, line_number, f"{text!r} is not a decimal integer")
    if len(text.lstrip("+-").lstrip("0")) > _DIGITS_MAX:
        # Out of range for sure; also keeps int() away from its 4300-digit limit.
        raise malformed_line(shown, line_number, f"{text[:30]!r}... is far too large")
    value = int(text)
    if not low <= value <= high:
        raise malformed_line(shown, line_number, f"{value} is outside {low} .. {high}")
    return value


def checkpoint_entry_lines(data: Buffer) -> tuple[list[tuple[int, str]], int]:
    """The entry lines of checkpoint text, each with its 1-based line number, and the count the
    count line declares (§7 and §8 share this container: version line, count line, entries).

    The caller parses every entry line before comparing their number with the count, as Kafka
    does (a malformed line is reported before a count mismatch): :func:`check_entry_count`.

    Raises:
        CorruptOffsetCheckpointError: bytes that are not UTF-8, a version other than 0, a
            version or count line that is not a decimal int, a negative count.
    """
    raw = bytes(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptOffsetCheckpointError(
            f"not UTF-8 text: byte {e.start} of {len(raw)} is {raw[e.start]:#04x}"
        ) from e
    lines = _split_lines(text)
    if not lines:
        return [], 0
    version = parse_java_int(lines[0], 1, INT32_MIN, INT32_MAX)
    if version != OFFSET_CHECKPOINT_VERSION:
        raise CorruptOffsetCheckpointError(
            f"Unrecognised version {version} on line 1, expected version "
            f"{OFFSET_CHECKPOINT_VERSION}",
            line_number=1,
        )
    if len(lines) == 1:
        return [], 0
    expected_count = parse_java_int(lines[1], 2, INT32_MIN, INT32_MAX)
    if expected_count < 0:
        # Java's new ArrayList<>(negative) throws here; say what is wrong instead.
        raise malformed_line(lines[1], 2, "the entry count is negative")
    return [(index + 3, line) for index, line in enumerate(lines[2:])], expected_count


def check_entry_count(found_count: int, expected_count: int) -> None:
    if found_count != expected_count:
        raise CorruptOffsetCheckpointError(
            f"Expected [{expected_count}] entries, but found [{found_count}]"
        )


def split_fields(line: str) -> list[str]:
    """``line.split("\\s+")`` as Java's String.split does it."""
    parts = _WHITESPACE_RE.split(line)
    # Java's String.split drops trailing empty strings but keeps a leading one, and gives the
    # input itself when nothing matches (so "" is one empty field, not none).
    while len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if parts == [""] and line != "":
        parts = []
    return parts
