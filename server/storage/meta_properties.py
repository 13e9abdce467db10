"""``meta.properties``: who a log directory belongs to (cluster, node) and the directory's own id.

Kafka writes this file at the root of every log directory (``kafka-storage format``, or at first
start) and refuses to start on a directory whose cluster id is not its own; stratalog keeps the
same file so that a directory carries its identity with it, wherever it is mounted.

The file is a Java properties file written by ``Properties.store(writer, "")`` (Kafka's
``PropertiesUtils.writePropertiesFile``), ISO-8859-1 compatible text, ``\\n`` line ends::

    #                                       the empty comment Kafka passes to store()
    #Tue Mar 05 10:21:12 UTC 2024            the write time, as Java's Date.toString()
    cluster.id=4L6g3nShT-eMCtK--X86sw       any string; Kafka's are base64url Uuids
    directory.id=hYf9TKXfPMzTeGUWIL0t6Q     optional: this directory's Uuid (22 chars)
    node.id=1                               version 1 (KRaft); version 0 has broker.id instead
    version=1

Keys are written sorted, as Java 18 and later do (older Javas wrote hash order; readers do not
care). ``version`` is 0 (ZooKeeper era: ``broker.id`` and ``cluster.id`` optional) or 1 (KRaft:
``node.id`` and ``cluster.id`` required); a missing version means 0, as in Kafka.

Kafka's ``Uuid`` is 16 bytes (most significant long first) shown as URL-safe base64 without
padding: 22 characters from ``[A-Za-z0-9_-]``. Python's :class:`uuid.UUID` holds the same 16 bytes.

Writes go through :func:`~.durable.atomic_write` (tmp, fsync, rename, fsync of the directory).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .durable import atomic_write
from .errors import CorruptCheckpointError, StorageIOError

__all__ = [
    "META_PROPERTIES_FILE",
    "MetaProperties",
    "format_properties",
    "parse_properties",
    "random_kafka_uuid",
    "read_meta_properties",
    "uuid_from_kafka_string",
    "uuid_to_kafka_string",
    "write_meta_properties",
]

META_PROPERTIES_FILE = "meta.properties"

_VERSION_PROP = "version"
_CLUSTER_ID_PROP = "cluster.id"
_NODE_ID_PROP = "node.id"  # version 1
_BROKER_ID_PROP = "broker.id"  # version 0
_DIRECTORY_ID_PROP = "directory.id"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_DECIMAL_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
# Java's Properties line terminators, and the whitespace it skips around keys and separators.
_LINE_END_RE = re.compile(r"\r\n|\r|\n")
_PROPERTIES_WHITESPACE = " \t\f"

_DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


# --- Kafka's Uuid ------------------------------------------------------------------------------


def uuid_to_kafka_string(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: the 16 bytes as URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_kafka_string(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``: URL-safe base64 (padding optional) of exactly 16 bytes.

    Raises:
        ValueError: longer than 24 characters, not URL-safe base64, or not 16 bytes.
    """
    if len(text) > 24:
        raise ValueError(f"{text[:24]!r}... is too long to be a base64 Kafka Uuid")
    if not re.fullmatch(r"[A-Za-z0-9_-]*={0,2}", text, re.ASCII):
        raise ValueError(f"{text!r} is not URL-safe base64")
    unpadded = text.rstrip("=")
    try:
        raw = base64.urlsafe_b64decode(unpadded + "=" * (-len(unpadded) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"{text!r} is not URL-safe base64: {e}") from e
    if len(raw) != 16:
        raise ValueError(f"{text!r} decodes to {len(raw)} bytes, not the 16 of a Kafka Uuid")
    return uuid.UUID(bytes=raw)


def random_kafka_uuid() -> uuid.UUID:
    """A random (version 4) Uuid that Kafka would also generate.

    Kafka's ``DirectoryId.random``/``Uuid.randomUuid`` never return the reserved ids (most
    significant long 0 and least significant long below 100: unassigned, lost, migrating, ...)
    nor one whose string starts with ``-`` (it would look like a command-line flag).
    """
    while True:
        value = uuid.uuid4()
        if value.int >> 64 == 0 and (value.int & (2**64 - 1)) < 100:
            continue
        if uuid_to_kafka_string(value).startswith("-"):
            continue
        return value


# --- Java properties text ------------------------------------------------------------------------


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Java ``Properties.load``'s logical lines, each with the 1-based line number it starts on.

    Blank lines and comments (``#`` or ``!`` first, after leading whitespace) are dropped; a line
    ending in an odd number of backslashes continues on the next line, whose leading whitespace
    is skipped (a blank next line ends it).
    """
    natural = _LINE_END_RE.split(text)
    result: list[tuple[int, str]] = []
    pending: list[str] | None = None  # pieces of a logical line being continued
    start_line = 0
    for index, raw in enumerate(natural):
        line = raw.lstrip(_PROPERTIES_WHITESPACE)
        if pending is None:
            if line == "" or line[0] in "#!":
                continue
            start_line = index + 1
            pending = []
        elif line == "":
            # A blank line right after a continuation ends the logical line (Java's LineReader
            # skips blank lines only between logical lines).
            result.append((start_line, "".join(pending)))
            pending = None
            continue
        trailing_backslashes = len(line) - len(line.rstrip("\\"))
        if trailing_backslashes % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        result.append((start_line, "".join(pending)))
        pending = None
    if pending is not None:
        # End of input inside a continuation: Java keeps what it has.
        result.append((start_line, "".join(pending)))
    return result


def _unescape(text: str, path: str, line_number: int) -> str:
    """Java's ``loadConvert``: ``\\t \\n \\r \\f``, ``\\uXXXX``, and ``\\x`` for any other x."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\":
            out.append(char)
            continue
        if i == len(text):
            break  # a lone backslash at the very end escapes nothing; Java drops it too
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if len(digits) != 4 or not re.fullmatch(r"[0-9a-fA-F]{4}", digits, re.ASCII):
                escape = "\\u" + digits
                raise CorruptCheckpointError(
                    f"Malformed \\uxxxx encoding {escape!r} on line {line_number} of {path}",
                    path=path,
                    line_number=line_number,
                )
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(char, char))
    # \uXXXX escapes are UTF-16 code units: join surrogate pairs into one character.
    return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def parse_properties(text: str, *, path: str = "<properties>") -> dict[str, str]:
    """Parse Java properties text as ``java.util.Properties.load`` does.

    Keys end at the first unescaped ``=``, ``:`` or whitespace; one ``=``/``:`` and the
    whitespace around it separate key from value; later duplicates win.

    Raises:
        CorruptCheckpointError: a malformed ``\\uXXXX`` escape (naming ``path`` and the line).
    """
    props: dict[str, str] = {}
    for line_number, line in _logical_lines(text):
        key_end = 0
        value_start = len(line)
        has_separator = False
        preceding_backslash = False
        while key_end < len(line):
            char = line[key_end]
            if not preceding_backslash and char in "=:":
                value_start = key_end + 1
                has_separator = True
                break
            if not preceding_backslash and char in _PROPERTIES_WHITESPACE:
                value_start = key_end + 1
                break
            preceding_backslash = char == "\\" and not preceding_backslash
            key_end += 1
        while value_start < len(line):
            char = line[value_start]
            if char not in _PROPERTIES_WHITESPACE:
                if not has_separator and char in "=:":
                    has_separator = True
                else:
                    break
            value_start += 1
        key = _unescape(line[:key_end], path, line_number)
        props[key] = _unescape(line[value_start:], path, line_number)
    return props


def _escape(text: str, *, is_key: bool) -> str:
    """Java's ``saveConvert`` with Unicode escapes: what ``load`` reads back as ``text``."""
    out: list[str] = []
    for position, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char == " ":
            # Spaces end a key; in a value only a leading one would be lost.
            out.append("\\ " if is_key or position == 0 else " ")
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif char in "=:#!":
            out.append("\\" + char)
        elif " " < char <= "~":
            out.append(char)
        else:
            # Outside printable ASCII: \uXXXX per UTF-16 code unit, so that the file is ASCII and
            # reads back the same whether the reader assumes ISO-8859-1 (Java's load) or UTF-8.
            units = char.encode("utf-16-be", "surrogatepass")
            for i in range(0, len(units), 2):
                out.append(f"\\u{units[i] << 8 | units[i + 1]:04X}")
    return "".join(out)


def _java_date_string(now: dt.datetime) -> str:
    """Java's ``Date.toString`` in UTC: ``Tue Mar 05 10:21:12 UTC 2024`` (English names always)."""
    now = now.astimezone(dt.UTC)
    return (
        f"{_DAY_NAMES[now.weekday()]} {_MONTH_NAMES[now.month - 1]} {now.day:02d} "
        f"{now.hour:02d}:{now.minute:02d}:{now.second:02d} UTC {now.year}"
    )


def format_properties(props: Mapping[str, str], *, now: dt.datetime | None = None) -> str:
    """Java properties text as Kafka writes it: ``#``, ``#<date>``, then sorted ``key=value`` lines.

    ``now`` (default: the current time) only sets the date comment.
    """
    when = now if now is not None else dt.datetime.now(dt.UTC)
    lines = ["#", "#" + _java_date_string(when)]
    for key in sorted(props):
        lines.append(f"{_escape(key, is_key=True)}={_escape(props[key], is_key=False)}")
    return "\n".join(lines) + "\n"


# --- meta.properties -----------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaProperties:
    """The content of one ``meta.properties``: immutable, validated on construction.

    Invariants: ``version`` is 0 or 1; version 1 has both ``cluster_id`` and ``node_id``;
    ``node_id`` fits a Java int. In version 0 ``node_id`` is written as ``broker.id``.

    Crash behaviour: written atomically by :func:`write_meta_properties`; a crash leaves the old
    file or the new one. Thread-safety: immutable, so shareable.
    """

    cluster_id: str | None
    node_id: int | None
    directory_id: uuid.UUID | None = None
    version: int = 1

    def __post_init__(self) -> None:
        if self.version not in (0, 1):
            raise ValueError(f"unknown meta.properties version {self.version} (known: 0, 1)")
        if self.version == 1 and self.cluster_id is None:
            raise ValueError("meta.properties version 1 needs a cluster.id")
        if self.version == 1 and self.node_id is None:
            raise ValueError("meta.properties version 1 needs a node.id")
        if self.node_id is not None and (
            isinstance(self.node_id, bool)
            or not isinstance(self.node_id, int)
            or not _INT32_MIN <= self.node_id <= _INT32_MAX
        ):
            raise ValueError(f"node.id {self.node_id!r} is not a Java int")
        if self.cluster_id is not None and not isinstance(self.cluster_id, str):
            raise ValueError(f"cluster.id {self.cluster_id!r} is not a string")

    @classmethod
    def create(cls, *, node_id: int, cluster_id: str | None = None) -> MetaProperties:
        """Version 1 properties for a new directory: a fresh directory id, and a fresh cluster id
        (a Kafka Uuid string, as ``kafka-storage random-uuid`` makes) unless one is given."""
        if cluster_id is None:
            cluster_id = uuid_to_kafka_string(random_kafka_uuid())
        return cls(cluster_id=cluster_id, node_id=node_id, directory_id=random_kafka_uuid())

    def to_properties(self) -> dict[str, str]:
        """The key/value pairs of the file (Kafka's ``MetaProperties.toProperties``)."""
        props = {_VERSION_PROP: str(self.version)}
        if self.cluster_id is not None:
            props[_CLUSTER_ID_PROP] = self.cluster_id
        if self.node_id is not None:
            props[_BROKER_ID_PROP if self.version == 0 else _NODE_ID_PROP] = str(self.node_id)
        if self.directory_id is not None:
            props[_DIRECTORY_ID_PROP] = uuid_to_kafka_string(self.directory_id)
        return props

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, path: str) -> MetaProperties:
        """Build from parsed key/value pairs as Kafka's ``MetaProperties.Builder(Properties)``.

        Unknown keys are ignored, as Kafka does.

        Raises:
            CorruptCheckpointError: an unknown version, a missing or non-numeric ``node.id``
                (version 1) or ``broker.id``, a missing ``cluster.id`` (version 1), or a
                ``directory.id`` that is not a Kafka Uuid; the message names ``path`` and key.
        """
        version = _int_prop(props, _VERSION_PROP, path, default="0")
        if version not in (0, 1):
            raise CorruptCheckpointError(
                f"{path}: unknown meta.properties version {version} (known: 0, 1)", path=path
            )
        id_prop = _BROKER_ID_PROP if version == 0 else _NODE_ID_PROP
        if version == 1 or id_prop in props:
            node_id: int | None = _int_prop(props, id_prop, path)
        else:
            node_id = None
        cluster_id = props.get(_CLUSTER_ID_PROP)
        if version == 1 and cluster_id is None:
            raise CorruptCheckpointError(f"{path}: cluster.id was not found", path=path)
        directory_id = None
        if _DIRECTORY_ID_PROP in props:
            try:
                directory_id = uuid_from_kafka_string(props[_DIRECTORY_ID_PROP])
            except ValueError as e:
                raise CorruptCheckpointError(
                    f"{path}: unable to read directory.id as a Uuid: {e}", path=path
                ) from e
        return cls(
            cluster_id=cluster_id, node_id=node_id, directory_id=directory_id, version=version
        )


