"""The connector's options: parsed once, checked against each other, named in every error.

Spark hands a data source its options as strings in a case-insensitive map (``startingoffsets``
and ``startingOffsets`` are the same key). This module turns them into frozen values that the
planner ships to the executors (everything here pickles), and refuses what Spark's own Kafka
source refuses, with an :class:`~stratalog.spark.errors.OptionError` naming the option:

* an unknown option (a misspelt ``startingOffset`` would otherwise read from the wrong place);
* not exactly one of ``subscribe``, ``subscribePattern`` and ``assign``;
* JSON that does not parse, or does not have the documented shape;
* ``latest`` as a batch query's start, ``earliest`` as its end, any ending option on a stream;
* numbers out of range (``minPartitions`` 0, a negative timestamp, ...);
* an ``isolationLevel`` other than ``read_committed``/``read_uncommitted``, or its Kafka-style
  alias ``kafka.isolation.level`` given with another value.

Option names, defaults and meanings follow Spark's Kafka source (docs/spark.md has the table);
``target`` stands in for ``kafka.bootstrap.servers`` (one server, or a cluster's servers
comma-separated: each read goes to its partition's leader through the client library) and
``path`` selects file mode.

Offset specifications keep the option they came from, so that an error found later (a timestamp
with no matching record, an offset past the log end) still names the option the user wrote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratalog.client import (
    Client,
    Credentials,
    IsolationLevel,
    SyncClient,
    TlsConfig,
    TopicPartition,
)
from stratalog.client.bootstrap import bootstrap_targets
from stratalog.client.credentials import credentials_from

from .errors import OptionError

__all__ = [
    "DEFAULT_FETCH_BYTES_MAX",
    "DEFAULT_MAX_TRIGGER_DELAY_MS",
    "DEFAULT_REQUEST_TIMEOUT_MS",
    "EARLIEST",
    "LATEST",
    "ConnectionOptions",
    "OffsetSpec",
    "ReadOptions",
    "Subscription",
    "WriteOptions",
    "parse_duration_ms",
    "parse_read_options",
    "parse_write_options",
]

#: Bytes asked for per fetch by a read task (the server caps it at its fetch_max_bytes_max).
DEFAULT_FETCH_BYTES_MAX = 4 * 1024 * 1024
#: Deadline of one RPC made by the connector.
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
#: Spark's Kafka source default for maxTriggerDelay (15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

#: The special offsets of offset JSON, as in Kafka's: -2 the log start, -1 the log end.
EARLIEST = -2
LATEST = -1

# Spark's Kafka source takes the consumer's setting under Spark's "kafka." prefix; accepted as
# an alias, so a job moved from format("kafka") keeps its isolation.
_ISOLATION_LEVEL_ALIAS = "kafka.isolation.level"
_ISOLATION_LEVELS = {
    "read_committed": IsolationLevel.READ_COMMITTED,
    "read_uncommitted": IsolationLevel.READ_UNCOMMITTED,
}

# Every option the connector knows, by its documented spelling. Spark lower-cases keys, so
# lookups go through the lower-case form and messages use the documented one.
_CONNECTION_OPTIONS = (
    "target",
    "requestTimeoutMs",
    "tls",
    "tls.rootCertificates",
    "tls.certificateChain",
    "tls.privateKey",
    "tls.serverName",
    "user",
    "passwordFile",
    "tokenFile",
    "allowPlaintextCredentials",
)
_READ_OPTIONS = (
    *_CONNECTION_OPTIONS,
    "path",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "fetchMaxBytes",
    "isolationLevel",
    _ISOLATION_LEVEL_ALIAS,
)
_WRITE_OPTIONS = (
    *_CONNECTION_OPTIONS,
    "topic",
    "compression",
    "lingerMs",
    "batchBytesMax",
    "transactionalIdPrefix",
    "transactionTimeoutMs",
    "createTopic",
    "createTopicPartitions",
)
#: A transactional id is at most 32767 bytes (Kafka's string); the connector appends
#: "-<partition id>" (at most 11 bytes) to the prefix.
TRANSACTIONAL_ID_PREFIX_BYTES_MAX = 32767 - 11
#: transaction_timeout_ms is an int32 on the wire. The server refuses a timeout above its own
#: transaction.max.timeout.ms (15 min by default) when a task starts (INVALID_TRANSACTION_TIMEOUT).
_TRANSACTION_TIMEOUT_MS_MAX = 2**31 - 1
# Keys Spark itself may put into a source's or sink's option map.
_SPARK_OWN_OPTIONS = ("checkpointLocation", "queryName", "path")

_ENDING_OPTIONS = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS_MS = {
    None: 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000,
    "h": 3_600_000, "d": 86_400_000,
}
_INT64_MAX = (1 << 63) - 1


class _Options:
    """Case-insensitive, read-only access to Spark's option map, by documented name."""

    def __init__(self, options: Mapping[str, str], known: tuple[str, ...]) -> None:
        self._values = {str(k).lower(): v for k, v in options.items()}
        self._known = {name.lower(): name for name in known}
        own = {name.lower() for name in _SPARK_OWN_OPTIONS}
        unknown = sorted(k for k in self._values if k not in self._known and k not in own)
        if unknown:
            raise OptionError(
                unknown[0],
                f"unknown option (options given: {', '.join(sorted(self._values))}); "
                f"the connector knows {', '.join(known)}",
            )

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        if value is None:
            return None
        value = str(value)
        return value if value.strip() else None

    def has(self, name: str) -> bool:
        return self.get(name) is not None

    def given(self, name: str) -> bool:
        """Whether the option is in the map at all (even blank)."""
        return name.lower() in self._values

    def bool(self, name: str, default: bool) -> bool:
        value = self.get(name)
        if value is None:
            return default
        lowered = value.strip().lower()
        if lowered not in ("true", "false"):
            raise OptionError(name, f"must be 'true' or 'false', got {value!r}")
        return lowered == "true"

    def int(self, name: str, minimum: int, maximum: int = _INT64_MAX) -> int | None:
        value = self.get(name)
        if value is None:
            return None
        return _parse_int(name, value, minimum, maximum)


