"""Kafka's message schemas (the generator's JSON) and the bytes they describe, read at run time.

Kafka does not hand-write the codecs of its protocol messages and internal records: it writes
each message once as JSON (``clients/src/main/resources/common/message/*.json``,
``group-coordinator/src/main/resources/common/message/*.json``) and generates Java from it
(``generator/src/main/java/org/apache/kafka/message/MessageDataGenerator.java`` for the bytes,
``JsonConverterGenerator.java`` for the JSON that tools print). This module does the same from the
same JSON, interpreted instead of generated: :class:`MessageSchema` loads one file, and encodes,
decodes and prints any version of its message. The files we use are copied, license header and
all, into ``records/schemas/`` (docs/groups.md lists them and the Kafka commit).

The byte layout, per field in schema order, present when the version is in the field's
``versions`` (all big-endian; "flexible" means the version is in the message's
``flexibleVersions``)::

    bool, int8, int16, uint16, int32, int64, float64   1, 1, 2, 2, 4, 8, 8 bytes
    uuid                                                16 bytes
    string        int16 length (-1: null), UTF-8        flexible: uvarint length+1 (0: null)
    bytes         int32 length (-1: null)               flexible: uvarint length+1 (0: null)
    []T           int32 count (-1: null), then T each   flexible: uvarint count+1 (0: null)
    struct        its fields (nullable: an int8 marker first, -1 null, 1 present)
    flexible: after a struct's fields, its tagged fields:
                  uvarint count, then per field (ascending tags): uvarint tag, uvarint size,
                  the value (a nullable struct's marker is a uvarint there: 0 null, 1 present)

For example OffsetCommitValue version 3 (offset 100, leader epoch 5, metadata "", commit time
1700000000000) is ``00 00 00 00 00 00 00 64 | 00 00 00 05 | 00 00 | 00 00 01 8b cf e5 68 00``.

Values are plain dicts keyed by the field's camelCase name (Kafka's ``camelCaseName``: the
schema's name with its first letter lowered, ``GroupId`` -> ``groupId``), in schema order; nested
structs are dicts, arrays lists, ``bytes`` are ``bytes``, ``uuid`` is 16 ``bytes``. A field the
version lacks is absent from a decoded dict; an encoder fills a missing field with its default.

Reading follows the generated Java readers: a version outside ``validVersions`` is refused
("Can't read version 5 of OffsetCommitValue"); a tagged field of an unknown tag is skipped (Java
keeps it as an unknown tagged field); bytes left after the message are not the message's
concern (the caller decides; Kafka's coordinator ignores them). Unlike Java, a string that is not
valid UTF-8 is an error here, not replacement characters. Every failure is a
:class:`~stratalog.records.errors.CorruptMessageError` naming the message, the field path and the
byte position. Writing follows the generated writers: tagged fields only when not at their
default; a non-default value in a field the version lacks is a ``ValueError`` unless the field is
``ignorable`` (then it is dropped, as Kafka drops it).

Speed: a non-flexible version is read by closures compiled once per version from the schema
(no per-field version checks, ``struct.unpack_from`` off the buffer); the field-by-field reader
runs for flexible versions and, on any failure of the fast path, again over the same
bytes to name what is wrong and where, so both paths raise the same errors.

Sans-IO; immutable once loaded but for the cache of compiled readers, which a race can only
fill twice with equal closures: safe to share between threads and event loops.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CorruptMessageError, UnsupportedMessageVersionError

__all__ = ["FieldSpec", "MessageSchema", "StructSpec", "Versions", "jackson_json"]

_MAX_VERSION = 0x7FFF
_STRING_LENGTH_MAX = 0x7FFF  # Java's readers refuse longer strings ("had invalid length")

# Fixed-size types: struct format and Kafka's JSON default.
_FIXED = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_INT16 = _FIXED["int16"]
_INT32 = _FIXED["int32"]
_INT8 = _FIXED["int8"]
_UUID_SIZE = 16
_ZERO_UUID = bytes(_UUID_SIZE)


@dataclass(frozen=True)
class Versions:
    """An inclusive version range as the schemas write it: ``"0+"``, ``"1"``, ``"0-4"``,
    ``"none"`` (empty: ``low > high``)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)
        text = text.strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX_VERSION)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    def __str__(self) -> str:
        if self.low > self.high:
            return "none"
        if self.high == _MAX_VERSION:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class StructSpec:
    """A struct: the message itself, a ``commonStructs`` entry or a field's inline ``fields``."""

    name: str
    fields: tuple[FieldSpec, ...]