def _int_prop(props: Mapping[str, str], key: str, path: str, default: str | None = None) -> int:
    text = props.get(key, default)
    if text is None:
        raise CorruptCheckpointError(f"{path}: {key} was not found", path=path)
    # The digit count check keeps int() away from its 4300-digit limit on hostile input.
    if (
        not _DECIMAL_RE.fullmatch(text)
        or len(text.lstrip("+-").lstrip("0")) > 10
        or not _INT32_MIN <= int(text) <= _INT32_MAX
    ):
        raise CorruptCheckpointError(
            f"{path}: unable to read {key}={text!r} as a base-10 Java int", path=path
        )
    return int(text)


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The ``meta.properties`` of log directory ``directory``, or ``None`` if it has none.

    Reads the bytes as ISO-8859-1, as Java's ``Properties.load(InputStream)`` does.

    Raises:
        CorruptCheckpointError: the file does not parse or lacks what its version requires.
        StorageIOError: the file exists but cannot be read.
    """
    path = Path(directory) / META_PROPERTIES_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageIOError(f"cannot read {path}: {e}") from e
    props = parse_properties(data.decode("latin-1"), path=str(path))
    return MetaProperties.from_properties(props, path=str(path))


def write_meta_properties(
    directory: Path, meta: MetaProperties, *, now: dt.datetime | None = None
) -> None:
    """Write ``meta`` as the ``meta.properties`` of ``directory``, atomically and durably.

    Raises:
        StorageIOError: the write failed; the previous file, if any, is intact.
    """
    text = format_properties(meta.to_properties(), now=now)
    # _escape leaves only printable ASCII, so the encoding cannot fail.
    atomic_write(Path(directory) / META_PROPERTIES_FILE, text.encode("ascii"))