def _parse_int(name: str, value: str, minimum: int, maximum: int = _INT64_MAX) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(name, f"must be an integer, got {value!r}") from None
    if not minimum <= number <= maximum:
        raise OptionError(name, f"must be in [{minimum}, {maximum}], got {number}")
    return number


def parse_duration_ms(name: str, value: str) -> int:
    """A duration such as ``15m``, ``30s``, ``500ms`` or ``1000`` (ms) in milliseconds."""
    match = _DURATION.match(value)
    if match is None:
        raise OptionError(
            name, f"must be a duration such as '15m', '30s', '500ms' or '1000', got {value!r}"
        )
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _DURATION_UNITS_MS[unit]


def _load_json(name: str, value: str, example: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError(
            name, f"is not valid JSON ({exc.msg} at character {exc.pos}); expected {example}"
        ) from None


def _partition_number(name: str, topic: str, key: object, example: str) -> int:
    if not isinstance(key, str) or not re.fullmatch(r"\d{1,10}", key) or int(key) > 2**31 - 1:
        raise OptionError(
            name, f"partition {key!r} of topic {topic!r} is not a partition number; "
            f"expected {example}"
        )
    return int(key)


def _parse_partition_map(
    name: str, value: str, example: str, minimum: int, what: str
) -> dict[TopicPartition, int]:
    """``{"topic": {"0": n, "1": n}}`` into ``{TopicPartition: n}``, every n >= minimum."""
    data = _load_json(name, value, example)
    if not isinstance(data, dict) or not data:
        raise OptionError(name, f"must be a non-empty JSON object; expected {example}")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(
                name, f"topic {topic!r} must map to a non-empty object of partitions; "
                f"expected {example}"
            )
        for key, number in partitions.items():
            partition = _partition_number(name, topic, key, example)
            if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
                raise OptionError(
                    name, f"{what} of {topic}-{partition} must be an integer >= {minimum}, "
                    f"got {number!r}"
                )
            out[TopicPartition(topic, partition)] = number
    return out


@dataclass(frozen=True)
class ConnectionOptions:
    """How to reach the server: target, deadline, TLS material and credentials (PEM bytes and
    secrets, not paths).

    The PEM, password and token files are read where the options are parsed (the driver), so
    executors need no copy of them; the password or token travels to the tasks inside the
    pickled options, as the PEMs do, and never shows in ``repr``. Picklable;
    :meth:`sync_client` / :meth:`async_client` open a new channel.
    """

    target: str
    timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000
    tls: bool = False
    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = field(default=None, repr=False)
    server_name: str | None = None
    credentials: Credentials | None = field(default=None, repr=False)

    def _tls(self) -> TlsConfig | None:
        if not self.tls:
            return None
        return TlsConfig(self.root_certificates, self.certificate_chain, self.private_key,
                         self.server_name)

    def sync_client(self) -> SyncClient:
        """A new :class:`stratalog.client.SyncClient` to the target."""
        return SyncClient(self.target, timeout_s=self.timeout_s, tls=self._tls(),
                          auth=self.credentials)

    def async_client(self) -> Client:
        """A new :class:`stratalog.client.Client`; create it on the loop that will use it."""
        return Client(self.target, timeout_s=self.timeout_s, tls=self._tls(),
                      auth=self.credentials)


def _read_pem(name: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise OptionError(name, f"cannot read {path!r}: {exc.strerror}") from None


def _credentials(options: _Options, tls: bool) -> Credentials | None:
    user, password_file, token_file = (
        options.get(name) for name in ("user", "passwordFile", "tokenFile")
    )
    plaintext_allowed = options.bool("allowPlaintextCredentials", False)
    if token_file is not None and (user is not None or password_file is not None):
        raise OptionError("tokenFile", "give user and passwordFile, or tokenFile, not both")
    if (user is None) != (password_file is None) and token_file is None:
        raise OptionError("passwordFile" if user is not None else "user",
                          "user and passwordFile go together")
    try:
        credentials = credentials_from(user, password_file, token_file,
                                       plaintext_allowed=plaintext_allowed)
    except ValueError as exc:
        raise OptionError("tokenFile" if token_file is not None else "passwordFile",
                          str(exc)) from None
    if credentials is not None and not tls and not plaintext_allowed:
        raise OptionError(
            "tls", "is off but credentials are set: anyone on the path could read them; set"
            " tls (and tls.rootCertificates), or allowPlaintextCredentials on loopback or"
            " behind a TLS-terminating proxy"
        )
    return credentials


def _connection(options: _Options) -> ConnectionOptions:
    target = options.get("target")
    if target is None:
        raise OptionError("target", "is required: the server address, e.g. '127.0.0.1:50051'"
                                    " (or a cluster's, comma-separated)")
    try:
        target = ",".join(bootstrap_targets(target))
    except (TypeError, ValueError) as exc:
        raise OptionError("target", str(exc)) from None
    timeout_ms = options.int("requestTimeoutMs", 1) or DEFAULT_REQUEST_TIMEOUT_MS
    pems = {
        name: _read_pem(name, path)
        for name in ("tls.rootCertificates", "tls.certificateChain", "tls.privateKey")
        if (path := options.get(name)) is not None
    }
    server_name = options.get("tls.serverName")
    tls = options.bool("tls", bool(pems) or server_name is not None)
    if pems and not tls:
        raise OptionError("tls", f"is false but {', '.join(pems)} is set")
    if ("tls.certificateChain" in pems) != ("tls.privateKey" in pems):
        raise OptionError(
            "tls.privateKey", "tls.certificateChain and tls.privateKey go together (client "
            "certificate authentication needs both)"
        )
    return ConnectionOptions(
        target,
        timeout_ms / 1000,
        tls,
        pems.get("tls.rootCertificates"),
        pems.get("tls.certificateChain"),
        pems.get("tls.privateKey"),
        server_name,
        _credentials(options, tls),
    )


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: ``subscribe`` topics, a ``subscribePattern``, or ``assign``.

    ``option`` is the option used; exactly one of ``topics`` (subscribe), ``pattern`` and
    ``assignment`` is filled. A pattern must match a whole topic name (Java's ``matches()``).
    """

    option: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[TopicPartition, ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is one of the subscription's topics."""
        if self.option == "subscribe":
            return topic in self.topics
        if self.option == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return any(tp.topic == topic for tp in self.assignment)


_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'


def _subscription(options: _Options, required: bool) -> Subscription | None:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if options.has(n)]
    if len(given) > 1:
        raise OptionError(
            given[1], f"only one of 'subscribe', 'subscribePattern' and 'assign' may be set; "
            f"got {' and '.join(repr(g) for g in given)}"
        )
    if not given:
        if required:
            raise OptionError(
                "subscribe", "one of 'subscribe' (comma-separated topics), 'subscribePattern' "
                "(a regular expression) or 'assign' (JSON) must be set"
            )
        return None
    name = given[0]
    value = options.get(name)
    assert value is not None
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
        if not topics:
            raise OptionError(name, f"names no topic: {value!r}")
        return Subscription(name, topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(name, f"is not a valid regular expression: {exc}") from None
        return Subscription(name, pattern=value)
    data = _load_json(name, value, _ASSIGN_EXAMPLE)
    if not isinstance(data, dict) or not data:
        raise OptionError(name, f"must be a non-empty JSON object; expected {_ASSIGN_EXAMPLE}")
    assignment: list[TopicPartition] = []
    for topic, partitions in data.items():
        if not isinstance(partitions, list) or not partitions or not all(
            isinstance(p, int) and not isinstance(p, bool) and 0 <= p < 2**31 for p in partitions
        ):
            raise OptionError(
                name, f"topic {topic!r} must map to a non-empty list of partition numbers; "
                f"expected {_ASSIGN_EXAMPLE}"
            )
        assignment.extend(TopicPartition(topic, p) for p in dict.fromkeys(partitions))
    return Subscription(name, assignment=tuple(assignment))


@dataclass(frozen=True)
class OffsetSpec:
    """Where a query starts or ends, before it is resolved against the server.

    ``kind`` is one of ``earliest``, ``latest``, ``offsets`` (``offsets`` maps partitions to
    offsets, -2 earliest, -1 latest), ``timestamp`` (one ``timestamp`` for every partition) or
    ``timestamps`` (per partition). ``option`` is the option it came from, for messages.
    """

    option: str
    kind: str
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)


_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-2}} (-2 earliest, -1 latest)'
_TIMESTAMPS_EXAMPLE = '{"topicA":{"0":1700000000000,"1":1700000000000}} (ms since the epoch)'


