"""The server's settings: every one a field with its default, unit, range and documentation.

:class:`Settings` is the server's effective configuration, one immutable value: a field per
setting (units last in the names), each declared with :func:`_setting` (its default and the
line of documentation that flags, ``describe`` and docs/configuration.md show), the ``log.*``
storage defaults passed to the LogManager as they are, and the per-principal quotas.
``__post_init__`` checks every range and every rule between settings (TLS files that go
together, a cluster that needs etcd, ...), naming the setting; where a value comes from (the
default, a TOML file, ``STRATALOG_*`` variables, flags) is ``settings.py``'s, which builds a
:class:`Settings` with :func:`~stratalog.server.settings.load_settings` and re-exports
everything here: import from :mod:`stratalog.server.settings`.

A :class:`Settings` is immutable, so threads share it freely; a SIGHUP builds a new one from
the same sources (``settings.reload_settings``), and the server applies the quotas it holds.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from stratalog.server.groups.group_config import GroupConfig
from stratalog.server.storage.errors import InvalidConfigError
from stratalog.server.storage.log_defaults import parse_server_defaults
from stratalog.server.thread_priority import NICE_MAX

__all__ = [
    "AUTHORIZERS",
    "METRICS_AUTHENTICATION_MODES",
    "NODE_ID_MAX",
    "QUOTA_NAMES",
    "SETTING_NAMES",
    "Address",
    "Settings",
    "SettingsError",
    "SettingsSources",
    "parse_address",
]

_LOG_PREFIX = "log."
#: Storage defaults whose Kafka names do not start with ``log.``: passed to the LogManager too.
_STORAGE_NAMES_OUTSIDE_LOG = frozenset({
    "producer.id.expiration.ms",
    "producer.id.expiration.check.interval.ms",
})

_KIB = 1024
#: The largest node id in cluster mode: producer ids are ``node_id << 40 | counter`` there
#: (server/cluster/producer_ids.py) and must stay below 2^63.
NODE_ID_MAX = (1 << 23) - 1
_MIB = 1024 * _KIB
#: The group coordinator's own defaults (server/groups/group_config.py): the group settings
#: below take theirs from it, so the two cannot disagree.
_GROUP_DEFAULTS = GroupConfig()
_MINUTE_MS = 60 * 1000


class SettingsError(ValueError):
    """A setting that does not parse or is out of range; the message names it and its source."""


class Address(NamedTuple):
    """A listen address: host (an IP address or a name) and port (0 = any free port)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) to an :class:`Address`.

    Raises:
        ValueError: no port, a port outside 0..65535, or an empty host.
    """
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"{text!r} is not HOST:PORT ([v6 address]:PORT for IPv6)")
        ipaddress.IPv6Address(host)  # ValueError names the bad address
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ValueError(f"{text!r} is not HOST:PORT, e.g. 127.0.0.1:50051")
        if ":" in host:
            raise ValueError(f"{text!r}: write an IPv6 host in brackets, e.g. [::1]:50051")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number in 0..65535, got {port_text!r}")
    return Address(host, int(port_text))


def _setting(default: Any, doc: str, minimum: int | None = None) -> Any:
    # Field metadata drives parsing, flags and the docs test; one place per setting.
    return field(default=default, metadata={"doc": doc, "minimum": minimum})


@dataclass(frozen=True, slots=True)
class Settings:
    """The server's effective configuration; immutable, every value checked.

    Holds one field per server setting (units last in the names) and ``log_defaults``, the
    ``log.*`` storage defaults by Kafka name, as strings, passed to ``LogManager.open``
    unchanged. Build it with :func:`load_settings`; constructing it directly skips the
    per-source checks but not the range checks of ``__post_init__``.
    """

    listen: str = _setting(
        "127.0.0.1:50051",
        "gRPC listen address HOST:PORT; port 0 binds a free port and the server prints it",
    )
    kafka_listen: str = _setting(
        "127.0.0.1:9092",
        "Kafka protocol listen address HOST:PORT (kcat, librdkafka, kafka-python, aiokafka reach"
        " the same logs there: docs/kafka-protocol.md); port 0 binds a free port; empty = no"
        " Kafka listener. When the default port is taken and this was not set, a free port is"
        " bound and printed",
    )
    kafka_advertised_listen: str = _setting(
        "",
        "HOST:PORT Kafka clients reach this server at, in Metadata answers (Kafka's"
        " advertised.listeners); empty = the Kafka listen host and the port bound",
    )
    kafka_request_bytes_max: int = _setting(
        100 * _MIB,
        "largest Kafka request the server reads (Kafka's socket.request.max.bytes); a larger"
        " size prefix closes the connection before a byte of it is buffered",
        1,
    )
    kafka_queued_request_bytes_max: int = _setting(
        256 * _MIB,
        "bytes of Kafka requests being read or served at once, every connection together"
        " (Kafka's queued.max.request.bytes); past it connections are not read until"
        " requests are answered",
        1,
    )
    kafka_queued_requests_per_connection_max: int = _setting(
        16,
        "requests one Kafka connection may have read ahead while one is served (answered in"
        " order, one at a time, as Kafka does); past it the connection is not read",
        1,
    )
    kafka_connections_max: int = _setting(
        1024,
        "Kafka connections open at once, all clients (Kafka's max.connections); one more is"
        " closed as it is accepted",
        1,
    )
    kafka_sasl_mechanisms: tuple[str, ...] = _setting(
        ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        "SASL mechanisms the Kafka listener offers against the credential file: PLAIN,"
        " SCRAM-SHA-256 and SCRAM-SHA-512 (comma-separated in the environment and the flag);"
        " PLAIN only over TLS unless authentication_plaintext_allowed; empty = no SASL",
    )
    kafka_connections_max_reauth_ms: int = _setting(
        0,
        "lifetime of a Kafka connection's SASL session (Kafka's connections.max.reauth.ms,"
        " KIP-368): answered to the client, which re-authenticates before it ends; a"
        " connection that did not is closed at its next request; 0 = sessions do not end",
        0,
    )
    kafka_fetch_session_cache_slots: int = _setting(
        1000,
        "Kafka fetch sessions (KIP-227) the server keeps at once, all clients (Kafka's"
        " max.incremental.fetch.session.cache.slots); past it a new one evicts one unused for"
        " 120 s or gets none; 0 = no sessions: every Fetch names all its partitions",
        0,
    )
    kafka_sasl_receive_bytes_max: int = _setting(
        512 * 1024,
        "largest Kafka request read from a connection that must still authenticate with SASL"
        " (Kafka's sasl.server.max.receive.size); a larger size prefix closes the connection",
        1,
    )
    log_dirs: tuple[str, ...] = _setting(
        ("./data",), "log directories (Kafka's log.dirs); each holds partition directories"
    )
    max_request_bytes: int = _setting(
        100 * _MIB, "largest gRPC request the server accepts (Kafka's socket.request.max.bytes)", 1
    )
    max_response_bytes: int = _setting(
        100 * _MIB, "largest gRPC response the server sends", 1
    )
    # -- request bounds (issue 13, part 2) --
    produce_decompressed_bytes_max: int = _setting(
        64 * _MIB,
        "most bytes the record batches of one Produce may decompress to, all batches together;"
        " more is refused with RECORD_TOO_LARGE as soon as decompression passes it (compressed"
        " payloads are validated in the thread pool, never on the event loop)",
        1,
    )
    produce_decompressed_bytes_in_flight_max: int = _setting(
        256 * _MIB,
        "bytes the compressed Produce requests being validated may decompress to, all together;"
        " each is charged produce_decompressed_bytes_max (what it may reach) while it is"
        " validated and appended, and one that does not fit waits its turn (first come, first"
        " served): so at most this divided by produce_decompressed_bytes_max of them decompress"
        " at once",
        1,
    )
    fetch_max_bytes_default: int = _setting(
        1 * _MIB, "batch bytes per fetch when the request's max_bytes is 0", 1
    )
    fetch_max_bytes_max: int = _setting(
        50 * _MIB, "cap on a fetch request's max_bytes (Kafka's fetch.max.bytes)", 1
    )
    fetch_max_wait_ms_max: int = _setting(
        30_000, "cap on a long poll's max_wait_ms", 0
    )
    subscribe_buffer_bytes: int = _setting(
        1 * _MIB,
        "batch bytes a Subscribe stream reads ahead of its client: each streamed message holds"
        " at most this much (one larger batch is sent whole), and the next is read only after"
        " gRPC flow control accepted the last",
        1,
    )
    subscribe_buffer_bytes_total: int = _setting(
        32 * _MIB,
        "bytes of Subscribe messages read and not yet taken by gRPC flow control, all streams"
        " together; when stalled streams hold it all, the others read one batch per message",
        0,
    )
    subscribe_buffer_bytes_per_connection: int = _setting(
        8 * _MIB,
        "bytes of Subscribe messages the streams of one connection may hold, read and not yet"
        " taken by gRPC flow control; past it the connection's streams read nothing until one"
        " of its messages is taken (streams on other connections go on)",
        1,
    )
    subscribe_stall_ms_max: int = _setting(
        30_000,
        "how long a Subscribe stream may wait for its connection's share"
        " (subscribe_buffer_bytes_per_connection) before it is ended with RESOURCE_EXHAUSTED"
        " (RESOURCE_LIMIT_EXCEEDED, retriable), as Redis's client-output-buffer-limit and NATS's"
        " slow consumer rule cut off a client that does not read",
        1,
    )
    read_in_executor_min_bytes: int = _setting(
        256 * _KIB,
        "fetches that may return at least this many bytes read in the thread pool, smaller"
        " ones inline on the event loop (page-cache reads are cheaper inline); a fetch may"
        " return its max_bytes, or less when the partition holds less past its offset:"
        " nothing at the log end, the active segment's size when it reads there",
        0,
    )
    append_in_executor_min_bytes: int = _setting(
        64 * _KIB,
        "Produce payloads under this size are validated and appended inline on the event loop;"
        " larger ones in the thread pool while the server is serving reads (any in the last"
        " 100 ms), so that reads do not wait behind them (one append at a time per partition"
        " either way); in a cluster, a follower's fetch answers under this size are appended"
        " inline too",
        0,
    )
    append_inline_max_bytes: int = _setting(
        2 * _MIB,
        "Produce payloads under this size run inline on the event loop, even above"
        " append_in_executor_min_bytes, while no read is being served: the hop to a thread and"
        " back costs ~0.4 ms of CPU per request, more than the append's page-cache write; at or"
        " above it, always the thread pool (an inline append holds the loop ~0.6 ms per MiB)."
        " At most append_in_executor_min_bytes turns this off",
        0,
    )
    malloc_mmap_threshold_bytes: int = _setting(
        32 * _MIB,
        "glibc malloc serves blocks under this size from its heap instead of a fresh mmap (and"
        " trims its heap only above 4 times this): MiB-sized request buffers then cost no page"
        " faults; 0 leaves the C allocator's defaults (see stratalog.server.allocator)",
        0,
    )
    malloc_arena_max: int = _setting(
        2,
        "glibc malloc makes at most this many arenas (M_ARENA_MAX): freed memory in a few"
        " shared arenas goes back to the kernel when the server trims its heap, where a"
        " pool thread's own arena kept it for good; 0 leaves glibc's default, 8 per core"
        " (see stratalog.server.allocator)",
        0,
    )
    gil_switch_interval_us: int = _setting(
        200,
        "Python's thread switch interval (sys.setswitchinterval): how long a thread that wants"
        " the GIL waits before forcing a switch; short, so a request coming back from a read"
        " is not kept waiting behind gRPC's poller thread",
        1,
    )
    gc_young_objects_max: int = _setting(
        10_000,
        "container objects allocated (net of those freed) before CPython's cyclic garbage"
        " collector examines its youngest generation (threshold0; CPython's default is 700):"
        " fewer collections, and fewer full ones, which hold the event loop; 0 keeps"
        " CPython's default (see stratalog.server.garbage_collector)",
        0,
    )
    max_concurrent_rpcs: int = _setting(
        8192,
        "RPCs served at once, all clients, streams included; more are refused"
        " RESOURCE_EXHAUSTED by gRPC. Kept above waiting_rpcs_max, so that unary RPCs always"
        " find a slot",
        1,
    )
    # ---- per-client limits (server/client_limits.py): streams, long polls, connections
    waiting_rpcs_per_connection_max: int = _setting(
        1024,
        "Subscribe streams and long polls (FetchByOffset waiting with max_wait_ms > 0) one"
        " connection may hold at once; more are refused RESOURCE_LIMIT_EXCEEDED",
        1,
    )
    waiting_rpcs_per_client_max: int = _setting(
        1024,
        "Subscribe streams and long polls one client may hold at once over all its"
        " connections: one principal when calls are authenticated, else one host; more are"
        " refused RESOURCE_LIMIT_EXCEEDED",
        1,
    )
    waiting_rpcs_max: int = _setting(
        4096,
        "Subscribe streams and long polls of all clients at once; more are refused"
        " RESOURCE_LIMIT_EXCEEDED. Must be below max_concurrent_rpcs",
        1,
    )
    session_buffer_bytes: int = _setting(
        16 * _MIB,
        "bytes one Session stream's requests may hold until their answers are taken by gRPC"
        " (a Produce its own bytes, a fetch its max_bytes, then each answer its size); the"
        " server reads the stream's next request only while it holds less, so a client that"
        " stops reading answers is held back by HTTP/2 flow control",
        1,
    )
    session_buffer_bytes_total: int = _setting(
        256 * _MIB,
        "bytes the requests of all Session streams may hold together, counted as"
        " session_buffer_bytes counts them; a request that does not fit is answered"
        " RESOURCE_EXHAUSTED (RESOURCE_LIMIT_EXCEEDED, retriable) without being served",
        1,
    )
    session_requests_in_flight_max: int = _setting(
        1024,
        "requests one Session stream has being served or answered at once; the server reads"
        " the stream's next request only when one of them is done, so a client sending faster"
        " is held back by gRPC's flow control (each answer counts until the client took it)."
        " As many as one connection may hold waiting RPCs by default, so that long polls"
        " within their own limit never stop a session's other requests",
        1,
    )
    max_connections: int = _setting(
        1024,
        "connections the server accepts at once, all clients (Kafka's max.connections; gRPC's"
        " grpc.max_allowed_incoming_connections); more are closed at once",
        1,
    )
    connections_max_idle_ms: int = _setting(
        600_000,
        "a connection with no RPC for this long is closed (Kafka's connections.max.idle.ms;"
        " gRPC's grpc.max_connection_idle_ms); clients reconnect on their next call",
        1,
    )
    topic_partitions_max: int = _setting(
        10_000, "most partitions CreateTopic may ask for", 1
    )
    auto_create_topics_enable: bool = _setting(
        True,
        "a Metadata request that allows it (a producer's lookup) creates a topic it names that"
        " does not exist, with num_partitions and default_replication_factor (Kafka's"
        " auto.create.topics.enable); with an authorizer only for callers who may CREATE it",
    )
    num_partitions: int = _setting(
        1, "partitions of a topic created automatically (Kafka's num.partitions)", 1
    )
    io_threads: int = _setting(
        8, "threads for fsync, large reads, topic admin and background maintenance", 1
    )
    io_threads_nice: int = _setting(
        10,
        "how much lower the io_threads' CPU priority is than the event loop's: added to each"
        " pool thread's nice value (Linux; at most 19), so that a client keeping the pool busy"
        " cannot take the CPU the loop needs to serve every other client"
        " (server/thread_priority.py); 0 keeps them at the loop's",
        0,
    )
    maintenance_interval_ms: int = _setting(
        1_000,
        "period of the maintenance pass (flush.ms flushes, retention, checkpoints, deletions)",
        1,
    )
    shutdown_grace_ms: int = _setting(
        5_000,
        "on SIGTERM/SIGINT, time in-flight RPCs get to finish before they are cancelled",
        0,
    )
    pid_file: str = _setting(
        "",
        "file the server writes its process id to at start (and holds locked while it runs;"
        " removed at a clean stop), for `stratalog reload`; a start is refused while another"
        " live server holds it, a stale one is taken over; empty = none"
        " (server/pid_file.py)",
    )
    transaction_max_timeout_ms: int = _setting(
        900_000,
        "longest transaction timeout InitProducerId accepts (Kafka's transaction.max.timeout.ms)",
        1,
    )
    transactional_id_expiration_ms: int = _setting(
        604_800_000,
        "a transactional id with no transaction open and no request for this long is forgotten"
        " (Kafka's transactional.id.expiration.ms)",
        1,
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _setting(
        10_000,
        "how often the maintenance pass looks for transactions open past their timeout and"
        " aborts them (Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms)",
        1,
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _setting(
        3_600_000,
        "how often the maintenance pass forgets expired transactional ids (Kafka's"
        " transaction.remove.expired.transaction.cleanup.interval.ms)",
        1,
    )
    transaction_partitions_max: int = _setting(
        1000,
        "most partitions one transaction may hold (stratalog's: the state record listing them"
        " must fit one batch of the transaction state log)",
        1,
    )
    transaction_state_log_num_partitions: int = _setting(
        50,
        "cluster mode: partitions of the replicated internal topic that holds the transaction"
        " coordinators' state, made when a transactional id is first used (Kafka's"
        " transaction.state.log.num.partitions); an id lives in partition"
        " abs(hashCode(transactional id)) % this. Changing it after the topic exists changes"
        " nothing",
        1,
    )
    transaction_state_log_replication_factor: int = _setting(
        3,
        "cluster mode: copies of each partition of the transaction state topic (Kafka's"
        " transaction.state.log.replication.factor), at most the live servers when it is made",
        1,
    )
    transaction_state_log_min_isr: int = _setting(
        2,
        "cluster mode: min.insync.replicas of the transaction state topic (Kafka's"
        " transaction.state.log.min.isr), at most its replication factor: a coordinator's"
        " state change is answered once this many replicas hold it",
        1,
    )
    # ---- consumer groups (issue 27; docs/groups.md "Serving groups"; server/group_service/)
    offsets_topic_num_partitions: int = _setting(
        50,
        "partitions of the internal topic __consumer_offsets, made when a group is first used"
        " (Kafka's offsets.topic.num.partitions); a group lives in partition"
        " abs(hashCode(group id)) % this. Changing it after the topic exists changes nothing",
        1,
    )
    offsets_topic_replication_factor: int = _setting(
        3,
        "copies of each __consumer_offsets partition (Kafka's"
        " offsets.topic.replication.factor); a single server keeps one",
        1,
    )
    offsets_topic_segment_bytes: int = _setting(
        104_857_600,
        "segment.bytes of __consumer_offsets (Kafka's offsets.topic.segment.bytes): small, so"
        " that compaction finds closed segments to clean",
        14,
    )
    offsets_retention_minutes: int = _setting(
        _GROUP_DEFAULTS.offsets_retention_ms // _MINUTE_MS,
        "a group's committed offsets are deleted this long after the group became empty"
        " (a simple group's, after their commit) (Kafka's offsets.retention.minutes)",
        1,
    )
    offsets_retention_check_interval_ms: int = _setting(
        _GROUP_DEFAULTS.offsets_retention_check_interval_ms,
        "how often each group coordinator looks for expired offsets (Kafka's"
        " offsets.retention.check.interval.ms)",
        1,
    )
    offset_metadata_max_bytes: int = _setting(
        _GROUP_DEFAULTS.offset_metadata_max_bytes,
        "longest metadata string an OffsetCommit may carry per partition (Kafka's"
        " offset.metadata.max.bytes)",
        0,
    )
    group_min_session_timeout_ms: int = _setting(
        _GROUP_DEFAULTS.min_session_timeout_ms,
        "shortest session timeout a JoinGroup may ask for (Kafka's"
        " group.min.session.timeout.ms)",
        1,
    )
    group_max_session_timeout_ms: int = _setting(
        _GROUP_DEFAULTS.max_session_timeout_ms,
        "longest session timeout a JoinGroup may ask for (Kafka's group.max.session.timeout.ms)",
        1,
    )
    group_initial_rebalance_delay_ms: int = _setting(
        _GROUP_DEFAULTS.initial_rebalance_delay_ms,
        "how long the first rebalance of an empty group waits for more members (Kafka's"
        " group.initial.rebalance.delay.ms)",
        0,
    )
    group_max_size: int = _setting(
        _GROUP_DEFAULTS.group_max_size,
        "most members of one group (Kafka's group.max.size; Kafka's default is unbounded)",
        1,
    )
    group_lag_metrics_max_series: int = _setting(
        1000,
        "most stratalog_group_lag series (one per group and partition) a scrape of /metrics"
        " exports, and most stratalog_group_lag_total series (one per group): beyond it the"
        " largest lags are kept and stratalog_group_lag_series_omitted says how many were left"
        " out; 0 = no lag metrics",
        0,
    )
    metrics_port: int = _setting(
        9464,
        "port of the Prometheus endpoint (/metrics) on the listen host; 0 = any free port"
        " (printed), -1 = off. When it is not set and 9464 is taken (another server on this"
        " machine), any free port, printed, with a warning",
        -1,
    )
    metrics_host: str = _setting(
        "",
        "host the metrics endpoint listens on; empty = the listen host (set 127.0.0.1 to keep"
        " the metrics off the network while gRPC listens on 0.0.0.0)",
    )
    metrics_connections_max: int = _setting(
        32,
        "connections the metrics endpoint holds at once; one more is closed as soon as it is"
        " accepted (server/metrics_endpoint.py). Taken out of RLIMIT_NOFILE before the"
        " storage's share, with max_connections",
        1,
    )
    metrics_connections_max_idle_ms: int = _setting(
        120_000,
        "a metrics connection with no request for this long (before its first one, or"
        " between keep-alive requests) is closed: twice a one-minute scrape interval",
        1,
    )
    metrics_request_timeout_ms: int = _setting(
        10_000,
        "time a metrics connection gets for its TLS handshake, for each request once its first"
        " byte came, and for taking each answer; past it the connection is closed",
        1,
    )
    metrics_request_bytes_max: int = _setting(
        8192,
        "largest request head (request line and headers) the metrics endpoint reads; a larger"
        " one is answered 431 and closed; request bodies are refused",
        256,
    )
    metrics_authentication: str = _setting(
        "none",
        "none (anyone who reaches the metrics port reads the metrics, every topic name"
        " included), or required: a scrape shows an Authorization header (Basic or Bearer)"
        " that the credential file accepts, or a client certificate (tls_client_auth ="
        " required); docs/security.md, Metrics",
    )
    logging_level: str = _setting(
        "INFO", "level of the server's log on stderr: DEBUG, INFO, WARNING, ERROR"
    )
    # ---- security: TLS and authentication (docs/security.md; server/security/) ----
    tls_cert_file: str = _setting(
        "",
        "PEM certificate chain of the server: set with tls_key_file to serve TLS on the gRPC"
        " port, the Kafka port and the metrics endpoint (reloaded on SIGHUP); empty = plaintext",
    )
    tls_key_file: str = _setting("", "PEM private key of tls_cert_file")
    tls_ca_file: str = _setting(
        "", "PEM CA certificates that client certificates must chain to (mTLS)"
    )
    tls_client_auth: str = _setting(
        "none",
        "client certificates (Kafka's ssl.client.auth): none, or required (every client shows"
        " one that chains to tls_ca_file; its subject becomes the principal)",
    )
    authentication_credentials_file: str = _setting(
        "",
        "credential file of salted password and token hashes (stratalog credentials add);"
        " reloaded on SIGHUP; empty = no passwords or tokens accepted",
    )
    authentication_anonymous: str = _setting(
        "auto",
        "calls without credentials: allowed, refused, or auto (allowed only when no"
        " authentication is configured)",
    )
    authentication_plaintext_allowed: bool = _setting(
        False,
        "accept passwords and tokens without TLS (they cross the network readable by anyone on"
        " the path): only behind a TLS-terminating proxy or on loopback",
    )
    authentication_threads: int = _setting(
        1, "threads that check new credentials (one PBKDF2 each), apart from io_threads", 1
    )
    authentication_cache_entries_max: int = _setting(
        10_000,
        "verified credentials remembered (keyed hashes, least recently used dropped first);"
        " 0 = check every call",
        0,
    )
    authentication_queue_max: int = _setting(
        64,
        "credential checks (one PBKDF2 each) waiting or running, all clients; more are refused"
        " at once RESOURCE_LIMIT_EXCEEDED (retriable), so a flood of new credentials cannot"
        " queue minutes of hashing",
        1,
    )
    authentication_failures_per_host_max: int = _setting(
        20,
        "credential checks one client host may have waiting, running or failed within"
        " authentication_failure_window_ms; more are refused at once RESOURCE_LIMIT_EXCEEDED"
        " without a check (cached good credentials still pass)",
        1,
    )
    authentication_failure_window_ms: int = _setting(
        60_000, "how long a failed credential check counts against its host", 1
    )
    reflection_open: bool = _setting(
        False, "serve gRPC reflection to callers without credentials when authentication is on"
    )
    # ---- security: authorization and quotas (docs/security.md; server/security/) ----
    authorizer: str = _setting(
        "none",
        "none (every caller may do everything), or acl: every RPC is checked against the ACLs"
        " (Kafka's authorizer.class.name)",
    )
    super_users: tuple[str, ...] = _setting(
        (),
        "principals allowed everything whatever the ACLs (Kafka's super.users);"
        " semicolon-separated in the environment and flags, e.g. User:admin;User:ops",
    )
    allow_everyone_if_no_acl_found: bool = _setting(
        False,
        "with the authorizer on, a resource that no ACL names is open to every principal"
        " (Kafka's allow.everyone.if.no.acl.found); off, only super users may use it",
    )
    acl_file_create_if_missing: bool = _setting(
        False,
        "with the authorizer on, a server that has run before and finds no acls.json starts"
        " with no ACLs (and writes an empty one) instead of refusing to start; a new server"
        " always does",
    )
    acl_bindings_max: int = _setting(
        10_000, "most ACL bindings the server stores (the ACL file is rewritten whole)", 0
    )
    acl_request_entries_max: int = _setting(
        1_000, "most bindings one CreateAcls, or filters one DeleteAcls, may carry", 1
    )
    authorizer_cache_entries_max: int = _setting(
        100_000,
        "authorization decisions remembered per (principal, host, operation, resource);"
        " emptied when the ACLs change; 0 = decide every call",
        0,
    )
    authorizer_cache_bytes_max: int = _setting(
        32 * _MIB,
        "bytes the authorization decisions remembered may take, each counted as 256 plus its"
        " resource name's and host's lengths (a transactional id may be 32 KiB); the oldest"
        " dropped first",
        0,
    )
    quota_producer_byte_rate: int = _setting(
        0,
        "produce bytes per second a principal may send before its next requests wait"
        " (Kafka's producer_byte_rate quota); 0 = no quota; per principal in [quotas]",
        0,
    )
    quota_consumer_byte_rate: int = _setting(
        0,
        "fetch bytes per second a principal may receive before its answers are delayed"
        " (Kafka's consumer_byte_rate quota); 0 = no quota; per principal in [quotas]",
        0,
    )
    quota_produce_bytes_in_flight_max: int = _setting(
        16 * _MIB,
        "Produce bytes one client (its principal, or its host when anonymous) with a produce"
        " quota may have waiting for the quota or being served; more are refused at once"
        " RESOURCE_LIMIT_EXCEEDED (retriable); a larger request passes alone (Kafka's"
        " queued.max.request.bytes, per client)",
        1,
    )
    quota_window_num: int = _setting(
        11, "samples the byte rates are measured over (Kafka's quota.window.num)", 2
    )
    quota_window_size_ms: int = _setting(
        1_000, "length of one sample (Kafka's quota.window.size.seconds, in ms)", 1
    )
    # ---- cluster membership (issue 17; docs/cluster.md; server/cluster/) ----
    cluster: str = _setting(
        "",
        "etcd://HOST:PORT[,HOST:PORT...]: join the cluster coordinated by these etcd endpoints"
        " (registers this server, takes part in the controller election); empty = a single"
        " server, no etcd",
    )
    node_id: int = _setting(
        0, "this server's id in the cluster (Kafka's node.id); unique among live servers", 0
    )
    advertised_listen: str = _setting(
        "",
        "HOST:PORT other servers and clients reach this one at (Kafka's advertised.listeners);"
        " empty = the listen host and the port bound",
    )
    cluster_session_timeout_ms: int = _setting(
        3_000,
        "a server whose etcd lease is not renewed for this long is gone: its registration"
        " ends, the controller role passes to another and its partitions get new leaders"
        " (etcd's lease TTL, whole seconds, rounded up; Kafka's broker.session.timeout.ms is"
        " 9000: docs/cluster.md says why ours is shorter)",
        1_000,
    )
    cluster_poll_fallback_ms: int = _setting(
        5_000,
        "how often each cluster part re-reads etcd by itself (the broker list, the controller,"
        " the topics and partition states, the ACLs): etcd watches run a part's step as soon"
        " as its keys change, the poll only covers a watch that is broken (docs/cluster.md,"
        " \"Watches\")",
        100,
    )
    cluster_watches_enable: bool = _setting(
        True,
        "follow etcd through watches; false = polls alone, every cluster_poll_fallback_ms (an"
        " etcd proxy without watches; set the poll short then)",
    )
    default_replication_factor: int = _setting(
        0,
        "copies of each partition of a topic created with replication_factor 0 (Kafka's"
        " default.replication.factor); at most the live brokers at creation; 0 = 3, or the"
        " live brokers when fewer (Kafka's default is 1: docs/cluster.md says why ours is not)",
        0,
    )
    unclean_leader_election_enable: bool = _setting(
        False,
        "let the controller elect a replica outside the ISR when no in-sync replica lives"
        " (Kafka's unclean.leader.election.enable): the partition comes back at once but"
        " loses the records only the ISR had; a topic's config of that name overrides it",
    )
    cluster_prefix: str = _setting(
        "/stratalog", "the etcd key prefix of this cluster's keys (several clusters may share an"
        " etcd)",
    )
    # ---- partition management (issue 29; docs/cluster.md; replica_placement.py,
    # preferred_leader.py) ----
    broker_rack: str = _setting(
        "",
        "the rack (or zone) this server is on (Kafka's broker.rack), registered in etcd and"
        " shown in Metadata: new partitions' replicas are spread over racks; set it on every"
        " server or on none; empty = no rack",
    )
    auto_leader_rebalance_enable: bool = _setting(
        True,
        "the controller moves each partition's leadership back to its preferred replica (the"
        " first assigned) when that replica is in sync and a broker's share of partitions"
        " not led by their preferred replica is above leader_imbalance_per_broker_percentage"
        " (Kafka's auto.leader.rebalance.enable)",
    )
    leader_imbalance_check_interval_seconds: int = _setting(
        300,
        "how often the controller checks the leaders' balance (Kafka's"
        " leader.imbalance.check.interval.seconds)",
        1,
    )
    leader_imbalance_per_broker_percentage: int = _setting(
        10,
        "the share (percent) of a broker's preferred partitions led elsewhere above which the"
        " controller moves their leadership back (Kafka's"
        " leader.imbalance.per.broker.percentage)",
        0,
    )
    controlled_shutdown_timeout_ms: int = _setting(
        30_000,
        "on SIGTERM/SIGINT in cluster mode, the longest the server waits, still serving, for"
        " the controller to move its leaderships to other in-sync replicas and take it out"
        " of the ISRs before it stops (Kafka's controlled shutdown; docs/cluster.md,"
        " \"Operating a cluster\"); 0 = off: the leaderships move once its lease is revoked",
        0,
    )
    # ---- the broker identity: server-to-server calls (issue 24; docs/cluster.md "Securing
    # a cluster"; server/cluster/broker_identity.py, peer_channels.py) ----
    broker_principals: tuple[str, ...] = _setting(
        (),
        "principals the cluster's servers authenticate as to each other (Kafka's inter-broker"
        " principal); only they may call the Replication service, each as the node it"
        " registered as, and they are super users; semicolon-separated in the environment"
        " and flags; empty = replication unauthenticated (a cluster that trusts its network)",
    )
    inter_broker_user: str = _setting(
        "", "user this server sends to its peers (with inter_broker_password_file); its"
        " principal User:<user> must be in broker_principals",
    )
    inter_broker_password_file: str = _setting(
        "", "file whose first line is inter_broker_user's password",
    )
    inter_broker_token_file: str = _setting(
        "", "file whose first line is the token this server sends to its peers (instead of a"
        " user and password)",
    )
    inter_broker_tls_ca_file: str = _setting(
        "", "PEM CA certificates the peers' server certificates must chain to; empty ="
        " tls_ca_file, or the system's roots without it",
    )
    # ---- etcd: TLS and credentials (issue 24; docs/cluster.md "Securing etcd";
    # server/cluster/etcd_client.py). One block: the inter_broker_* settings are elsewhere.
    etcd_ca_file: str = _setting(
        "",
        "PEM CA certificates etcd's server certificates must chain to (etcds:// only);"
        " empty = the system's trusted roots",
    )
    etcd_cert_file: str = _setting(
        "",
        "PEM client certificate this server shows etcd (etcd's --client-cert-auth), set with"
        " etcd_key_file; etcds:// only",
    )
    etcd_key_file: str = _setting("", "PEM private key of etcd_cert_file")
    etcd_username: str = _setting(
        "", "etcd user this server authenticates as (etcd's auth), set with etcd_password_file"
    )
    etcd_password_file: str = _setting(
        "",
        "file whose first line is etcd_username's password (a file, so that the password is in"
        " no process listing or environment)",
    )
    # ---- replication (issue 17; docs/cluster.md "Replication"; server/cluster/) ----
    replica_lag_time_max_ms: int = _setting(
        30_000,
        "a follower not caught up with its leader for this long leaves the in-sync replica set"
        " (Kafka's replica.lag.time.max.ms); the leader checks every half of it",
        1,
    )
    replica_fetch_wait_max_ms: int = _setting(
        500, "how long a leader holds a follower's fetch when it has no new records (Kafka's"
        " replica.fetch.wait.max.ms)", 0,
    )
    replica_fetch_max_bytes: int = _setting(
        8 * _MIB, "bytes of batches per partition in one answer of a follower's fetch session"
        " (Kafka's replica.fetch.max.bytes, whose default is 1 MiB: stratalog's producers send"
        " batches of up to 960 KiB, Kafka's 16 KiB, and 1 MiB would move one batch per round;"
        " a larger first batch comes whole)", 1,
    )
    replica_fetch_response_max_bytes: int = _setting(
        10 * _MIB, "bytes of batches one answer of a follower's fetch session holds over all its"
        " partitions (Kafka's replica.fetch.response.max.bytes; a larger first batch comes"
        " whole)", 1,
    )
    replica_fetch_backoff_ms: int = _setting(
        1_000, "a follower whose fetch failed waits this long before the next (Kafka's"
        " replica.fetch.backoff.ms)", 0,
    )
    replica_reassignment_throttled_rate: int = _setting(
        0, "bytes per second a server fetches, all together, for the partitions it is being"
        " added to by a reassignment (Kafka's follower.replication.throttled.rate for the"
        " reassigned replicas), and sends, all together, to the replicas being added to the"
        " partitions it leads (Kafka's leader.replication.throttled.rate); 0 = no throttle."
        " In-sync replicas are never throttled", 0,
    )
    request_timeout_ms: int = _setting(
        30_000, "how long an acks=all produce waits for the in-sync replicas before"
        " REQUEST_TIMED_OUT (Kafka's request.timeout.ms)", 1,
    )
    log_defaults: Mapping[str, str] = field(
        default_factory=dict,
        metadata={"doc": "log.* storage defaults by Kafka name, passed to the LogManager"},
    )
    quota_overrides: Mapping[str, Mapping[str, int]] = field(
        default_factory=dict,
        metadata={"doc": "per-principal byte-rate quotas from the file's [quotas] table"},
    )
    #: Where these settings came from, so that SIGHUP can read them again (``settings.reload_settings``).
    sources: SettingsSources | None = field(default=None, compare=False, repr=False)
    #: The names (settings and ``log.*`` defaults) that a file, the environment or a flag gave:
    #: the rest are defaults, which the server may fit to the machine (the open files limit:
    #: server/open_files_fit.py) where it must refuse what the user asked for.
    explicit: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            minimum = f.metadata.get("minimum")
            value = getattr(self, f.name)
            if minimum is not None and value < minimum:
                raise SettingsError(f"setting {f.name!r} must be >= {minimum}, got {value}")
        try:
            parse_address(self.listen)
        except ValueError as exc:
            raise SettingsError(f"setting 'listen': {exc}") from None
        for name in ("kafka_listen", "kafka_advertised_listen"):
            value = getattr(self, name)
            if value:
                try:
                    parse_address(value)
                except ValueError as exc:
                    raise SettingsError(f"setting '{name}': {exc}") from None
        if self.kafka_advertised_listen and parse_address(self.kafka_advertised_listen).port == 0:
            raise SettingsError("setting 'kafka_advertised_listen' needs a real port, not 0")
        if not self.log_dirs or any(not d for d in self.log_dirs):
            raise SettingsError(f"setting 'log_dirs' needs at least one non-empty path, got "
                                f"{list(self.log_dirs)}")
        if self.waiting_rpcs_max >= self.max_concurrent_rpcs:
            raise SettingsError(
                f"setting 'waiting_rpcs_max' ({self.waiting_rpcs_max}) must be below"
                f" 'max_concurrent_rpcs' ({self.max_concurrent_rpcs}): the difference is what"
                " unary RPCs keep when streams and long polls hold every slot they may"
            )
        if self.io_threads_nice > NICE_MAX:
            raise SettingsError(
                f"setting 'io_threads_nice' must be <= {NICE_MAX}, got {self.io_threads_nice}"
            )
        if self.metrics_port > 65535:
            raise SettingsError(f"setting 'metrics_port' must be <= 65535, got {self.metrics_port}")
        if self.logging_level.upper() not in _LEVELS:
            raise SettingsError(
                f"setting 'logging_level' must be one of {', '.join(_LEVELS)}, "
                f"got {self.logging_level!r}"
            )
        object.__setattr__(self, "logging_level", self.logging_level.upper())
        self._check_security()
        for name in self.log_defaults:
            if not name.startswith(_LOG_PREFIX) and name not in _STORAGE_NAMES_OUTSIDE_LOG:
                raise SettingsError(
                    f"storage default {name!r} is not a log.* name nor one of "
                    f"{sorted(_STORAGE_NAMES_OUTSIDE_LOG)}"
                )
        object.__setattr__(self, "log_defaults", dict(self.log_defaults))
        try:
            parse_server_defaults(self.log_defaults)  # the LogManager's check, before any I/O
        except InvalidConfigError as exc:
            raise SettingsError(f"storage default: {exc}") from None
        self._check_authorization_and_quotas()
        self._check_cluster()
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise SettingsError(
                f"setting 'group_min_session_timeout_ms' ({self.group_min_session_timeout_ms})"
                f" must not exceed 'group_max_session_timeout_ms'"
                f" ({self.group_max_session_timeout_ms})"
            )

    def _check_cluster(self) -> None:
        if self.cluster:
            from stratalog.server.cluster.endpoints import parse_cluster_url
            from stratalog.server.cluster.errors import ClusterConfigError

            try:
                parse_cluster_url(self.cluster)
            except ClusterConfigError as exc:
                raise SettingsError(f"setting 'cluster': {exc}") from None
        self._check_etcd_security()
        if self.advertised_listen:
            try:
                address = parse_address(self.advertised_listen)
            except ValueError as exc:
                raise SettingsError(f"setting 'advertised_listen': {exc}") from None
            if address.port == 0:
                raise SettingsError("setting 'advertised_listen' needs a real port, not 0")
        if self.cluster and self.node_id > NODE_ID_MAX:
            # Producer ids in cluster mode carry the node id above a 40-bit counter
            # (server/cluster/producer_ids.py), and producer ids are int64.
            raise SettingsError(f"setting 'node_id' must be <= {NODE_ID_MAX} in cluster mode,"
                                f" got {self.node_id}")
        if not self.cluster_prefix.startswith("/") or self.cluster_prefix.endswith("/"):
            raise SettingsError(f"setting 'cluster_prefix' must start with '/' and not end with"
                                f" one, got {self.cluster_prefix!r}")
        self._check_inter_broker()

    def _check_inter_broker(self) -> None:
        """The broker identity's settings (docs/cluster.md, "Securing a cluster")."""
        for principal in self.broker_principals:
            _check_principal(f"setting 'broker_principals': {principal!r}", principal)
            if principal == "User:ANONYMOUS":
                raise SettingsError(
                    "setting 'broker_principals': User:ANONYMOUS is anyone who brings no"
                    " credentials, never a server: give the servers a certificate or"
                    " credentials of their own"
                )
        if bool(self.inter_broker_user) != bool(self.inter_broker_password_file):
            raise SettingsError("settings 'inter_broker_user' and 'inter_broker_password_file'"
                                " go together: give both or neither")
        if self.inter_broker_user and self.inter_broker_token_file:
            raise SettingsError("settings 'inter_broker_user' and 'inter_broker_token_file' are"
                                " two ways to say who this server is: give one")
        if self.inter_broker_tls_ca_file and not self.tls_enabled:
            raise SettingsError("setting 'inter_broker_tls_ca_file' needs TLS: the peers are"
                                " reached over TLS when 'tls_cert_file' is set")
        sends_secret = bool(self.inter_broker_user or self.inter_broker_token_file)
        if sends_secret and not self.tls_enabled and not self.authentication_plaintext_allowed:
            raise SettingsError(
                "inter-broker credentials ('inter_broker_user' or 'inter_broker_token_file')"
                " without TLS would cross the network readable by anyone on the path: set"
                " 'tls_cert_file' and 'tls_key_file', or 'authentication_plaintext_allowed ="
                " true' on a network that is private"
            )
        if not self.cluster:
            return
        if self.broker_principals and not (
                sends_secret or self.tls_client_auth == "required"):
            raise SettingsError(
                "setting 'broker_principals' is set but this server has nothing to prove to"
                " its peers that it is one: set 'inter_broker_user' and"
                " 'inter_broker_password_file', or 'inter_broker_token_file', or"
                " 'tls_client_auth = required' (its certificate names it)"
            )
        if not self.broker_principals and (self.authentication_configured
                                           or not self.anonymous_allowed
                                           or self.authorizer != "none"):
            raise SettingsError(
                "cluster mode with authentication or ACLs needs 'broker_principals': the"
                " servers fetch from each other, and only a server that proves it is one of"
                " them may (without it, followers would arrive anonymous and need rights that"
                " anyone without credentials would then have)"
            )

    def _check_etcd_security(self) -> None:
        from stratalog.server.cluster.endpoints import uses_tls

        if bool(self.etcd_cert_file) != bool(self.etcd_key_file):
            raise SettingsError("settings 'etcd_cert_file' and 'etcd_key_file' go together:"
                                " set both or neither")
        if bool(self.etcd_username) != bool(self.etcd_password_file):
            raise SettingsError("settings 'etcd_username' and 'etcd_password_file' go"
                                " together: set both or neither")
        if not uses_tls(self.cluster):
            for name in ("etcd_ca_file", "etcd_cert_file"):
                if getattr(self, name):
                    raise SettingsError(
                        f"setting '{name}' is for TLS to etcd, but 'cluster' is"
                        f" {self.cluster!r}: write etcds://HOST:PORT to connect with TLS"
                    )

    def _check_authorization_and_quotas(self) -> None:
        if self.authorizer not in AUTHORIZERS:
            raise SettingsError(f"setting 'authorizer' must be one of {', '.join(AUTHORIZERS)},"
                                f" got {self.authorizer!r}")
        for principal in self.super_users:
            _check_principal(f"setting 'super_users': {principal!r}", principal)
        overrides = {}
        for principal, quotas in self.quota_overrides.items():
            where = f"quota override [quotas.{principal!r}]"
            _check_principal(where, principal)
            if not isinstance(quotas, Mapping):
                raise SettingsError(f"{where}: expected a table of {', '.join(QUOTA_NAMES)}")
            for name, value in quotas.items():
                if name not in QUOTA_NAMES:
                    raise SettingsError(f"{where}: unknown quota {name!r}; quotas are "
                                        f"{', '.join(QUOTA_NAMES)} (bytes per second)")
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise SettingsError(f"{where}: {name} must be an integer >= 0 (bytes per"
                                        f" second, 0 = no quota), got {value!r}")
            overrides[principal] = dict(quotas)
        object.__setattr__(self, "quota_overrides", overrides)

    def given(self, name: str) -> bool:
        """Whether setting ``name`` was set by the file, the environment or a flag, rather than
        left at its default: a default may give way where a value someone chose may not (a
        default metrics port already taken). Settings built directly, without
        :func:`load_settings`, count every value as given."""
        return self.sources is None or name in self.explicit

    def _check_security(self) -> None:
        if self.tls_client_auth == "requested":
            raise SettingsError(
                "setting 'tls_client_auth': 'requested' (verify a certificate only if the client"
                " sends one) is not available: gRPC's Python server can only ask for none or"
                " require one; use 'none' or 'required'"
            )
        if self.tls_client_auth not in _CLIENT_AUTH_MODES:
            raise SettingsError(f"setting 'tls_client_auth' must be one of "
                                f"{', '.join(_CLIENT_AUTH_MODES)}, got {self.tls_client_auth!r}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise SettingsError("settings 'tls_cert_file' and 'tls_key_file' go together: "
                                "set both for TLS, or neither")
        if not self.tls_enabled and (self.tls_ca_file or self.tls_client_auth != "none"):
            raise SettingsError("settings 'tls_ca_file' and 'tls_client_auth' need TLS: "
                                "set 'tls_cert_file' and 'tls_key_file' too")
        if self.tls_client_auth == "required" and not self.tls_ca_file:
            raise SettingsError("setting 'tls_client_auth' is 'required' but 'tls_ca_file' is "
                                "empty: name the CA that client certificates must chain to")
        if self.metrics_authentication not in METRICS_AUTHENTICATION_MODES:
            raise SettingsError(
                f"setting 'metrics_authentication' must be one of "
                f"{', '.join(METRICS_AUTHENTICATION_MODES)}, got {self.metrics_authentication!r}"
            )
        if self.metrics_authentication == "required" and not self.authentication_configured:
            raise SettingsError(
                "setting 'metrics_authentication' is 'required' but no scrape could show who it"
                " is: set 'authentication_credentials_file' (Basic or Bearer credentials) or"
                " 'tls_client_auth = required' (client certificates)"
            )
        if self.authentication_anonymous not in _ANONYMOUS_MODES:
            raise SettingsError(
                f"setting 'authentication_anonymous' must be one of "
                f"{', '.join(_ANONYMOUS_MODES)}, got {self.authentication_anonymous!r}"
            )
        for mechanism in self.kafka_sasl_mechanisms:
            if mechanism not in KAFKA_SASL_MECHANISMS:
                raise SettingsError(
                    f"setting 'kafka_sasl_mechanisms': {mechanism!r} is not offered;"
                    f" the mechanisms are {', '.join(KAFKA_SASL_MECHANISMS)}")
        if (self.authentication_credentials_file and not self.tls_enabled
                and not self.authentication_plaintext_allowed):
            raise SettingsError(
                "setting 'authentication_credentials_file' is set but TLS is off: passwords and"
                " tokens would cross the network in the clear, for anyone on the path to read"
                " and replay. Set 'tls_cert_file' and 'tls_key_file', or"
                " 'authentication_plaintext_allowed = true' where a proxy terminates TLS or"
                " clients connect over loopback"
            )

    @property
    def tls_enabled(self) -> bool:
        """Whether the listeners serve TLS."""
        return bool(self.tls_cert_file)

    @property
    def authentication_configured(self) -> bool:
        """Whether callers can prove who they are: passwords/tokens or client certificates."""
        return bool(self.authentication_credentials_file) or self.tls_client_auth == "required"

    @property
    def anonymous_allowed(self) -> bool:
        """Whether a call without credentials is served (as ``User:ANONYMOUS``)."""
        if self.authentication_anonymous == "auto":
            return not self.authentication_configured
        return self.authentication_anonymous == "allowed"

    @property
    def listen_address(self) -> Address:
        return parse_address(self.listen)

    @property
    def metrics_listen_host(self) -> str:
        """The host the metrics endpoint listens on: ``metrics_host``, else the listen host."""
        return self.metrics_host or self.listen_address.host

    def as_mapping(self) -> dict[str, object]:
        """Every setting by name, ``log.*`` defaults included, for the startup log line."""
        values: dict[str, object] = {n: getattr(self, n) for n in SETTING_NAMES}
        values.update(sorted(self.log_defaults.items()))
        for principal, quotas in sorted(self.quota_overrides.items()):
            values.update((f"quotas.{principal}.{name}", value)
                          for name, value in sorted(quotas.items()))
        return values