@dataclass(frozen=True)
class FieldSpec:
    """One field of a struct, as its schema entry declares it.

    ``type`` is the schema's type string (``int32``, ``string``, ``[]int32``,
    ``[]TopicPartition``, ``ClassicMemberMetadata``); ``element`` the type of an array's items;
    ``struct`` the spec of a struct or struct array's items.
    """

    name: str
    type: str
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    ignorable: bool
    default: Any
    element: str | None
    struct: StructSpec | None

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged_versions

    def nullable(self, version: int) -> bool:
        return version in self.nullable_versions


def camel_case_name(name: str) -> str:
    """Kafka's ``FieldSpec.camelCaseName``: the schema's name with its first letter lowered."""
    return name[:1].lower() + name[1:]


_COMMENTS = re.compile(r"^\s*//.*$", re.MULTILINE)


def _is_struct_type(type_name: str) -> bool:
    return type_name[:1].isupper()


def _default_of(entry: Mapping[str, Any], type_name: str, element: str | None) -> Any:
    """The field's default as Kafka's generator reads ``"default"`` (absent: 0, "", empty)."""
    raw = entry.get("default")
    if element is not None:
        return []
    if _is_struct_type(type_name):
        return None if raw in (None, "null") and "nullableVersions" in entry else {}
    if type_name in ("string", "bytes"):
        if raw == "null":
            return None
        if type_name == "bytes":
            return b""
        return "" if raw is None else str(raw)
    if type_name == "uuid":
        return _ZERO_UUID
    if type_name == "bool":
        return raw in (True, "true")
    if type_name == "float64":
        return float(raw) if raw is not None else 0.0
    if raw is None:
        return 0
    text = str(raw)
    return int(text, 16) if text.lower().startswith("0x") else int(text)