def _offset_spec(options: _Options, side: str, streaming: bool) -> OffsetSpec | None:
    """The start (``side`` = "starting") or end of a query, by Spark's precedence:
    a global timestamp, then per-partition timestamps, then offsets."""
    timestamp_name = f"{side}Timestamp"
    by_timestamp_name = f"{side}OffsetsByTimestamp"
    offsets_name = f"{side}Offsets"
    if (value := options.get(timestamp_name)) is not None:
        return OffsetSpec(timestamp_name, "timestamp", timestamp=_parse_int(timestamp_name, value, 0))
    if (value := options.get(by_timestamp_name)) is not None:
        return OffsetSpec(
            by_timestamp_name,
            "timestamps",
            timestamps=_parse_partition_map(
                by_timestamp_name, value, _TIMESTAMPS_EXAMPLE, 0, "the timestamp"
            ),
        )
    value = options.get(offsets_name)
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("earliest", "latest"):
        if not streaming and side == "starting" and lowered == "latest":
            raise OptionError(offsets_name, "'latest' is not allowed for batch queries")
        if side == "ending" and lowered == "earliest":
            raise OptionError(offsets_name, "'earliest' is not allowed as an ending offset")
        return OffsetSpec(offsets_name, lowered)
    offsets = _parse_partition_map(offsets_name, value, _OFFSETS_EXAMPLE, EARLIEST, "the offset")
    for tp, offset in offsets.items():
        if side == "starting" and not streaming and offset == LATEST:
            raise OptionError(
                offsets_name, f"-1 (latest) for {tp.topic}-{tp.partition} is not allowed for "
                "batch queries"
            )
        if side == "ending" and offset == EARLIEST:
            raise OptionError(
                offsets_name, f"-2 (earliest) for {tp.topic}-{tp.partition} is not allowed as "
                "an ending offset"
            )
    return OffsetSpec(offsets_name, "offsets", offsets=offsets)


