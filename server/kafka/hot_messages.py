"""The two hot-path message bodies by hand, sans-IO: Produce requests and responses (versions 0
to 11), Fetch requests and responses (versions 4 to 12).

Intuition: every other API goes through kafka-python's schema classes (codec.py); these two are
nearly every request a producer or consumer sends, and building and encoding kafka-python's
generic response containers cost more than anything else of the front end's own per request
(docs/performance.md, "Issue 28: the Kafka listener"). This module reads and writes exactly
the same bytes (tests/unit/kafka/test_hot_messages.py compares both ways with kafka-python's
classes as the oracle, for random messages of every version served), into plain slotted objects whose attribute names and constructor keywords are
kafka-python's (snake_case, as in Kafka's JSON schemas): a handler reads ``request.topics[0]
.partitions[0].fetch_offset`` and builds ``FetchResponse.FetchableTopicResponse.PartitionData(
partition_index=..., records=...)`` the same way with either.

Layouts (Kafka's ``clients/src/main/resources/common/message/{Produce,Fetch}{Request,
Response}.json``; "flexible" is Produce v9+, Fetch v12+: compact strings, arrays and bytes
(uvarint length + 1, 0 for null) and a tagged-field list after every struct)::

    ProduceRequest  transactional_id string? (3+) | acks int16 | timeout_ms int32 |
                    [name string | [index int32 | records bytes?]]
    ProduceResponse [name | [index | error_code int16 | base_offset int64 |
                    log_append_time_ms int64 (2+) | log_start_offset int64 (5+) |
                    (8+) [batch_index int32 | batch_index_error_message string?] |
                    error_message string? | tag 0 (10+): current_leader {leader_id int32,
                    leader_epoch int32}]] | throttle_time_ms int32 (1+) | tag 0 (10+):
                    node_endpoints [node_id int32 | host string | port int32 | rack string?]
    FetchRequest    replica_id int32 | max_wait_ms int32 | min_bytes int32 | max_bytes int32 |
                    isolation_level int8 | session_id int32 (7+) | session_epoch int32 (7+) |
                    [topic string | [partition int32 | current_leader_epoch int32 (9+) |
                    fetch_offset int64 | last_fetched_epoch int32 (12+) | log_start_offset
                    int64 (5+) | partition_max_bytes int32]] | (7+) [topic | [int32]] |
                    rack_id string (11+) | tag 0 (12+): cluster_id string?
    FetchResponse   throttle_time_ms int32 | error_code int16 (7+) | session_id int32 (7+) |
                    [topic | [partition_index int32 | error_code int16 | high_watermark int64 |
                    last_stable_offset int64 | log_start_offset int64 (5+) |
                    aborted_transactions [producer_id int64 | first_offset int64]? |
                    preferred_read_replica int32 (11+) | records bytes? | tags (12+):
                    0 diverging_epoch {epoch int32, end_offset int64}, 1 current_leader
                    {leader_id, leader_epoch}, 2 snapshot_id {end_offset int64, epoch int32}]]

The objects also have the fields of versions not served (``topic_id``, ``replica_state``,
``replica_directory_id``, a Fetch answer's ``node_endpoints``), at their defaults and never
written, so that code written against kafka-python's classes reads and builds them alike.

Tagged fields a request carries that this server does not read are skipped (Kafka ignores
unknown tags too); a response's optional tagged fields are written when set (not None, not
empty), as Kafka's generated code writes them when they differ from their default.

Zero copy: a Fetch answer's ``records`` may be a region of a segment file (anything with
``file_region = True``, ``__len__`` and the send: server/storage/file_region.py) instead of
bytes. :func:`encode_fetch_response` then returns the frame as pieces, the encoded bytes around
the regions, so that the connection writes the regions' bytes from the file
(connection.py); bytes and views are pieces as they are (no copy either).

Errors: :class:`HotDecodeError` (a ValueError) for a body that does not decode, naming the
field; codec.py turns it into its RequestBodyError. Bounds: an array's count or a string's
length larger than the bytes left is refused before anything is allocated for it.

Concurrency: none (pure functions over bytes and plain objects); safe from any thread.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = [
    "FETCH_VERSIONS",
    "PRODUCE_VERSIONS",
    "FetchRequest",
    "FetchResponse",
    "HotDecodeError",
    "ProduceRequest",
    "ProduceResponse",
    "decode_fetch_request",
    "decode_produce_request",
    "encode_fetch_response",
    "encode_produce_response",
]

#: The versions written here (both ends in): what the handlers register.
PRODUCE_VERSIONS = (0, 11)
FETCH_VERSIONS = (4, 12)
_PRODUCE_FLEXIBLE = 9
_FETCH_FLEXIBLE = 12

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PRODUCE_HEAD = struct.Struct(">hi")  # acks, timeout_ms
_FETCH_HEAD = struct.Struct(">iiiib")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation
_SESSION = struct.Struct(">ii")  # session_id, session_epoch
# partition_index, error_code, high_watermark, last_stable_offset
_FETCH_PARTITION_HEAD = struct.Struct(">ihqq")
# index, error_code, base_offset, log_append_time_ms
_PRODUCE_PARTITION_HEAD = struct.Struct(">ihqq")
_PRODUCE_PARTITION_HEAD_V0 = struct.Struct(">ihq")  # before v2: no log_append_time_ms
_ABORTED = struct.Struct(">qq")
_NO_TAGS = b"\x00"


class HotDecodeError(ValueError):
    """A Produce or Fetch body that does not decode: what was expected where."""


# --------------------------------------------------------------------------- the messages


class _Message:
    """A plain message object: keyword arguments for its fields, the defaults of Kafka's schema
    for the rest (a list default is a new list per object). Equality is field by field."""

    __slots__ = ()
    _DEFAULTS: tuple[tuple[str, Any], ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n, _ in self._DEFAULTS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n, _ in self._DEFAULTS)
        return f"{type(self).__name__}({inner})"


#: A list field's default: a new empty list (None stays None: a null array).
_EMPTY = object()


def _message(name: str, defaults: tuple[tuple[str, Any], ...], **nested: type) -> type:
    """A :class:`_Message` class with ``defaults``' fields, and ``nested`` as class attributes
    (kafka-python's nested classes, e.g. ``FetchResponse.FetchableTopicResponse``).

    Its ``__init__`` is generated (keyword-only arguments, one assignment each): a response is
    built per request, and a loop over the fields would cost more than encoding them."""
    params = ", ".join(
        f"{n}=_EMPTY" if isinstance(d, list) else f"{n}={d!r}" for n, d in defaults)
    body = "".join(
        f"    self.{n} = [] if {n} is _EMPTY else {n}\n" if isinstance(d, list)
        else f"    self.{n} = {n}\n" for n, d in defaults) or "    pass\n"
    namespace: dict[str, Any] = {"_EMPTY": _EMPTY}
    exec(f"def __init__(self, *, {params}):\n{body}", namespace)
    return type(name, (_Message,), {"__slots__": tuple(n for n, _ in defaults),
                                    "_DEFAULTS": defaults, "__init__": namespace["__init__"],
                                    **nested})


_LeaderIdAndEpoch = _message("LeaderIdAndEpoch", (("leader_id", -1), ("leader_epoch", -1)))
_BatchIndexAndErrorMessage = _message(
    "BatchIndexAndErrorMessage", (("batch_index", 0), ("batch_index_error_message", None)))
_PartitionProduceResponse = _message(
    "PartitionProduceResponse",
    (("index", 0), ("error_code", 0), ("base_offset", 0), ("log_append_time_ms", -1),
     ("log_start_offset", -1), ("record_errors", []), ("error_message", None),
     ("current_leader", None)),
    LeaderIdAndEpoch=_LeaderIdAndEpoch, BatchIndexAndErrorMessage=_BatchIndexAndErrorMessage)
_TopicProduceResponse = _message(
    "TopicProduceResponse", (("name", ""), ("partition_responses", [])),
    PartitionProduceResponse=_PartitionProduceResponse)
_NodeEndpoint = _message("NodeEndpoint",
                         (("node_id", 0), ("host", ""), ("port", 0), ("rack", None)))


class ProduceResponse(_message(  # type: ignore[misc]
        "ProduceResponse", (("responses", []), ("throttle_time_ms", 0), ("node_endpoints", [])),
        TopicProduceResponse=_TopicProduceResponse, NodeEndpoint=_NodeEndpoint)):
    """kafka-python's ``ProduceResponse``, field for field (module docstring)."""

    __slots__ = ()
    API_KEY = 0


_PartitionProduceData = _message("PartitionProduceData", (("index", 0), ("records", None)))
_TopicProduceData = _message("TopicProduceData",
                             (("name", ""), ("topic_id", None), ("partition_data", [])),
                             PartitionProduceData=_PartitionProduceData)


class ProduceRequest(_message(  # type: ignore[misc]
        "ProduceRequest",
        (("transactional_id", None), ("acks", 0), ("timeout_ms", 0), ("topic_data", [])),
        TopicProduceData=_TopicProduceData)):
    """kafka-python's ``ProduceRequest``, field for field; ``API_VERSION`` the version it was
    decoded at."""

    __slots__ = ("API_VERSION",)
    API_KEY = 0


_FetchPartition = _message(
    "FetchPartition",
    (("partition", 0), ("current_leader_epoch", -1), ("fetch_offset", 0),
     ("last_fetched_epoch", -1), ("log_start_offset", -1), ("partition_max_bytes", 0),
     ("replica_directory_id", None)))
_FetchTopic = _message("FetchTopic", (("topic", ""), ("topic_id", None), ("partitions", [])),
                       FetchPartition=_FetchPartition)
_ForgottenTopic = _message("ForgottenTopic",
                           (("topic", ""), ("topic_id", None), ("partitions", [])))


class FetchRequest(_message(  # type: ignore[misc]
        "FetchRequest",
        (("cluster_id", None), ("replica_id", -1), ("replica_state", None), ("max_wait_ms", 0),
         ("min_bytes", 0),
         ("max_bytes", 0x7FFFFFFF), ("isolation_level", 0), ("session_id", 0),
         ("session_epoch", -1), ("topics", []), ("forgotten_topics_data", []),
         ("rack_id", "")),
        FetchTopic=_FetchTopic, ForgottenTopic=_ForgottenTopic)):
    """kafka-python's ``FetchRequest``, field for field; ``API_VERSION`` the version it was
    decoded at."""

    __slots__ = ("API_VERSION",)
    API_KEY = 1


_AbortedTransaction = _message("AbortedTransaction", (("producer_id", 0), ("first_offset", 0)))
_EpochEndOffset = _message("EpochEndOffset", (("epoch", -1), ("end_offset", -1)))
_SnapshotId = _message("SnapshotId", (("end_offset", -1), ("epoch", -1)))
_PartitionData = _message(
    "PartitionData",
    (("partition_index", 0), ("error_code", 0), ("high_watermark", 0),
     ("last_stable_offset", -1), ("log_start_offset", -1), ("diverging_epoch", None),
     ("current_leader", None), ("snapshot_id", None), ("aborted_transactions", []),
     ("preferred_read_replica", -1), ("records", None)),
    AbortedTransaction=_AbortedTransaction, EpochEndOffset=_EpochEndOffset,
    LeaderIdAndEpoch=_LeaderIdAndEpoch, SnapshotId=_SnapshotId)
_FetchableTopicResponse = _message("FetchableTopicResponse",
                                   (("topic", ""), ("topic_id", None), ("partitions", [])),
                                   PartitionData=_PartitionData)


class FetchResponse(_message(  # type: ignore[misc]
        "FetchResponse",
        (("throttle_time_ms", 0), ("error_code", 0), ("session_id", 0), ("responses", []),
         ("node_endpoints", [])),
        FetchableTopicResponse=_FetchableTopicResponse)):
    """kafka-python's ``FetchResponse``, field for field (module docstring)."""

    __slots__ = ()
    API_KEY = 1


# --------------------------------------------------------------------------- decoding


class _Reader:
    """A cursor over a request body: each read checks that its bytes are there."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def fixed(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        pos = self.pos
        if pos + layout.size > self.end:
            raise HotDecodeError(f"{what} is cut short at byte {pos}")
        self.pos = pos + layout.size
        return layout.unpack_from(self.buf, pos)

    def uvarint(self, what: str) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        value = shift = 0
        while True:
            if pos >= end:
                raise HotDecodeError(f"{what} is cut short at byte {pos}")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 28:
                raise HotDecodeError(f"{what}: a varint longer than 5 bytes at byte {pos}")

    def length(self, flexible: bool, what: str) -> int:
        """A string's, bytes' or array's length (-1: null), checked against what is left."""
        if flexible:
            length = self.uvarint(what) - 1
        else:
            length = self.fixed(_I32, what)[0]
        if length < -1:
            raise HotDecodeError(f"{what} has length {length}")
        if length > self.end - self.pos:
            raise HotDecodeError(f"{what} of length {length} is longer than the "
                                 f"{self.end - self.pos} bytes left")
        return length

    def string(self, flexible: bool, what: str, nullable: bool = False) -> str | None:
        """A string; a null only where the schema allows one (Kafka's generated readers
        refuse "non-nullable field ... was serialized as null")."""
        if flexible:
            length = self.uvarint(what) - 1
        else:
            length = self.fixed(_I16, what)[0]
        if length < 0:
            if length != -1:
                raise HotDecodeError(f"{what} has length {length}")
            if not nullable:
                raise HotDecodeError(f"{what} is null, and that field is not nullable")
            return None
        pos = self.pos
        if pos + length > self.end:
            raise HotDecodeError(f"{what} of length {length} is cut short at byte {pos}")
        self.pos = pos + length
        try:
            return self.buf[pos:pos + length].decode("utf-8")
        except UnicodeDecodeError:
            raise HotDecodeError(f"{what} is not UTF-8") from None

    def bytes_field(self, flexible: bool, what: str) -> bytes | None:
        length = self.length(flexible, what)
        if length < 0:
            return None
        pos = self.pos
        self.pos = pos + length
        return self.buf[pos:pos + length]

    def array_count(self, flexible: bool, what: str, item_bytes_min: int) -> int:
        """An array's count, refused when its items cannot fit in what is left, and when it
        is null (no array of Produce's or Fetch's requests is nullable)."""
        if flexible:
            count = self.uvarint(what) - 1
        else:
            count = self.fixed(_I32, what)[0]
        if count < 0:
            if count == -1:
                raise HotDecodeError(f"{what} is null, and that field is not nullable")
            raise HotDecodeError(f"{what} has {count} items")
        if count * item_bytes_min > self.end - self.pos:
            raise HotDecodeError(f"{what} of {count} items cannot fit in the "
                                 f"{self.end - self.pos} bytes left")
        return count

    def tags(self, what: str) -> dict[int, int]:
        """Skip a tagged-field list; where each tag's value starts."""
        count = self.uvarint(what)
        found: dict[int, int] = {}
        for _ in range(count):
            tag = self.uvarint(what)
            size = self.uvarint(what)
            if size > self.end - self.pos:
                raise HotDecodeError(f"{what}: tag {tag} of {size} bytes is cut short")
            found[tag] = self.pos
            self.pos += size
        return found


def decode_produce_request(body: bytes, pos: int, version: int) -> ProduceRequest:
    """The Produce request of ``version`` (0 to 11) whose body starts at ``pos`` of ``body``.

    Raises:
        HotDecodeError: the body does not decode (the field and byte position named).
    """
    flexible = version >= _PRODUCE_FLEXIBLE
    r = _Reader(body, pos)
    request = ProduceRequest.__new__(ProduceRequest)
    request.API_VERSION = version
    request.transactional_id = (r.string(flexible, "transactional_id", nullable=True)
                                if version >= 3 else None)
    request.acks, request.timeout_ms = r.fixed(_PRODUCE_HEAD, "acks and timeout_ms")
    topics = []
    for i in range(r.array_count(flexible, "topic_data", 2)):
        topic = _TopicProduceData.__new__(_TopicProduceData)
        topic.name = r.string(flexible, "topic_data.name")
        topic.topic_id = None
        partitions = []
        for _ in range(r.array_count(flexible, f"topic_data[{i}].partition_data", 5)):
            partition = _PartitionProduceData.__new__(_PartitionProduceData)
            partition.index = r.fixed(_I32, "partition_data.index")[0]
            partition.records = r.bytes_field(flexible, "partition_data.records")
            if flexible:
                r.tags("partition_data's tagged fields")
            partitions.append(partition)
        topic.partition_data = partitions
        if flexible:
            r.tags("topic_data's tagged fields")
        topics.append(topic)
    request.topic_data = topics
    if flexible:
        r.tags("the request's tagged fields")
    return request


def decode_fetch_request(body: bytes, pos: int, version: int) -> FetchRequest:
    """The Fetch request of ``version`` (4 to 12) whose body starts at ``pos`` of ``body``.

    Raises:
        HotDecodeError: the body does not decode (the field and byte position named).
    """
    flexible = version >= _FETCH_FLEXIBLE
    r = _Reader(body, pos)
    request = FetchRequest.__new__(FetchRequest)
    request.API_VERSION = version
    (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes,
     request.isolation_level) = r.fixed(_FETCH_HEAD, "the fetch's bounds")
    if version >= 7:
        request.session_id, request.session_epoch = r.fixed(_SESSION, "session id and epoch")
    else:
        request.session_id, request.session_epoch = 0, -1
    layout = _fetch_partition_layout(version)
    topics = []
    for i in range(r.array_count(flexible, "topics", 2)):
        topic = _FetchTopic.__new__(_FetchTopic)
        topic.topic = r.string(flexible, "topics.topic")
        topic.topic_id = None
        partitions = []
        for _ in range(r.array_count(flexible, f"topics[{i}].partitions", layout.size)):
            p = _FetchPartition.__new__(_FetchPartition)
            # One unpack of the version's fixed fields; the absent ones are their defaults.
            (p.partition, p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch,
             p.log_start_offset, p.partition_max_bytes) = _FETCH_PARTITION_FIELDS[version](
                r.fixed(layout, "a fetch partition"))
            p.replica_directory_id = None
            if flexible:
                r.tags("a partition's tagged fields")
            partitions.append(p)
        topic.partitions = partitions
        if flexible:
            r.tags("a topic's tagged fields")
        topics.append(topic)
    request.topics = topics
    forgotten = []
    if version >= 7:
        for _ in range(r.array_count(flexible, "forgotten_topics_data", 2)):
            item = _ForgottenTopic.__new__(_ForgottenTopic)
            item.topic = r.string(flexible, "forgotten_topics_data.topic")
            item.topic_id = None
            count = r.array_count(flexible, "forgotten_topics_data.partitions", 4)
            item.partitions = [r.fixed(_I32, "a forgotten partition")[0] for _ in range(count)]
            if flexible:
                r.tags("a forgotten topic's tagged fields")
            forgotten.append(item)
    request.forgotten_topics_data = forgotten
    request.rack_id = r.string(flexible, "rack_id") if version >= 11 else ""
    request.cluster_id = None
    request.replica_state = None
    if flexible:
        tags = r.tags("the request's tagged fields")
        at = tags.get(0)
        if at is not None:
            request.cluster_id = _Reader(body, at).string(True, "cluster_id", nullable=True)
    return request


def _fetch_partition_layout(version: int) -> struct.Struct:
    """A Fetch request partition's fixed fields at ``version``: partition int32,
    current_leader_epoch int32 (9+), fetch_offset int64, last_fetched_epoch int32 (12+),
    log_start_offset int64 (5+), partition_max_bytes int32."""
    return _FETCH_PARTITION_LAYOUTS[version]


_FETCH_PARTITION_LAYOUTS = {
    v: struct.Struct(">i" + ("i" if v >= 9 else "") + "q" + ("i" if v >= 12 else "")
                     + ("q" if v >= 5 else "") + "i")
    for v in range(FETCH_VERSIONS[0], FETCH_VERSIONS[1] + 1)
}


def _fetch_partition_fields(version: int) -> Any:
    """The unpacked fields of ``version``'s layout to all six, with the defaults (-1) of those
    the version does not have."""
    epoch, last_fetched, start = version >= 9, version >= 12, version >= 5

    def fields(values: tuple[int, ...]) -> tuple[int, ...]:
        it = iter(values)
        return (next(it), next(it) if epoch else -1, next(it), next(it) if last_fetched else -1,
                next(it) if start else -1, next(it))

    if epoch and last_fetched and start:
        return lambda values: values
    return fields


_FETCH_PARTITION_FIELDS = {v: _fetch_partition_fields(v) for v in _FETCH_PARTITION_LAYOUTS}


# --------------------------------------------------------------------------- encoding


def _uvarint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    data = value.encode("utf-8")
    if flexible:
        return _uvarint(len(data) + 1) + data
    return _I16.pack(len(data)) + data


def _count(count: int | None, flexible: bool) -> bytes:
    """An array's or bytes' length prefix (None: null)."""
    if count is None:
        return b"\x00" if flexible else b"\xff\xff\xff\xff"
    return _uvarint(count + 1) if flexible else _I32.pack(count)


def _tagged(fields: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field list of ``(tag, encoded value)``, tags ascending."""
    if not fields:
        return _NO_TAGS
    out = bytearray(_uvarint(len(fields)))
    for tag, value in fields:
        out += _uvarint(tag)
        out += _uvarint(len(value))
        out += value
    return bytes(out)


def _leader(leader: Any) -> bytes:
    return _I32.pack(leader.leader_id) + _I32.pack(leader.leader_epoch) + _NO_TAGS


def encode_produce_response(response: Any, version: int) -> bytes:
    """The body of ``response`` (this module's ProduceResponse, or kafka-python's: the same
    fields) at ``version`` (0 to 11)."""
    flexible = version >= _PRODUCE_FLEXIBLE
    out = bytearray(_count(len(response.responses), flexible))
    for topic in response.responses:
        out += _string(topic.name, flexible)
        out += _count(len(topic.partition_responses), flexible)
        for p in topic.partition_responses:
            if version >= 2:
                out += _PRODUCE_PARTITION_HEAD.pack(p.index, p.error_code, p.base_offset,
                                                    p.log_append_time_ms)
            else:
                out += _PRODUCE_PARTITION_HEAD_V0.pack(p.index, p.error_code, p.base_offset)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            if version >= 8:
                errors = p.record_errors
                out += _count(len(errors), flexible)
                for e in errors:
                    out += _I32.pack(e.batch_index)
                    out += _string(e.batch_index_error_message, flexible)
                    if flexible:
                        out += _NO_TAGS
                out += _string(p.error_message, flexible)
            if flexible:
                leader = p.current_leader if version >= 10 else None
                out += _tagged([(0, _leader(leader))] if leader is not None else [])
        if flexible:
            out += _NO_TAGS
    if version >= 1:
        out += _I32.pack(response.throttle_time_ms)
    if flexible:
        endpoints = response.node_endpoints if version >= 10 else None
        if endpoints:
            value = bytearray(_count(len(endpoints), True))
            for e in endpoints:
                value += _I32.pack(e.node_id)
                value += _string(e.host, True)
                value += _I32.pack(e.port)
                value += _string(e.rack, True)
                value += _NO_TAGS
            out += _tagged([(0, bytes(value))])
        else:
            out += _NO_TAGS
    return bytes(out)


def encode_fetch_response(response: Any, version: int) -> list[Any]:
    """The body of ``response`` (this module's FetchResponse, or kafka-python's) at
    ``version`` (4 to 12), as pieces to write in order: encoded bytes, and each partition's
    ``records`` as it is (bytes, a view, or a file region: module docstring)."""
    flexible = version >= _FETCH_FLEXIBLE
    pieces: list[Any] = []
    out = bytearray(_I32.pack(response.throttle_time_ms))
    if version >= 7:
        out += _I16.pack(response.error_code)
        out += _I32.pack(response.session_id)
    out += _count(len(response.responses), flexible)
    for topic in response.responses:
        out += _string(topic.topic, flexible)
        out += _count(len(topic.partitions), flexible)
        for p in topic.partitions:
            out += _FETCH_PARTITION_HEAD.pack(p.partition_index, p.error_code,
                                              p.high_watermark, p.last_stable_offset)
            if version >= 5:
                out += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                out += _count(None, flexible)
            else:
                out += _count(len(aborted), flexible)
                for a in aborted:
                    out += _ABORTED.pack(a.producer_id, a.first_offset)
                    if flexible:
                        out += _NO_TAGS
            if version >= 11:
                out += _I32.pack(p.preferred_read_replica)
            records = p.records
            if records is None:
                out += _count(None, flexible)
            else:
                size = len(records)
                out += _count(size, flexible)
                if size:
                    pieces.append(out)
                    pieces.append(records)
                    out = bytearray()
            if flexible:
                tags = []
                if p.diverging_epoch is not None:
                    d = p.diverging_epoch
                    tags.append((0, _I32.pack(d.epoch) + _I64.pack(d.end_offset) + _NO_TAGS))
                if p.current_leader is not None:
                    tags.append((1, _leader(p.current_leader)))
                if p.snapshot_id is not None:
                    s = p.snapshot_id
                    tags.append((2, _I64.pack(s.end_offset) + _I32.pack(s.epoch) + _NO_TAGS))
                out += _tagged(tags)
        if flexible:
            out += _NO_TAGS
    if flexible:
        out += _NO_TAGS
    pieces.append(out)
    return pieces