class MessageSchema:
    """One Kafka message schema: encode, decode and print (as Kafka's JsonConverter) any of its
    versions.

    Built with :meth:`from_json` from the text of a schema file. Immutable.
    """

    def __init__(
        self, name: str, valid_versions: Versions, flexible_versions: Versions, root: StructSpec
    ) -> None:
        self.name = name
        self.valid_versions = valid_versions
        self.flexible_versions = flexible_versions
        self.root = root
        # version -> the fast reader of a non-flexible version (built on first use).
        self._fast_readers: dict[int, Callable[[Any, int], tuple[dict[str, Any], int]]] = {}

    @classmethod
    def from_json(cls, text: str) -> MessageSchema:
        """Parse a schema file's text (``//`` comment lines allowed, as Kafka's files have)."""
        doc = json.loads(_COMMENTS.sub("", text))
        common: dict[str, list[Mapping[str, Any]]] = {
            s["name"]: s["fields"] for s in doc.get("commonStructs", [])
        }
        built: dict[str, StructSpec] = {}

        def struct_of(name: str, entries: list[Mapping[str, Any]]) -> StructSpec:
            return StructSpec(name, tuple(field_of(e) for e in entries))

        def field_of(entry: Mapping[str, Any]) -> FieldSpec:
            type_name = entry["type"]
            element = type_name[2:] if type_name.startswith("[]") else None
            item = element if element is not None else type_name
            spec: StructSpec | None = None
            if _is_struct_type(item):
                if "fields" in entry:
                    spec = struct_of(item, entry["fields"])
                elif item in built:
                    spec = built[item]
                else:
                    spec = built[item] = struct_of(item, common[item])
            tag = entry.get("tag")
            return FieldSpec(
                name=camel_case_name(entry["name"]),
                type=type_name,
                versions=Versions.parse(entry["versions"]),
                nullable_versions=Versions.parse(entry.get("nullableVersions")),
                tagged_versions=Versions.parse(entry.get("taggedVersions")),
                tag=int(tag) if tag is not None else None,
                ignorable=bool(entry.get("ignorable", False)),
                default=_default_of(entry, item if element is None else type_name, element),
                element=element,
                struct=spec,
            )

        root = struct_of(doc["name"], doc.get("fields", []))
        return cls(
            doc["name"],
            Versions.parse(doc["validVersions"]),
            Versions.parse(doc.get("flexibleVersions", "none")),
            root,
        )

    def __repr__(self) -> str:
        return f"MessageSchema({self.name}, versions {self.valid_versions})"

    # --- encoding -----------------------------------------------------------------------------

    def encode(self, values: Mapping[str, Any], version: int) -> bytes:
        """The message's bytes at ``version`` (without any version prefix).

        Raises:
            ValueError: ``version`` is not valid for the message, a value does not fit its type,
                or a non-default value is set in a non-ignorable field the version lacks.
        """
        if version not in self.valid_versions:
            raise ValueError(f"Can't write version {version} of {self.name}")
        out = bytearray()
        self._write_struct(out, self.root, values, version, version in self.flexible_versions)
        return bytes(out)

    def _write_struct(
        self,
        out: bytearray,
        spec: StructSpec,
        values: Mapping[str, Any],
        version: int,
        flexible: bool,
    ) -> None:
        tagged: list[tuple[int, bytes]] = []
        for field in spec.fields:
            value = values.get(field.name, field.default)
            if version not in field.versions:
                if not field.ignorable and value != field.default:
                    raise ValueError(
                        f"Attempted to write a non-default {field.name} at version {version} "
                        f"of {self.name}"
                    )
                continue
            if field.is_tagged(version):
                if value == field.default:
                    continue
                buf = bytearray()
                self._write_value(buf, field, value, version, flexible, tagged=True)
                tagged.append((field.tag, bytes(buf)))  # type: ignore[arg-type]
                continue
            self._write_value(out, field, value, version, flexible, tagged=False)
        if flexible:
            tagged.sort()
            out += _uvarint(len(tagged))
            for tag, data in tagged:
                out += _uvarint(tag)
                out += _uvarint(len(data))
                out += data

    def _write_value(
        self,
        out: bytearray,
        field: FieldSpec,
        value: Any,
        version: int,
        flexible: bool,
        tagged: bool,
    ) -> None:
        if value is None and not field.nullable(version):
            raise ValueError(f"non-nullable field {field.name} of {self.name} is None")
        if field.element is not None:
            if value is None:
                out += _uvarint(0) if flexible else _INT32.pack(-1)
                return
            out += _uvarint(len(value) + 1) if flexible else _INT32.pack(len(value))
            for item in value:
                self._write_item(out, field, field.element, item, version, flexible)
            return
        if field.struct is not None:
            if field.nullable(version):
                if value is None:
                    out += _uvarint(0) if tagged else _INT8.pack(-1)
                    return
                out += _uvarint(1) if tagged else _INT8.pack(1)
            self._write_struct(out, field.struct, value, version, flexible)
            return
        self._write_item(out, field, field.type, value, version, flexible)

    def _write_item(
        self,
        out: bytearray,
        field: FieldSpec,
        type_name: str,
        value: Any,
        version: int,
        flexible: bool,
    ) -> None:
        fixed = _FIXED.get(type_name)
        if fixed is not None:
            try:
                out += fixed.pack(value)
            except struct.error as exc:
                raise ValueError(f"{field.name} of {self.name}: {value!r} is not a {type_name}") from exc
        elif type_name == "string":
            if value is None:
                out += _uvarint(0) if flexible else _INT16.pack(-1)
                return
            data = value.encode("utf-8")
            if len(data) > _STRING_LENGTH_MAX:
                raise ValueError(
                    f"{field.name} of {self.name} is {len(data)} bytes, over {_STRING_LENGTH_MAX}"
                )
            out += _uvarint(len(data) + 1) if flexible else _INT16.pack(len(data))
            out += data
        elif type_name == "bytes":
            if value is None:
                out += _uvarint(0) if flexible else _INT32.pack(-1)
                return
            out += _uvarint(len(value) + 1) if flexible else _INT32.pack(len(value))
            out += value
        elif type_name == "uuid":
            if len(value) != _UUID_SIZE:
                raise ValueError(f"{field.name} of {self.name}: a uuid is 16 bytes")
            out += value
        elif field.struct is not None:
            self._write_struct(out, field.struct, value, version, flexible)
        else:
            raise ValueError(f"{field.name} of {self.name}: type {type_name} is not supported")

    # --- decoding -----------------------------------------------------------------------------

    def decode(
        self, data: bytes | bytearray | memoryview, version: int, position: int = 0
    ) -> tuple[dict[str, Any], int]:
        """Read the message at ``version`` from ``data[position:]``; return ``(values,
        next_position)``. Bytes after the message are left to the caller.

        Raises:
            UnsupportedMessageVersionError: ``version`` is not one of the message's.
            CorruptMessageError: the bytes end early or hold an impossible length, a null in a
                non-nullable field, or a string that is not UTF-8.
        """
        if version not in self.valid_versions:
            raise UnsupportedMessageVersionError(
                f"Can't read version {version} of {self.name} (valid: {self.valid_versions})",
                message=self.name,
                version=version,
            )
        flexible = version in self.flexible_versions
        if not flexible:
            fast = self._fast_readers.get(version)
            if fast is None:
                fast = self._fast_readers[version] = _compile_struct(self.root, version)
            try:
                return fast(data, position)
            except _FAST_PATH_FAILURES:
                pass  # the careful reader below says what is wrong, and where
        reader = _Reader(data, position, self.name)
        values = reader.struct(self.root, version, flexible, "")
        return values, reader.position

    # --- JSON, as Kafka's generated JsonConverter writes it ------------------------------------

    def to_json_tree(self, values: Mapping[str, Any], version: int) -> dict[str, Any]:
        """``values`` as Kafka's ``<Message>JsonConverter.write(message, version)`` builds its
        tree: the version's fields in schema order, tagged fields only when not at their default,
        ``bytes`` as base64, ``uuid`` as Kafka's ``Uuid.toString`` (URL-safe base64, no
        padding). Serialize it with :func:`jackson_json`."""
        return _struct_json(self.root, values, version)