@dataclass(frozen=True)
class ReadOptions:
    """Everything a batch or streaming read was asked to do, checked.

    Exactly one of ``connection`` (server mode) and ``path`` (file mode) is set. ``ending`` is
    None for streams (Spark forbids ending options there) and means "latest" for batches.
    """

    connection: ConnectionOptions | None
    path: str | None
    subscription: Subscription | None
    starting: OffsetSpec
    ending: OffsetSpec | None
    starting_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fetch_max_bytes: int = DEFAULT_FETCH_BYTES_MAX
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED

    @property
    def read_committed(self) -> bool:
        """Whether the query reads only committed records (ends at the last stable offset)."""
        return self.isolation_level == IsolationLevel.READ_COMMITTED


def _isolation_level(options: _Options) -> IsolationLevel:
    """``isolationLevel`` (or its alias ``kafka.isolation.level``); read_committed by default."""
    given = {
        name: value.strip().lower()
        for name in ("isolationLevel", _ISOLATION_LEVEL_ALIAS)
        if (value := options.get(name)) is not None
    }
    for name, value in given.items():
        if value not in _ISOLATION_LEVELS:
            raise OptionError(
                name, f"must be 'read_committed' or 'read_uncommitted', got {value!r}"
            )
    if len(set(given.values())) > 1:
        raise OptionError(
            "isolationLevel", f"is {given['isolationLevel']!r} but its alias "
            f"{_ISOLATION_LEVEL_ALIAS} is {given[_ISOLATION_LEVEL_ALIAS]!r}; set only one"
        )
    if not given:
        return IsolationLevel.READ_COMMITTED
    return _ISOLATION_LEVELS[next(iter(given.values()))]


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check ``options`` for a batch (``streaming=False``) or streaming read.

    Raises:
        OptionError: naming the first option found wrong.
    """
    opts = _Options(options, _READ_OPTIONS)
    path = opts.get("path")
    if path is not None and opts.has("target"):
        raise OptionError(
            "path", "and 'target' cannot both be set: 'path' reads log directories from files, "
            "'target' reads from a server"
        )
    if streaming:
        for name in _ENDING_OPTIONS:
            if opts.has(name):
                raise OptionError(name, "is not allowed in streaming queries (a stream has no end)")
    if path is not None:
        if streaming:
            raise OptionError("path", "file mode reads only in batch queries; use 'target' to "
                              "stream from a server")
        for name in (*_CONNECTION_OPTIONS, "startingTimestamp", "endingTimestamp",
                     "startingOffsetsByTimestamp", "endingOffsetsByTimestamp"):
            if opts.has(name):
                raise OptionError(
                    name, "is not supported in file mode ('path'); file mode selects records "
                    "by offset only"
                )
    connection = _connection(opts) if path is None else None
    subscription = _subscription(opts, required=path is None)
    starting = _offset_spec(opts, "starting", streaming) or OffsetSpec(
        "startingOffsets", "latest" if streaming else "earliest"
    )
    ending = None if streaming else (
        _offset_spec(opts, "ending", streaming) or OffsetSpec("endingOffsets", "latest")
    )
    strategy = (opts.get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            "startingOffsetsByTimestampStrategy", f"must be 'error' or 'latest', got {strategy!r}"
        )
    max_delay = opts.get("maxTriggerDelay")
    return ReadOptions(
        connection=connection,
        path=path,
        subscription=subscription,
        starting=starting,
        ending=ending,
        starting_strategy=strategy,
        min_partitions=opts.int("minPartitions", 1, 2**31 - 1),
        max_records_per_partition=opts.int("maxRecordsPerPartition", 1),
        fail_on_data_loss=opts.bool("failOnDataLoss", True),
        include_headers=opts.bool("includeHeaders", False),
        max_offsets_per_trigger=opts.int("maxOffsetsPerTrigger", 1),
        min_offsets_per_trigger=opts.int("minOffsetsPerTrigger", 1),
        max_trigger_delay_ms=(
            DEFAULT_MAX_TRIGGER_DELAY_MS if max_delay is None
            else parse_duration_ms("maxTriggerDelay", max_delay)
        ),
        fetch_max_bytes=opts.int("fetchMaxBytes", 1024, 2**31 - 1) or DEFAULT_FETCH_BYTES_MAX,
        isolation_level=_isolation_level(opts),
    )


@dataclass(frozen=True)
class WriteOptions:
    """A batch or streaming write: where to, and the Producer's batching and compression.

    ``topic`` (the option) wins over a ``topic`` column, as in Spark's Kafka sink.
    ``create_topic``: create the ``topic`` option's topic, with ``create_topic_partitions``
    partitions, when the driver finds it missing (otherwise a missing topic fails the write on
    the driver, before any task runs).
    ``transactional_id_prefix``: None for an idempotent, non-transactional write; otherwise
    each task writes in one transaction with transactional id ``<prefix>-<partition id>``,
    open at most ``transaction_timeout_ms`` (None: the connector's default, 15 minutes, in
    :mod:`stratalog.spark.write_transactions`).
    """

    connection: ConnectionOptions
    topic: str | None = None
    compression: str = "none"
    linger_ms: int = 5
    batch_bytes_max: int | None = None
    transactional_id_prefix: str | None = None
    transaction_timeout_ms: int | None = None
    create_topic: bool = False
    create_topic_partitions: int = 1

    def transactional_id(self, partition_id: int) -> str | None:
        """The transactional id of the task writing Spark partition ``partition_id``."""
        if self.transactional_id_prefix is None:
            return None
        return f"{self.transactional_id_prefix}-{partition_id}"


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check ``options`` for a write. Raises OptionError naming the first wrong option."""
    opts = _Options(options, _WRITE_OPTIONS)
    compression = (opts.get("compression") or "none").strip().lower()
    if compression not in _COMPRESSIONS:
        raise OptionError("compression", f"must be one of {', '.join(_COMPRESSIONS)}, "
                          f"got {compression!r}")
    topic = opts.get("topic")
    linger_ms = opts.int("lingerMs", 0, 60_000)
    prefix = opts.get("transactionalIdPrefix")
    if prefix is None and opts.given("transactionalIdPrefix"):
        raise OptionError(
            "transactionalIdPrefix", "is blank; give a prefix unique to this query (the "
            "transactional ids are '<prefix>-<partition id>'), or leave the option out"
        )
    prefix = prefix.strip() if prefix is not None else None
    if prefix is not None and len(prefix.encode("utf-8")) > TRANSACTIONAL_ID_PREFIX_BYTES_MAX:
        raise OptionError(
            "transactionalIdPrefix", f"is {len(prefix.encode('utf-8'))} bytes in UTF-8; at most "
            f"{TRANSACTIONAL_ID_PREFIX_BYTES_MAX} fit a transactional id with the task's "
            "'-<partition id>'"
        )
    timeout_ms = opts.int("transactionTimeoutMs", 1, _TRANSACTION_TIMEOUT_MS_MAX)
    if timeout_ms is not None and prefix is None:
        raise OptionError(
            "transactionTimeoutMs", "applies to transactional writes only: set "
            "transactionalIdPrefix too"
        )
    create_topic = opts.bool("createTopic", False)
    if create_topic and topic is None:
        raise OptionError(
            "createTopic", "needs the 'topic' option: topics named by a 'topic' column are "
            "known only row by row, so create them beforehand (stratalog topics create)"
        )
    partitions = opts.int("createTopicPartitions", 1, 2**31 - 1)
    if partitions is not None and not create_topic:
        raise OptionError("createTopicPartitions", "applies only with createTopic=true")
    return WriteOptions(
        connection=_connection(opts),
        topic=topic.strip() if topic is not None else None,
        compression=compression,
        linger_ms=5 if linger_ms is None else linger_ms,
        batch_bytes_max=opts.int("batchBytesMax", 1024, 2**31 - 1),
        transactional_id_prefix=prefix,
        transaction_timeout_ms=timeout_ms,
        create_topic=create_topic,
        create_topic_partitions=1 if partitions is None else partitions,
    )
