"""The plan of ``stratalog groups reset-offsets``: each partition's committed offset and its new one.

A pure computation, no I/O: the command gathers, per partition, the group's committed offset
(None: nothing committed), the log start and log end offsets, and for ``--to-datetime`` the
offset ListOffsets found for the time (-1: no record that recent); :func:`plan_reset` turns them
and the chosen :class:`ResetSpec` into one :class:`PlannedReset` per partition, which the command
prints (a dry run, the default) or commits (``--execute``).

The rules are those of Kafka's ``kafka-consumer-groups.sh --reset-offsets``
(tools/src/main/java/org/apache/kafka/tools/GroupOffsetsResetter.java, its reset per kind and
``checkOffsetsRange``):

* ``--to-earliest``: the log start; ``--to-latest``: the log end;
* ``--to-offset N``: N;
* ``--shift-by N``: the committed offset plus N (negative moves back); a partition with no
  committed offset cannot be shifted (:class:`ResetPlanError` naming it, as Kafka's tool
  refuses it);
* ``--to-datetime T``: the first offset whose record's timestamp is at or after T, or the log
  end when no record is that recent (as Kafka's ``getLogTimestampOffsets``);

and every new offset is then clamped to ``[log start, log end]`` (``checkOffsetsRange``): one
below the log start becomes the log start, one past the end becomes the end; the row says it
was clamped (Kafka's tool logs a warning).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "PartitionOffsets",
    "PlannedReset",
    "ResetPlanError",
    "ResetSpec",
    "plan_reset",
]

ResetKind = Literal["to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime"]


class ResetPlanError(ValueError):
    """A partition the spec cannot be applied to (``--shift-by`` without a committed offset)."""


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What ``reset-offsets`` was asked: ``kind`` and its number (``to-offset``: the offset,
    ``shift-by``: the shift, ``to-datetime``: the time in ms; unused otherwise)."""

    kind: ResetKind
    value: int = 0


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """What the command read of one partition. ``committed``: the group's committed offset
    (None: none); ``log_start``/``log_end``: ListOffsets earliest and latest; ``by_time``:
    ListOffsets for the ``--to-datetime`` time (-1: no record at or after it; None: not
    looked up)."""

    topic: str
    partition: int
    committed: int | None
    log_start: int
    log_end: int
    by_time: int | None = None


@dataclass(frozen=True, slots=True)
class PlannedReset:
    """One partition's row of the plan: ``new`` is what ``--execute`` commits; ``clamped``
    says the wanted offset (``wanted``) was outside ``[log start, log end]``."""

    topic: str
    partition: int
    current: int | None
    new: int
    wanted: int

    @property
    def clamped(self) -> bool:
        return self.new != self.wanted


def _wanted(spec: ResetSpec, offsets: PartitionOffsets) -> int:
    if spec.kind == "to-earliest":
        return offsets.log_start
    if spec.kind == "to-latest":
        return offsets.log_end
    if spec.kind == "to-offset":
        return spec.value
    if spec.kind == "shift-by":
        if offsets.committed is None:
            raise ResetPlanError(
                f"{offsets.topic}-{offsets.partition} has no committed offset to shift: "
                "reset it with --to-earliest, --to-latest, --to-offset or --to-datetime first")
        return offsets.committed + spec.value
    if spec.kind == "to-datetime":
        assert offsets.by_time is not None, "to-datetime needs the offset found by time"
        return offsets.log_end if offsets.by_time < 0 else offsets.by_time
    raise AssertionError(f"unknown reset kind {spec.kind!r}")


def plan_reset(spec: ResetSpec, partitions: Sequence[PartitionOffsets]) -> list[PlannedReset]:
    """The new offset of every partition, in the order given (module docstring's rules).

    Raises:
        ResetPlanError: ``--shift-by`` for a partition with no committed offset (the whole
            plan is refused: a partial reset would leave the group half moved).
    """
    plan = []
    for offsets in partitions:
        assert offsets.log_start <= offsets.log_end, offsets
        wanted = _wanted(spec, offsets)
        new = min(max(wanted, offsets.log_start), offsets.log_end)
        plan.append(PlannedReset(offsets.topic, offsets.partition, offsets.committed, new,
                                 wanted))
    return plan