def _struct_json(spec: StructSpec, values: Mapping[str, Any], version: int) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for field in spec.fields:
        if version not in field.versions:
            continue
        value = values.get(field.name, field.default)
        if field.is_tagged(version) and value == field.default:
            continue
        tree[field.name] = _value_json(field, field.type, value, version)
    return tree


def _value_json(field: FieldSpec, type_name: str, value: Any, version: int) -> Any:
    if value is None:
        return None
    if field.element is not None and type_name == field.type:
        return [_value_json(field, field.element, item, version) for item in value]
    if field.struct is not None:
        return _struct_json(field.struct, value, version)
    if type_name == "bytes":
        return base64.b64encode(value).decode("ascii")
    if type_name == "uuid":
        return base64.urlsafe_b64encode(value).decode("ascii").rstrip("=")
    return value


def jackson_json(tree: Any) -> str:
    """``tree`` as Jackson's ``JsonNode.toString()`` writes it (what Kafka's tools print):
    no spaces, non-ASCII characters as they are, control characters as ``\\b \\t \\n \\f \\r``
    or ``\\u00XX`` with upper-case hex (Python's ``json`` writes lower-case)."""
    if tree is None:
        return "null"
    if tree is True:
        return "true"
    if tree is False:
        return "false"
    if isinstance(tree, int | float):
        return json.dumps(tree)
    if isinstance(tree, str):
        return _jackson_string(tree)
    if isinstance(tree, Mapping):
        return "{" + ",".join(
            f"{_jackson_string(k)}:{jackson_json(v)}" for k, v in tree.items()
        ) + "}"
    return "[" + ",".join(jackson_json(v) for v in tree) + "]"


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _jackson_string(text: str) -> str:
    def escape(match: re.Match[str]) -> str:
        char = match.group()
        return _SHORT_ESCAPES.get(char) or f"\\u{ord(char):04X}"

    return '"' + _NEEDS_ESCAPE.sub(escape, text) + '"'


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# --- the fast path: a reader compiled per (struct, version) -----------------------------------
#
# Loading a coordinator's partition decodes every record of it, so the common case (a
# non-flexible version, well-formed bytes) runs through closures specialised once per version:
# no per-field version checks, struct.unpack_from straight off the buffer. They check nothing
# beyond what Python raises by itself (struct.error, a short slice); on any failure decode()
# reads the same bytes again with _Reader, whose error names the field and the position.


