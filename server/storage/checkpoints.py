"""Offset checkpoint files: one offset per partition of a log directory, in Kafka's text format.

A log directory keeps two of them at its root, each covering every partition in that directory:

* ``recovery-point-offset-checkpoint``: per partition, the offset below which everything is known
  to be flushed. After an unclean shutdown, recovery starts at the segment holding it.
* ``log-start-offset-checkpoint``: per partition whose log start offset is above its first
  segment's base offset (after ``delete_records``); a partition missing here starts at its first
  segment.

The format (Kafka's ``CheckpointFile`` with ``OffsetCheckpointFile``'s formatter), UTF-8 text,
``\\n`` line ends::

    0                              line 1: the format version, always 0
    2                              line 2: the number of entry lines that follow
    orders 0 1234                  "<topic> <partition> <offset>", single spaces
    orders 1 0

Reading follows Kafka exactly, so that a file Kafka accepts is accepted and one it rejects is
rejected: an empty file, or one with only the version line, is empty; a version other than 0,
a line that is not a decimal int, an entry line that does not split on whitespace into exactly
three fields, or an entry count that does not match the count line are errors
(:class:`CorruptCheckpointError` naming the file and line). Kafka's ``LogManager`` then logs a
warning and carries on as if the file were empty ([B-58]); that policy is the caller's.

Writes replace the file atomically (:func:`~.durable.atomic_write`: tmp, fsync, rename, fsync of
the directory), so a crash leaves the previous checkpoint or the new one, never a torn one.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path

from .durable import atomic_write
from .errors import CorruptCheckpointError, StorageIOError
from .topic_names import PARTITION_MAX, validate_topic_name

__all__ = [
    "CHECKPOINT_VERSION",
    "LOG_START_OFFSET_CHECKPOINT_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE",
    "OffsetCheckpointFile",
]

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"

# The only version of the offset checkpoint format Kafka has ever written.
CHECKPOINT_VERSION = 0

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# What Java's Integer.parseInt / Long.parseLong accept, restricted to ASCII digits: Python's int()
# would also take spaces, underscores and non-ASCII digits, which Kafka's files never contain.
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
# More significant digits than any Java long has (19): out of range without parsing.
_DIGITS_MAX = 19
# Java's "\\s+" is ASCII whitespace only: space, \t, \n, \x0b, \f, \r.
_WHITESPACE_RE = re.compile(r"\s+", re.ASCII)
# Java's BufferedReader.readLine ends a line at \n, \r or \r\n.
_LINE_END_RE = re.compile(r"\r\n|\r|\n")

TopicPartition = tuple[str, int]


def _split_lines(text: str) -> list[str]:
    """Lines as BufferedReader.readLine returns them: a final line end adds no empty line."""
    lines = _LINE_END_RE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class OffsetCheckpointFile:
    """One offset checkpoint file: read and atomically rewrite ``(topic, partition) -> offset``.

    Holds only the path; every :meth:`read` reads the file and every :meth:`write` replaces it
    whole. Constructing one creates the file, empty, if it is missing (as Kafka does), so that a
    later read finds an empty checkpoint rather than no file.

    Crash behaviour: a crash during :meth:`write` leaves the previous complete content (and
    perhaps a stray ``<name>.tmp``, which is ignored and overwritten by the next write).

    Concurrency: thread-safe; reads and writes of one object are serialised by a lock (the
    periodic checkpoint task and shutdown may both write). Two objects, or two processes, on the
    same file are not coordinated: the log directory's ``.lock`` keeps other processes out.
    """

    def __init__(self, path: Path, *, create_if_missing: bool = True) -> None:
        """Open the checkpoint at ``path``, creating it empty if missing and asked to.

        Raises:
            StorageIOError: the file cannot be created (missing directory, permissions).
        """
        self.path = Path(path)
        self._lock = threading.Lock()
        if create_if_missing:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                pass
            except OSError as e:
                raise StorageIOError(f"cannot create checkpoint file {self.path}: {e}") from e
            else:
                os.close(fd)

    def __repr__(self) -> str:
        return f"OffsetCheckpointFile({str(self.path)!r})"

    def read(self) -> dict[TopicPartition, int]:
        """The entries of the file; a missing or empty file is an empty checkpoint.

        A partition listed twice takes its last offset (Kafka builds a map from the lines).

        Raises:
            CorruptCheckpointError: bytes that are not UTF-8, a version other than 0, a line that
                is not a decimal int where one is expected, an entry line without exactly three
                whitespace-separated fields, a partition or offset out of Java's int/long range,
                or fewer or more entry lines than the count line says.
            StorageIOError: the file exists but cannot be read.
        """
        with self._lock:
            try:
                data = self.path.read_bytes()
            except FileNotFoundError:
                return {}
            except OSError as e:
                raise StorageIOError(f"cannot read checkpoint file {self.path}: {e}") from e
        return self._parse(data)

    def _parse(self, data: bytes) -> dict[TopicPartition, int]:
        location = str(self.path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(
                f"checkpoint file {location} is not UTF-8 text: byte {e.start} of {len(data)} "
                f"is {data[e.start]:#04x}",
                path=location,
            ) from e
        lines = _split_lines(text)
        if not lines:
            return {}
        version = self._parse_int(lines[0], 1, _INT32_MIN, _INT32_MAX)
        if version != CHECKPOINT_VERSION:
            raise CorruptCheckpointError(
                f"Unrecognised version {version} on line 1 of checkpoint file {location}, "
                f"expected version {CHECKPOINT_VERSION}",
                path=location,
                line_number=1,
            )
        if len(lines) == 1:
            return {}
        expected_count = self._parse_int(lines[1], 2, _INT32_MIN, _INT32_MAX)
        if expected_count < 0:
            # Java's new ArrayList<>(negative) throws here; say what is wrong instead.
            raise self._malformed(lines[1], 2, "the entry count is negative")
        entries: dict[TopicPartition, int] = {}
        for index, line in enumerate(lines[2:]):
            line_number = index + 3
            topic, partition, offset = self._parse_entry(line, line_number)
            entries[(topic, partition)] = offset
        found_count = len(lines) - 2
        if found_count != expected_count:
            raise CorruptCheckpointError(
                f"Expected [{expected_count}] entries in checkpoint file [{location}], "
                f"but found [{found_count}]",
                path=location,
            )
        return entries

    def _malformed(self, line: str, line_number: int, why: str) -> CorruptCheckpointError:
        shown = line if len(line) <= 200 else line[:200] + "..."
        return CorruptCheckpointError(
            f"Malformed line {line_number} in checkpoint file [{self.path}]: {shown!r} ({why})",
            path=str(self.path),
            line_number=line_number,
        )

    def _parse_int(
        self, text: str, line_number: int, low: int, high: int, line: str | None = None
    ) -> int:
        """``text`` as Java's parseInt/parseLong would read it, within [low, high]; ``line`` is
        the whole line to quote in the error (default: ``text``)."""
        shown = line if line is not None else text
        if not _DECIMAL_RE.fullmatch(text):
            raise self._malformed(shown, line_number, f"{text!r} is not a decimal integer")
        if len(text.lstrip("+-").lstrip("0")) > _DIGITS_MAX:
            # Out of range for sure; also keeps int() away from its 4300-digit limit.
            raise self._malformed(shown, line_number, f"{text[:30]!r}... is far too large")
        value = int(text)
        if not low <= value <= high:
            raise self._malformed(shown, line_number, f"{value} is outside {low} .. {high}")
        return value

    def _parse_entry(self, line: str, line_number: int) -> tuple[str, int, int]:
        parts = _WHITESPACE_RE.split(line)
        # Java's String.split drops trailing empty strings but keeps a leading one, and gives
        # the input itself when nothing matches (so "" is one empty field, not none).
        while len(parts) > 1 and parts[-1] == "":
            parts.pop()
        if parts == [""] and line != "":
            parts = []
        if len(parts) != 3:
            raise self._malformed(
                line,
                line_number,
                f"expected '<topic> <partition> <offset>', found {len(parts)} fields",
            )
        topic, partition_text, offset_text = parts
        partition = self._parse_int(partition_text, line_number, _INT32_MIN, _INT32_MAX, line)
        offset = self._parse_int(offset_text, line_number, _INT64_MIN, _INT64_MAX, line)
        return topic, partition, offset

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        """Replace the file with ``entries``, atomically and durably.

        Lines are sorted by (topic, partition), so the same entries always give the same bytes.

        Raises:
            InvalidTopicError: a topic that is not a valid topic name (it could not be read back).
            ValueError: a partition outside 0 .. 2^31 - 1 or an offset outside Java's long range.
            StorageIOError: the write failed; the previous file is intact.
        """
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        for (topic, partition), offset in sorted(entries.items()):
            validate_topic_name(topic)
            if isinstance(partition, bool) or not isinstance(partition, int):
                raise ValueError(f"partition of {topic!r} must be an int, not {partition!r}")
            if not 0 <= partition <= PARTITION_MAX:
                raise ValueError(
                    f"partition {partition} of {topic!r} is outside 0 .. {PARTITION_MAX}"
                )
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"offset of {topic}-{partition} must be an int, not {offset!r}")
            if not _INT64_MIN <= offset <= _INT64_MAX:
                raise ValueError(f"offset {offset} of {topic}-{partition} is outside a Java long")
            lines.append(f"{topic} {partition} {offset}")
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with self._lock:
            atomic_write(self.path, data)
