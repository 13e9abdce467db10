"""The topic catalogue: which topics exist, their partition counts and their config overrides.

Kafka keeps topic metadata outside the log directories (ZooKeeper, then the KRaft metadata log).
stratalog has neither, so the catalogue is a small JSON file at the root of every log directory,
the same content in each, rewritten whole (``durable.atomic_write``) on every change::

    <log dir>/stratalog-topics.json
    {"version":0,"generation":12,"topics":[
      {"name":"orders","partitions":3,"configs":{"segment.bytes":"1048576"},"state":"live"},
      {"name":"old","partitions":1,"configs":{},"state":"deleting"}]}

* ``configs`` holds only the overrides set on the topic; the effective config is the server
  defaults with the overrides on top, so a changed server default reaches every topic that did
  not override it (as in Kafka).
* ``generation`` increases on every write. Every log directory gets a copy; at startup the
  readable copy with the highest generation wins, so a crash between the copies of one change
  (or a log directory that missed changes) cannot roll the catalogue back, and losing one
  directory loses no topic.
* ``state`` is ``live`` or ``deleting``: a topic deletion is first recorded as ``deleting``, then
  its partition directories are renamed ``-delete``, then the entry goes. A crash in between
  finishes the deletion at the next start instead of resurrecting half a topic.

Why one file and not one per topic: a 249-character topic name plus a suffix does not fit the
255-byte file-name limit, and a directory at the root that is not ``<topic>-<partition>`` would
make Kafka's own loader refuse the log directory. Kafka ignores regular files at the root, so a
stratalog log directory still opens in Kafka (which then knows nothing of these configs).

Reading is strict: anything that does not parse as above is a ``CorruptCheckpointError`` naming
the file; a corrupt copy is skipped with a warning when another directory has a good one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .durable import atomic_write
from .errors import CorruptCheckpointError, StorageIOError
from .topic_names import PARTITION_MAX, is_valid_topic_name

__all__ = [
    "CATALOG_FILE",
    "CATALOG_VERSION",
    "STATE_DELETING",
    "STATE_LIVE",
    "TopicCatalog",
    "TopicEntry",
    "parse_catalog",
    "read_catalog",
    "write_catalog",
]

log = logging.getLogger(__name__)

CATALOG_FILE = "stratalog-topics.json"
CATALOG_VERSION = 0
STATE_LIVE = "live"
STATE_DELETING = "deleting"
_STATES = (STATE_LIVE, STATE_DELETING)
# A catalogue larger than this is not one stratalog wrote (10,000 topics with many overrides
# stay well below it); refusing it keeps a corrupt file from exhausting memory.
_CATALOG_BYTES_MAX = 64 * 1024 * 1024


@dataclass(frozen=True)
class TopicEntry:
    """One topic of the catalogue: name, partition count, config overrides and state.

    ``configs`` maps Kafka topic config names to values as strings (overrides only). Validated
    on construction (name, count >= 1, string keys and values, state); the config names and
    values themselves are checked by :class:`~stratalog.server.storage.config.LogConfig`.
    """

    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    state: str = STATE_LIVE

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not is_valid_topic_name(self.name):
            raise ValueError(f"invalid topic name {self.name!r}")
        if (
            isinstance(self.partitions, bool)
            or not isinstance(self.partitions, int)
            or not 1 <= self.partitions <= PARTITION_MAX + 1
        ):
            raise ValueError(f"invalid partition count {self.partitions!r} for topic {self.name}")
        if not isinstance(self.configs, dict) or not all(
            isinstance(key, str) and isinstance(value, str) for key, value in self.configs.items()
        ):
            raise ValueError(f"configs of topic {self.name} must map strings to strings")
        if self.state not in _STATES:
            raise ValueError(f"invalid state {self.state!r} for topic {self.name}")

    @property
    def is_deleting(self) -> bool:
        return self.state == STATE_DELETING

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "partitions": self.partitions,
            "configs": dict(sorted(self.configs.items())),
            "state": self.state,
        }


@dataclass(frozen=True)
class TopicCatalog:
    """An immutable snapshot of the catalogue: a generation number and the topics by name."""

    generation: int = 0
    topics: Mapping[str, TopicEntry] = field(default_factory=dict)

    def with_topic(self, entry: TopicEntry) -> TopicCatalog:
        """A new catalogue (next generation) with ``entry`` added or replacing its namesake."""
        topics = dict(self.topics)
        topics[entry.name] = entry
        return TopicCatalog(self.generation + 1, topics)

    def without_topic(self, name: str) -> TopicCatalog:
        """A new catalogue (next generation) without ``name`` (absent names are fine)."""
        topics = {key: value for key, value in self.topics.items() if key != name}
        return TopicCatalog(self.generation + 1, topics)

    def to_bytes(self) -> bytes:
        document = {
            "version": CATALOG_VERSION,
            "generation": self.generation,
            "topics": [self.topics[name].to_json() for name in sorted(self.topics)],
        }
        return (json.dumps(document, separators=(",", ":")) + "\n").encode("utf-8")


def _corrupt(path: Path, why: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"topic catalogue {path} is corrupt: {why}", path=str(path))


def parse_catalog(data: bytes, path: Path) -> TopicCatalog:
    """Parse the bytes of one catalogue file.

    Raises:
        CorruptCheckpointError: not UTF-8 JSON of the documented shape (names ``path``).
    """
    if len(data) > _CATALOG_BYTES_MAX:
        raise _corrupt(path, f"{len(data)} bytes, more than the {_CATALOG_BYTES_MAX} allowed")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(path, f"not UTF-8 JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise _corrupt(path, "the document is not a JSON object")
    version = document.get("version")
    if version != CATALOG_VERSION or isinstance(version, bool):
        raise _corrupt(path, f"unknown version {version!r} (expected {CATALOG_VERSION})")
    generation = document.get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise _corrupt(path, f"generation {generation!r} is not a non-negative integer")
    raw_topics = document.get("topics")
    if not isinstance(raw_topics, list):
        raise _corrupt(path, "'topics' is not a list")
    topics: dict[str, TopicEntry] = {}
    for index, raw in enumerate(raw_topics):
        if not isinstance(raw, dict):
            raise _corrupt(path, f"topic #{index} is not an object")
        try:
            entry = TopicEntry(
                name=raw.get("name"),  # type: ignore[arg-type]
                partitions=raw.get("partitions"),  # type: ignore[arg-type]
                configs=raw.get("configs", {}),
                state=raw.get("state", STATE_LIVE),
            )
        except ValueError as exc:
            raise _corrupt(path, f"topic #{index}: {exc}") from exc
        if entry.name in topics:
            raise _corrupt(path, f"topic {entry.name!r} is listed twice")
        topics[entry.name] = entry
    return TopicCatalog(generation, topics)


def read_catalog(log_dirs: Iterable[Path]) -> TopicCatalog:
    """The newest readable catalogue among the copies in ``log_dirs``; empty if there is none.

    A copy that does not parse is skipped with a warning if another copy parses; if copies
    exist and none parses, the catalogue cannot be trusted and this raises rather than start
    with topics silently missing.

    Raises:
        CorruptCheckpointError: every existing copy is corrupt (names the first one).
        StorageIOError: a copy exists but cannot be read.
    """
    best: TopicCatalog | None = None
    first_error: CorruptCheckpointError | None = None
    for directory in log_dirs:
        path = Path(directory) / CATALOG_FILE
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageIOError(f"cannot read topic catalogue {path}: {exc}") from exc
        try:
            catalog = parse_catalog(data, path)
        except CorruptCheckpointError as exc:
            log.warning("%s", exc)
            first_error = first_error or exc
            continue
        if best is None or catalog.generation > best.generation:
            best = catalog
    if best is None:
        if first_error is not None:
            raise first_error
        return TopicCatalog()
    if first_error is not None:
        log.warning("using the topic catalogue of generation %d from another log directory",
                    best.generation)
    return best


def write_catalog(log_dirs: Iterable[Path], catalog: TopicCatalog) -> None:
    """Write ``catalog`` atomically and durably into every log directory.

    Raises:
        StorageIOError: a write failed; earlier directories hold the new version, later ones
            the old (the generation decides at the next start).
    """
    data = catalog.to_bytes()
    for directory in log_dirs:
        atomic_write(Path(directory) / CATALOG_FILE, data)