class _Short(Exception):
    """The fast path's only own error: a length that runs past the end of the buffer."""


_FAST_PATH_FAILURES = (struct.error, _Short, UnicodeDecodeError, ValueError, IndexError)
_Read = Callable[[Any, int], tuple[Any, int]]


def _compile_struct(spec: StructSpec, version: int) -> Callable[[Any, int], tuple[dict, int]]:
    plan = [(f.name, _compile_field(f, version)) for f in spec.fields if version in f.versions]

    def read_struct(data: Any, position: int) -> tuple[dict[str, Any], int]:
        values = {}
        for name, read in plan:
            values[name], position = read(data, position)
        return values, position

    return read_struct


def _compile_field(field: FieldSpec, version: int) -> _Read:
    nullable = field.nullable(version)
    if field.element is not None:
        item = (_compile_struct(field.struct, version) if field.struct is not None
                else _compile_item(field.element))
        unpack_count = _INT32.unpack_from

        def read_array(data: Any, position: int) -> tuple[Any, int]:
            (count,) = unpack_count(data, position)
            position += 4
            if count < 0:
                if not nullable:
                    raise _Short
                return None, position
            if count > len(data) - position:
                raise _Short
            items = []
            for _ in range(count):
                value, position = item(data, position)
                items.append(value)
            return items, position

        return read_array
    if field.struct is not None:
        inner = _compile_struct(field.struct, version)
        if not nullable:
            return inner
        unpack_marker = _INT8.unpack_from

        def read_nullable_struct(data: Any, position: int) -> tuple[Any, int]:
            if unpack_marker(data, position)[0] < 0:
                return None, position + 1
            return inner(data, position + 1)

        return read_nullable_struct
    read = _compile_item(field.type)
    if field.type in ("string", "bytes") and not nullable:

        def read_not_null(data: Any, position: int) -> tuple[Any, int]:
            value, position = read(data, position)
            if value is None:
                raise _Short
            return value, position

        return read_not_null
    return read


def _compile_item(type_name: str) -> _Read:
    fixed = _FIXED.get(type_name)
    if fixed is not None:
        unpack, size = fixed.unpack_from, fixed.size
        return lambda data, position: (unpack(data, position)[0], position + size)
    if type_name in ("string", "bytes"):
        is_string = type_name == "string"
        length_format = _INT16 if is_string else _INT32
        unpack_length, width = length_format.unpack_from, length_format.size

        def read_sized(data: Any, position: int) -> tuple[Any, int]:
            (size,) = unpack_length(data, position)
            position += width
            if size < 0:
                return None, position
            end = position + size
            if end > len(data):
                raise _Short
            raw = bytes(data[position:end])
            return (raw.decode("utf-8") if is_string else raw), end

        return read_sized
    if type_name == "uuid":

        def read_uuid(data: Any, position: int) -> tuple[bytes, int]:
            end = position + _UUID_SIZE
            if end > len(data):
                raise _Short
            return bytes(data[position:end]), end

        return read_uuid
    raise ValueError(f"type {type_name} is not supported")


