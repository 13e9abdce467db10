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
concern (the caller decides; Kafka's coordinator ignores them); an array count is checked
against the bytes left before anything is allocated. Unlike Java, a string that is not valid
UTF-8 is an error here, not replacement characters, and so is a length or count below -1 (Java
reads any negative as null; Kafka's writers write only -1), and the count check counts each
item's fewest bytes, not one. Every failure is a
:class:`~stratalog.records.errors.CorruptMessageError` naming the message, the field path and the
byte position. Writing follows the generated writers: tagged fields only when not at their
default; a non-default value in a field the version lacks is a ``ValueError`` unless the field is
``ignorable`` (then it is dropped, as Kafka drops it).

Speed: each version is read by a Python function generated once from the schema (as Kafka's
generator writes a ``read()`` per message): no per-field version checks, each run of fixed-size
fields read by one ``struct.unpack_from``. Anything it does not read itself (damaged bytes, a
tagged field that is present) is read again by the generic field-by-field reader, which names
what is wrong and where; both give the same values and raise the same errors. The section "the
fast path" below shows a generated reader. :meth:`MessageSchema.decode_tuple` returns the
top-level values as a tuple, for typed layers that build their own objects.

Sans-IO; immutable once loaded but for the caches of generated readers, which a race can only
fill twice with equal functions: safe to share between threads and event loops.
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
        # version -> the generated reader of that version (built on first use; only valid
        # versions get one, so a hit is also the version check). One cache of readers that
        # return dicts (decode), one of readers that return tuples (decode_tuple).
        self._dict_readers: dict[int, _GeneratedReader] = {}
        self._tuple_readers: dict[int, _GeneratedReader] = {}
        self._field_names: dict[int, tuple[str, ...]] = {}

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

        Runs the reader generated for ``version`` (module docstring, "Speed"); on anything it
        does not read itself, :meth:`decode_generic` reads the same bytes, so the result and the
        errors are the generic reader's.

        Raises:
            UnsupportedMessageVersionError: ``version`` is not one of the message's.
            CorruptMessageError: the bytes end early or hold an impossible length, a null in a
                non-nullable field, or a string that is not UTF-8.
        """
        reader = self._dict_readers.get(version)
        if reader is None:
            reader = self._dict_readers[version] = self._generate(version, as_tuple=False)
        try:
            return reader(data, position)
        except _FAST_PATH_FAILURES:
            return self.decode_generic(data, version, position)

    def decode_tuple(
        self, data: bytes | bytearray | memoryview, version: int, position: int = 0
    ) -> tuple[tuple[Any, ...], int]:
        """As :meth:`decode`, the top-level values as a tuple in the order of
        :meth:`field_names` (nested structs are still dicts): what a typed layer builds its
        values from without a dict in between. Raises as :meth:`decode`."""
        reader = self._tuple_readers.get(version)
        if reader is None:
            reader = self._tuple_readers[version] = self._generate(version, as_tuple=True)
        try:
            return reader(data, position)
        except _FAST_PATH_FAILURES:
            values, position = self.decode_generic(data, version, position)
            return tuple(values[name] for name in self.field_names(version)), position

    def field_names(self, version: int) -> tuple[str, ...]:
        """The top-level fields ``version`` has, in schema order (tagged ones included): the
        keys of :meth:`decode`'s dict, the order of :meth:`decode_tuple`'s tuple."""
        names = self._field_names.get(version)
        if names is None:
            self._check_readable(version)
            names = self._field_names[version] = tuple(
                f.name for f in self.root.fields if version in f.versions
            )
        return names

    def decode_generic(
        self, data: bytes | bytearray | memoryview, version: int, position: int = 0
    ) -> tuple[dict[str, Any], int]:
        """:meth:`decode` by the field-by-field reader alone: the generated readers' fallback,
        and their oracle in the tests. Slower; same results, same errors."""
        self._check_readable(version)
        reader = _Reader(data, position, self.name)
        values = reader.struct(self.root, version, version in self.flexible_versions, "")
        return values, reader.position

    def _check_readable(self, version: int) -> None:
        if version not in self.valid_versions:
            raise UnsupportedMessageVersionError(
                f"Can't read version {version} of {self.name} (valid: {self.valid_versions})",
                message=self.name,
                version=version,
            )

    def _generate(self, version: int, as_tuple: bool) -> _GeneratedReader:
        self._check_readable(version)
        return _generate_reader(self, version, as_tuple)

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


# --- the fast path: a reader generated per (message, version) ---------------------------------
#
# Loading a coordinator's partition decodes every record of it, so each version of a message is
# read by a function generated once from the schema, as Kafka's generator writes a read() per
# message, but as Python source: no per-field version checks, and each run of fixed-size fields
# (with the length or count that follows it) read by one struct.unpack_from. For
# OffsetCommitValue version 3 it is, in full:
#
#     def _read_1(data, p):
#         end = len(data)
#         v2, v3, n5, = _unpack_6(data, p)      # '>qih': offset, leaderEpoch, metadata's length
#         p += 14
#         if n5 < 0:                            # metadata is not nullable
#             raise _Fallback
#         e7 = p + n5
#         if e7 > end:
#             raise _Fallback
#         v4 = str(data[p:e7], 'utf-8')
#         p = e7
#         v8, = _unpack_9(data, p)              # '>q': commitTimestamp
#         p += 8
#         return (v2, v3, v4, v8, ), p          # decode_tuple's; decode's returns a dict
#
# A generated reader checks what the generic reader checks, and raises _Fallback (or lets
# struct.error, IndexError, UnicodeDecodeError out) on whatever is wrong, and on what it does
# not read itself: a tagged field that is present (a flexible version's tagged section must be
# empty). decode() then reads the same bytes with _Reader, which says what is wrong and where,
# or reads the tagged fields; so both paths give the same values and raise the same errors
# (tests/unit/records/test_message_schema.py holds them to it).


class _Fallback(Exception):
    """A generated reader met bytes it leaves to the generic reader."""


_FAST_PATH_FAILURES = (struct.error, _Fallback, ValueError, IndexError)
_GeneratedReader = Callable[[Any, int], tuple[Any, int]]

# Fixed-size types as struct format characters (all big-endian, no padding: '>').
_FORMAT_CHARS = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i", "uint32": "I",
    "int64": "q", "float64": "d", "uuid": "16s",
}


def _uvarint_rest(data: Any, position: int, first: int) -> tuple[int, int]:
    """The rest of an unsigned varint whose first byte ``first`` (> 0x7F) was read: as
    _Reader.uvarint, at most 5 bytes, the value masked to 32 bits."""
    raw = first & 0x7F
    for i in range(1, 5):
        byte = data[position]
        position += 1
        raw |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return raw & 0xFFFFFFFF, position
    raise _Fallback


def _min_size(field: FieldSpec, type_name: str, version: int, flexible: bool) -> int:
    """The fewest bytes a value of ``type_name`` (``field``'s type or its array's element type)
    can take: an array count is checked against it before anything is allocated."""
    if type_name.startswith("[]"):
        return 1 if flexible else 4
    char = _FORMAT_CHARS.get(type_name)
    if char is not None:
        return struct.calcsize(">" + char)
    if type_name == "string":
        return 1 if flexible else 2
    if type_name == "bytes":
        return 1 if flexible else 4
    assert field.struct is not None, f"type {type_name} is not supported"
    if field.nullable(version) and type_name == field.type:
        return 1  # the marker of a null struct
    return _struct_min_size(field.struct, version, flexible)


def _struct_min_size(spec: StructSpec, version: int, flexible: bool) -> int:
    size = 1 if flexible else 0  # an empty tagged-field section is one byte
    for f in spec.fields:
        if version in f.versions and not f.is_tagged(version):
            size += _min_size(f, f.type, version, flexible)
    return size


def _generate_reader(schema: MessageSchema, version: int, as_tuple: bool) -> _GeneratedReader:
    source = _ReaderSource(version, version in schema.flexible_versions)
    name = source.struct_function(schema.root, as_tuple)
    namespace = dict(source.constants)
    code = "\n\n".join(source.functions)
    exec(compile(code, f"<{schema.name} v{version} reader>", "exec"), namespace)
    reader: _GeneratedReader = namespace[name]
    return reader


class _ReaderSource:
    """The Python source of one version's reader: a function per struct, and the constants
    (struct unpackers, defaults) they refer to by name."""

    def __init__(self, version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self.functions: list[str] = []
        self.constants: dict[str, Any] = {
            "_Fallback": _Fallback, "_uvarint_rest": _uvarint_rest,
            "_unpack_from": struct.unpack_from, "_deepcopy": copy.deepcopy,
        }
        self._names = 0
        self._structs: dict[tuple[int, bool], str] = {}

    def name(self, prefix: str) -> str:
        self._names += 1
        return f"{prefix}{self._names}"

    def constant(self, value: Any, prefix: str) -> str:
        name = self.name(prefix)
        self.constants[name] = value
        return name

    def struct_function(self, spec: StructSpec, as_tuple: bool) -> str:
        """The name of the function reading ``spec``: ``(values, position)``."""
        key = (id(spec), as_tuple)
        if key in self._structs:
            return self._structs[key]
        function = self._structs[key] = self.name("_read_")
        body = _Body(self, indent=1)
        names = []
        for field in spec.fields:
            if self.version not in field.versions:
                continue
            var = self.name("v")
            names.append((field.name, var))
            if field.is_tagged(self.version):
                # Not in the bytes unless the tagged section says so: the default, a fresh copy.
                body.emit(f"{var} = {body.default(field.default)}")
            else:
                body.field(field, field.type, var)
        body.flush()
        if self.flexible:
            # An empty tagged section is one zero byte; anything else: the generic reader.
            body.emit("if data[p]:")
            body.emit("    raise _Fallback")
            body.emit("p += 1")
        if as_tuple:
            result = "(" + "".join(f"{var}, " for _, var in names) + ")"
        else:
            result = "{" + ", ".join(f"{name!r}: {var}" for name, var in names) + "}"
        lines = [f"def {function}(data, p):", "    end = len(data)", *body.lines,
                 f"    return {result}, p"]
        self.functions.append("\n".join(lines))
        return function


class _Body:
    """The lines of one function, with the run of fixed-size reads not yet emitted."""

    def __init__(self, source: _ReaderSource, indent: int) -> None:
        self.source = source
        self.indent = indent
        self.lines: list[str] = []
        self._formats: list[str] = []
        self._targets: list[str] = []

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def fixed(self, char: str, target: str) -> None:
        self._formats.append(char)
        self._targets.append(target)

    def flush(self) -> None:
        """Emit the pending run: one unpack_from, one position update."""
        if not self._formats:
            return
        unpacker = struct.Struct(">" + "".join(self._formats))
        name = self.source.constant(unpacker.unpack_from, "_unpack_")
        self.emit(f"{', '.join(self._targets)}, = {name}(data, p)")
        self.emit(f"p += {unpacker.size}")
        self._formats.clear()
        self._targets.clear()

    def default(self, value: Any) -> str:
        if isinstance(value, list | dict):
            return f"_deepcopy({self.source.constant(value, '_default_')})"
        return self.source.constant(value, "_default_")

    def length(self, wide: bool) -> str:
        """Read a length or count into a new variable (-1: null): int16/int32, or uvarint-1."""
        n = self.source.name("n")
        if not self.source.flexible:
            self.fixed("i" if wide else "h", n)
            self.flush()
            return n
        self.flush()
        self.emit(f"{n} = data[p]")
        self.emit("p += 1")
        self.emit(f"if {n} > 127:")
        self.emit(f"    {n}, p = _uvarint_rest(data, p, {n})")
        self.emit(f"{n} -= 1")
        return n

    def null_or(self, n: str, nullable: bool, target: str) -> None:
        """``if n < 0``: null if the field may be (and n is -1), else the generic reader; what
        the caller emits next is the else branch (:meth:`end_null_or` closes it)."""
        self.emit(f"if {n} < 0:")
        if not nullable:
            self.emit("    raise _Fallback")
            return
        self.emit(f"    if {n} != -1:")
        self.emit("        raise _Fallback")
        self.emit(f"    {target} = None")
        self.emit("else:")
        self.indent += 1

    def end_null_or(self, nullable: bool) -> None:
        if nullable:
            self.indent -= 1

    def field(self, field: FieldSpec, type_name: str, target: str) -> None:
        """Read a value of ``type_name`` (the field's type, or its array's element) into
        ``target``."""
        version = self.source.version
        is_field = type_name == field.type
        nullable = is_field and field.nullable(version)
        char = _FORMAT_CHARS.get(type_name)
        if char is not None:
            self.fixed(char, target)
        elif field.element is not None and is_field:
            n = self.length(wide=True)
            self.null_or(n, nullable, target)
            size = _min_size(field, field.element, version, self.source.flexible)
            self.emit(f"if {n} * {size} > end - p:")
            self.emit("    raise _Fallback")
            element_char = _FORMAT_CHARS.get(field.element)
            if element_char is not None and len(element_char) == 1:
                self.emit(f"{target} = list(_unpack_from('>%d{element_char}' % {n}, data, p))")
                self.emit(f"p += {size} * {n}")
            else:
                item = self.source.name("i")
                self.emit(f"{target} = []")
                self.emit(f"for _ in range({n}):")
                self.indent += 1
                self.field(field, field.element, item)
                self.flush()
                self.emit(f"{target}.append({item})")
                self.indent -= 1
            self.end_null_or(nullable)
        elif field.struct is not None:
            function = self.source.struct_function(field.struct, as_tuple=False)
            if nullable:
                marker = self.source.name("m")
                self.fixed("b", marker)
                self.flush()
                self.emit(f"if {marker} < 0:")
                self.emit(f"    {target} = None")
                self.emit("else:")
                self.emit(f"    {target}, p = {function}(data, p)")
            else:
                self.flush()
                self.emit(f"{target}, p = {function}(data, p)")
        elif type_name in ("string", "bytes"):
            is_string = type_name == "string"
            n = self.length(wide=not is_string)
            self.null_or(n, nullable, target)
            if is_string and self.source.flexible:
                self.emit(f"if {n} > {_STRING_LENGTH_MAX}:")
                self.emit("    raise _Fallback")
            e = self.source.name("e")
            self.emit(f"{e} = p + {n}")
            self.emit(f"if {e} > end:")
            self.emit("    raise _Fallback")
            if is_string:
                self.emit(f"{target} = str(data[p:{e}], 'utf-8')")
            else:
                self.emit(f"{target} = bytes(data[p:{e}])")
            self.emit(f"p = {e}")
            self.end_null_or(nullable)
        else:
            raise ValueError(f"type {type_name} is not supported")


_NOT_NULL = {
    "array": "count {} for an array that cannot be null",
    "string": "length {} for a string that cannot be null",
    "bytes": "length {} for bytes that cannot be null",
}
_BAD_LENGTH = {"array": "array count {}", "string": "string length {}", "bytes": "bytes length {}"}


class _Reader:
    """A position in a buffer and the reads of every schema type; each failure names the
    message, the field path and the position (of the length or count when that is what is
    wrong, else of the bytes that are)."""

    def __init__(self, data: bytes | bytearray | memoryview, position: int, message: str) -> None:
        self.data = data
        self.position = position
        self.message = message

    def fail(self, path: str, problem: str, position: int | None = None) -> CorruptMessageError:
        at = self.position if position is None else position
        field = path or "message"
        return CorruptMessageError(
            f"{self.message}: {field} at position {at}: {problem}",
            message=self.message,
            position=at,
            field=field,
            problem=problem,
        )

    def take(self, size: int, path: str) -> bytes:
        start = self.position
        end = start + size
        if end > len(self.data):
            raise self.fail(path, f"needs {size} bytes, {len(self.data) - start} left", start)
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

    def null(self, field: FieldSpec, version: int, path: str, start: int, size: int,
             kind: str) -> None:
        """A negative length or count of a ``kind`` ("array", "string", "bytes"): null if the
        field may be null and it is -1. Kafka's writers write no other negative; Java's readers
        read any as null, this one refuses them."""
        if not field.nullable(version):
            raise self.fail(path, _NOT_NULL[kind].format(size), start)
        if size != -1:
            raise self.fail(path, _BAD_LENGTH[kind].format(size), start)

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
                return self.null(field, version, path, start, count, "array")
            # Java's readers check the count against the bytes left too (one byte per item):
            # no allocation from a forged count. Ours counts each item's fewest bytes.
            needed = count * _min_size(field, field.element, version, flexible)
            left = len(self.data) - self.position
            if needed > left:
                raise self.fail(
                    path, f"count {count} needs at least {needed} bytes, {left} left", start
                )
            return [
                self.item(field, field.element, version, flexible, f"{path}[{i}]")
                for i in range(count)
            ]
        if field.struct is not None:
            if field.nullable(version):
                marker = self.uvarint(path) if tagged else self.fixed(_INT8, path)
                if marker <= 0 if tagged else marker < 0:
                    return None
            return self.struct(field.struct, version, flexible, f"{path}.")
        return self.item(field, field.type, version, flexible, path)

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
                return self.null(field, version, path, start, size, "string")
            if size > _STRING_LENGTH_MAX:
                raise self.fail(path, f"string length {size} is over {_STRING_LENGTH_MAX}", start)
            raw = self.take(size, path)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise self.fail(
                    path, f"{size} bytes that are not UTF-8 ({exc.reason})", self.position - size
                ) from None
        if type_name == "bytes":
            size = self.length(path, flexible, wide=True)
            if size < 0:
                return self.null(field, version, path, start, size, "bytes")
            return self.take(size, path)
        if type_name == "uuid":
            return self.take(_UUID_SIZE, path)
        if field.struct is not None:
            return self.struct(field.struct, version, flexible, f"{path}.")
        raise self.fail(path, f"type {type_name} is not supported")
