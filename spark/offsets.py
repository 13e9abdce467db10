"""Resolving a query's partitions and its start and end offsets against the server.

Intuition: options say *which* partitions (``subscribe``/``subscribePattern``/``assign``) and
*where* (``earliest``, ``latest``, offsets, a timestamp, timestamps per partition); the planner
turns them into numbers, one start and one end offset per partition, before any task runs, so
every task reads a fixed range and a retried task reads the same records again.

* Partitions and their bounds come from DescribeTopic (one RPC per topic: the log start and log
  end offset of every partition). An unknown topic or partition fails the query, naming the
  option.
* ``earliest``/``latest``/-2/-1 are the log start offset and the *latest* offset: the log end
  offset under read_uncommitted, the last stable offset (LSO, ListOffsets latest with
  READ_COMMITTED: the first offset of the earliest open transaction, else the log end) under
  read_committed, as Spark's Kafka source lists offsets at the consumer's isolation level. A
  timestamp T is ListOffsets(T) at the query's isolation level: the earliest offset whose record
  timestamp is >= T (Kafka's offsetsForTimes; under read_committed only records below the LSO
  match). With no such record, a start fails (strategy ``error``, naming the option) or takes
  the latest offset (strategy ``latest``), and an end takes the latest offset, as in Spark's
  Kafka source.
* JSON offsets and timestamps must name exactly the partitions read (Spark's rule: "you must
  specify all TopicPartitions").

The offset JSON of a stream (``{"topic":{"partition":next_offset}}``, Spark's Kafka format) is
read and written here too: :func:`offsets_to_json` / :func:`offsets_from_json`, sorted by topic
then partition number, so equal offsets always give equal JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import NamedTuple

from stratalog.client import (
    EARLIEST,
    LATEST,
    IsolationLevel,
    SyncClient,
    TopicInfo,
    TopicPartition,
    UnknownTopicOrPartitionError,
)

from .errors import DataLossError, OptionError
from .options import OffsetSpec, Subscription

__all__ = [
    "PartitionBounds",
    "check_range",
    "describe_partitions",
    "offsets_from_json",
    "offsets_to_json",
    "resolve_offsets",
    "sorted_partitions",
]

logger = logging.getLogger(__name__)


class PartitionBounds(NamedTuple):
    """The offsets of a partition: ``[log_start_offset, log_end_offset)`` are stored, and a
    query reads up to ``latest_offset``: the log end offset under read_uncommitted, the last
    stable offset under read_committed. Invariant: ``latest_offset <= log_end_offset``."""

    log_start_offset: int
    log_end_offset: int
    latest_offset: int


def sorted_partitions(partitions: object) -> list[TopicPartition]:
    """Topic-partitions in (topic, partition number) order."""
    return sorted(partitions, key=lambda tp: (tp.topic, tp.partition))  # type: ignore[call-overload]


def _bounds_of(info: TopicInfo) -> dict[TopicPartition, PartitionBounds]:
    return {
        TopicPartition(info.name, p.partition): PartitionBounds(
            p.log_start_offset, p.log_end_offset, p.log_end_offset
        )
        for p in info.partitions
    }


def _with_last_stable_offsets(
    client: SyncClient, found: Mapping[TopicPartition, PartitionBounds]
) -> dict[TopicPartition, PartitionBounds]:
    """``found`` with each latest offset lowered to the partition's last stable offset.

    One ListOffsets(latest, READ_COMMITTED) per partition (DescribeTopic does not carry the
    LSO). A partition deleted in between is left out, as DescribeTopic would have left it.
    """
    out = {}
    for tp, bounds in found.items():
        try:
            stable = client.list_offsets(
                tp.topic, tp.partition, LATEST, isolation_level=IsolationLevel.READ_COMMITTED
            ).offset
        except UnknownTopicOrPartitionError:
            continue
        # The LSO was read after the log end: records appended in between may put it above
        # the log end seen, which then moves up with it (the invariant latest <= log end).
        out[tp] = PartitionBounds(
            bounds.log_start_offset, max(bounds.log_end_offset, stable), stable
        )
    return out


def describe_partitions(
    client: SyncClient,
    subscription: Subscription,
    *,
    isolation_level: IsolationLevel,
    missing_ok: bool = False,
) -> dict[TopicPartition, PartitionBounds]:
    """The subscribed partitions and their bounds, in topic-partition order.

    ``isolation_level`` decides what ``latest_offset`` is (READ_COMMITTED: the LSO, one
    ListOffsets per partition). ``missing_ok``: a subscribed topic that no longer exists is left
    out instead of failing (a running stream decides itself whether that is data loss).

    Raises:
        OptionError: an unknown topic (``subscribe``, ``assign``) or partition (``assign``).
    """
    found = _describe(client, subscription, missing_ok=missing_ok)
    if isolation_level == IsolationLevel.READ_COMMITTED:
        found = _with_last_stable_offsets(client, found)
    return found


def _describe(
    client: SyncClient, subscription: Subscription, *, missing_ok: bool
) -> dict[TopicPartition, PartitionBounds]:
    found: dict[TopicPartition, PartitionBounds] = {}
    if subscription.option == "subscribePattern":
        for info in client.list_topics():
            if subscription.matches(info.name):
                found.update(_bounds_of(info))
        return {tp: found[tp] for tp in sorted_partitions(found)}
    if subscription.option == "subscribe":
        topics = list(subscription.topics)
    else:
        topics = list(dict.fromkeys(tp.topic for tp in subscription.assignment))
    for topic in topics:
        try:
            info = client.describe_topic(topic)
        except UnknownTopicOrPartitionError:
            if missing_ok:
                continue
            raise OptionError(
                subscription.option, f"topic {topic!r} does not exist on {client.target}"
            ) from None
        found.update(_bounds_of(info))
    if subscription.option == "assign":
        selected = {}
        for tp in subscription.assignment:
            if tp not in found:
                if missing_ok and not any(f.topic == tp.topic for f in found):
                    continue
                count = sum(1 for f in found if f.topic == tp.topic)
                raise OptionError(
                    "assign", f"partition {tp.partition} of topic {tp.topic!r} does not exist "
                    f"(the topic has {count} partitions)"
                )
            selected[tp] = found[tp]
        found = selected
    return {tp: found[tp] for tp in sorted_partitions(found)}


def _check_covers(spec: OffsetSpec, given: Mapping[TopicPartition, int],
                  partitions: Mapping[TopicPartition, PartitionBounds]) -> None:
    missing = [tp for tp in partitions if tp not in given]
    extra = [tp for tp in given if tp not in partitions]
    if missing or extra:
        parts = []
        if missing:
            parts.append("no entry for " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append("entries for partitions not read: "
                         + ", ".join(f"{t}-{p}" for t, p in sorted_partitions(extra)))
        raise OptionError(
            spec.option, "must name every partition the query reads, and only those: "
            + "; ".join(parts)
        )


def resolve_offsets(
    client: SyncClient | None,
    spec: OffsetSpec,
    partitions: Mapping[TopicPartition, PartitionBounds],
    *,
    starting: bool,
    strategy: str = "error",
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
) -> dict[TopicPartition, int]:
    """One offset per partition for ``spec``: a start (``starting``) or an end.

    ``client`` may be None when ``spec`` needs no timestamp lookup (file mode). "latest" (and
    -1) is each partition's ``latest_offset``; timestamps are looked up at ``isolation_level``.

    Raises:
        OptionError: JSON naming other partitions than those read; a start timestamp with no
            matching record under strategy ``error``.
    """
    if spec.kind == "earliest":
        return {tp: b.log_start_offset for tp, b in partitions.items()}
    if spec.kind == "latest":
        return {tp: b.latest_offset for tp, b in partitions.items()}
    if spec.kind == "offsets":
        _check_covers(spec, spec.offsets, partitions)
        out = {}
        for tp, bounds in partitions.items():
            offset = spec.offsets[tp]
            if offset == EARLIEST:
                offset = bounds.log_start_offset
            elif offset == LATEST:
                offset = bounds.latest_offset
            out[tp] = offset
        return out
    if spec.kind == "timestamp":
        timestamps = dict.fromkeys(partitions, spec.timestamp)
    else:
        _check_covers(spec, spec.timestamps, partitions)
        timestamps = dict(spec.timestamps)
    assert client is not None, "timestamps need a server"
    out = {}
    for tp, bounds in partitions.items():
        found = client.list_offsets(
            tp.topic, tp.partition, timestamps[tp], isolation_level=isolation_level
        )
        if found.offset >= 0:
            out[tp] = found.offset
        elif starting and strategy == "error":
            raise OptionError(
                spec.option, f"no record of {tp.topic}-{tp.partition} has a timestamp >= "
                f"{timestamps[tp]} ms; set startingOffsetsByTimestampStrategy=latest to start "
                "such partitions at their end instead"
            )
        else:
            out[tp] = bounds.latest_offset
    return out


def check_range(
    tp: TopicPartition,
    start: int,
    end: int,
    bounds: PartitionBounds,
    *,
    fail_on_data_loss: bool,
    starting_option: str,
    ending_option: str,
) -> tuple[int, int]:
    """Check a batch query's planned range of one partition; return it, maybe narrowed.

    The start moves up to the log start offset when records below it are gone and
    ``fail_on_data_loss`` is false. The end moves down to ``bounds.latest_offset`` when it is
    above it, which happens only under read_committed (an ending offset given in JSON above the
    last stable offset): records past the LSO are not known to be committed, so they are not
    read (with a warning); if that leaves nothing, the range is empty (``start, start``).

    Raises:
        DataLossError: ``start`` below the log start offset, with ``fail_on_data_loss``.
        OptionError: a start after the end, or an end past the log end offset.
    """
    name = f"{tp.topic}-{tp.partition}"
    if end > bounds.log_end_offset:
        raise OptionError(
            ending_option, f"offset {end} of {name} is past its log end "
            f"offset {bounds.log_end_offset}"
        )
    if start < bounds.log_start_offset:
        message = (
            f"offsets {start}..{min(end, bounds.log_start_offset) - 1} of "
            f"{name} are no longer in the log (its log start offset is "
            f"{bounds.log_start_offset}): retention or DeleteRecords removed them"
        )
        if fail_on_data_loss:
            raise DataLossError(
                message + ". Set the option failOnDataLoss=false to skip them instead."
            )
        logger.warning("%s; skipped (failOnDataLoss=false)", message)
        start = bounds.log_start_offset
    if start > end:
        unstable = ""
        if bounds.latest_offset == end < bounds.log_end_offset:
            unstable = (
                "; that is its last stable offset (isolationLevel=read_committed): a "
                "transaction open there is not committed yet"
            )
        raise OptionError(
            starting_option, f"starting offset {start} of {name} is after "
            f"its ending offset {end} (from {ending_option}){unstable}"
        )
    if end > bounds.latest_offset:
        logger.warning(
            "%s: ending offset %d of %s is above its last stable offset %d, where a "
            "transaction not committed yet begins; reading up to %d "
            "(isolationLevel=read_committed)",
            ending_option, end, name, bounds.latest_offset, max(bounds.latest_offset, start),
        )
        end = max(bounds.latest_offset, start)
    return start, end


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{"topic": {"partition": offset}}``, topics and partitions in order."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted_partitions(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def offsets_from_json(data: object, what: str) -> dict[TopicPartition, int]:
    """The inverse of :func:`offsets_to_json`; ``what`` names the source in errors (for
    example "the checkpointed start offset").

    Raises:
        ValueError: JSON of another shape (a checkpoint written by another source).
    """
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not an offsets object: {data!r}")
    out: dict[TopicPartition, int] = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"{what}: topic {topic!r} does not map to partition offsets")
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                raise ValueError(f"{what}: {partition!r} is not a partition number") from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"{what}: offset {offset!r} of {topic}-{partition} is invalid")
            out[TopicPartition(topic, number)] = offset
    return out