class _Reader:
    """A position in a buffer and the reads of every schema type; each failure names the
    message, the field path and the position."""

    def __init__(self, data: bytes | bytearray | memoryview, position: int, message: str) -> None:
        self.data = data
        self.position = position
        self.message = message

    def fail(self, path: str, problem: str, position: int | None = None) -> CorruptMessageError:
        at = self.position if position is None else position
        return CorruptMessageError(
            f"{self.message}: {path or 'message'} at position {at}: {problem}",
            message=self.message,
            position=at,
        )

    def take(self, size: int, path: str) -> bytes:
        start = self.position
        end = start + size
        if end > len(self.data):
            raise self.fail(
                path, f"needs {size} bytes, only {len(self.data) - start} left", start
            )
        self.position = end
        return bytes(self.data[start:end])

    def fixed(self, fmt: struct.Struct, path: str) -> Any:
        return fmt.unpack(self.take(fmt.size, path))[0]

    def uvarint(self, path: str) -> int:
        # Kafka's ByteUtils.readUnsignedVarint: at most 5 bytes.
        start = self.position
        raw = 0
        for i in range(5):
            if self.position >= len(self.data):
                raise self.fail(path, "the buffer ends inside an unsigned varint", start)
            byte = self.data[self.position]
            self.position += 1
            raw |= (byte & 0x7F) << (7 * i)
            if byte < 0x80:
                return raw & 0xFFFFFFFF
        raise self.fail(path, "unsigned varint is longer than 5 bytes", start)

    def length(self, path: str, flexible: bool, wide: bool) -> int:
        """A length or count: -1 for null. Flexible: uvarint n+1; else int16 (strings) or
        int32 (bytes, arrays)."""
        if flexible:
            return self.uvarint(path) - 1
        return self.fixed(_INT32 if wide else _INT16, path)

    def struct(self, spec: StructSpec, version: int, flexible: bool, path: str) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for field in spec.fields:
            if version not in field.versions:
                continue
            if field.is_tagged(version):
                # A fresh copy: the caller owns what decode returns, the spec's default is shared.
                values[field.name] = copy.deepcopy(field.default)
                continue
            values[field.name] = self.value(
                field, version, flexible, f"{path}{field.name}", tagged=False
            )
        if flexible:
            by_tag = {f.tag: f for f in spec.fields if f.is_tagged(version)}
            count = self.uvarint(f"{path}taggedFields")
            for _ in range(count):
                tag = self.uvarint(f"{path}taggedFields")
                size = self.uvarint(f"{path}taggedFields[{tag}]")
                field = by_tag.get(tag)
                if field is None:  # unknown tag: a newer writer's field, skipped
                    self.take(size, f"{path}taggedFields[{tag}]")
                    continue
                end = self.position + size
                if end > len(self.data):
                    raise self.fail(
                        f"{path}{field.name}",
                        f"tagged field of {size} bytes, only {len(self.data) - self.position} "
                        "left",
                    )
                values[field.name] = self.value(
                    field, version, flexible, f"{path}{field.name}", tagged=True
                )
                if self.position != end:
                    raise self.fail(
                        f"{path}{field.name}",
                        f"tagged field read {self.position - end + size} bytes of its {size}",
                    )
        return values

    def value(
        self, field: FieldSpec, version: int, flexible: bool, path: str, tagged: bool
    ) -> Any:
        if field.element is not None:
            start = self.position
            count = self.length(path, flexible, wide=True)
            if count < 0:
                return self.null(field, version, path, start)
            if count > len(self.data) - self.position:
                # Java's readers check this too: no allocation from a forged count.
                raise self.fail(
                    path,
                    f"array of {count} items, only {len(self.data) - self.position} bytes left",
                    start,
                )
            return [
                self.item(field, field.element, version, flexible, f"{path}[{i}]")
                for i in range(count)
            ]
        if field.struct is not None:
            if field.nullable(version):
                start = self.position
                marker = self.uvarint(path) if tagged else self.fixed(_INT8, path)
                if marker <= 0 if tagged else marker < 0:
                    return self.null(field, version, path, start)
            return self.struct(field.struct, version, flexible, f"{path}.")
        return self.item(field, field.type, version, flexible, path)

    def null(self, field: FieldSpec, version: int, path: str, start: int) -> None:
        if not field.nullable(version):
            raise self.fail(path, "null in a non-nullable field", start)
        return None

    def item(
        self, field: FieldSpec, type_name: str, version: int, flexible: bool, path: str
    ) -> Any:
        fixed = _FIXED.get(type_name)
        if fixed is not None:
            return self.fixed(fixed, path)
        start = self.position
        if type_name == "string":
            size = self.length(path, flexible, wide=False)
            if size < 0:
                return self.null(field, version, path, start)
            if size > _STRING_LENGTH_MAX:
                raise self.fail(path, f"string length {size} is over {_STRING_LENGTH_MAX}", start)
            raw = self.take(size, path)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self.fail(path, f"string is not UTF-8 ({exc.reason})", start) from None
        if type_name == "bytes":
            size = self.length(path, flexible, wide=True)
            if size < 0:
                return self.null(field, version, path, start)
            return self.take(size, path)
        if type_name == "uuid":
            return self.take(_UUID_SIZE, path)
        if field.struct is not None:
            return self.struct(field.struct, version, flexible, f"{path}.")
        raise self.fail(path, f"type {type_name} is not supported")