class SettingsSources(NamedTuple):
    """What :func:`load_settings` read: the file (None: none), the environment and the flags."""

    config_file: str | None
    environ: Mapping[str, str]
    overrides: Mapping[str, object]


#: The SASL mechanisms the Kafka listener can offer (server/kafka/sasl_session.py).
KAFKA_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Values of ``authorizer`` (server/security/authorizer.py owns their meaning).
AUTHORIZERS = ("none", "acl")
#: The quotas a principal may have (Kafka's names), in ``[quotas."User:alice"]`` tables.
QUOTA_NAMES = ("producer_byte_rate", "consumer_byte_rate")


def _check_principal(where: str, principal: str) -> None:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise SettingsError(f"{where}: a principal is '<type>:<name>', e.g. 'User:alice'")


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# The values of the security settings (server/security/ owns their meaning).
_CLIENT_AUTH_MODES = ("none", "required")
#: Values of ``metrics_authentication`` (server/metrics_endpoint.py).
METRICS_AUTHENTICATION_MODES = ("none", "required")
_ANONYMOUS_MODES = ("auto", "allowed", "refused")

#: The server settings' names (``log_defaults`` excluded), in the order of the docs.
_NOT_SETTINGS = frozenset({"log_defaults", "quota_overrides", "sources", "explicit"})
SETTING_NAMES: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(Settings) if f.name not in _NOT_SETTINGS
)
