"""Where ``stratalog consume`` starts reading and where it stops, as users type it.

``--from WHERE`` (also ``--offset``, Kafka's console consumer's name, and ``-o``, kcat's) takes
every form of kcat's ``-o``, and each may be given more than once (kcat's
``-o s@A -o e@B``)::

    earliest | beginning      each partition's log start (the default)
    latest | end              each partition's end: only records produced later (with --follow)
    N                         offset N in every partition (an error where a log does not hold
                              it, unless --reset)
    -N                        the last N records of each partition: from max(log start,
                              end - N) (kcat's "relative offset from end")
    s@TIME                    the first record at or after TIME (the same as --from-timestamp)
    e@TIME                    stop each partition at its first record at or after TIME, which
                              is not printed (kcat's "timestamp to stop at, not included")

TIME is any form of :mod:`stratalog.cli.timestamps` (ms, ISO-8601, ``-1h``). ``-N`` counts
offsets, as kcat's does: in a compacted topic, or one with transaction markers, it may print
fewer than N records. Two starts (``--from 5 --from-beginning``) are a usage error rather than
the last one silently winning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .timestamps import parse_timestamp_ms

__all__ = ["WHERE_HELP", "ReadRange", "read_range"]

#: The forms of ``--from``, for ``--help``.
WHERE_HELP = (
    "earliest|beginning (default), latest|end, an offset N, -N (the last N records of each "
    "partition), s@TIME (from TIME), e@TIME (stop before TIME); repeatable, as kcat's -o"
)

_TAIL = re.compile(r"-(\d+)", re.ASCII)
_EARLIEST = ("earliest", "beginning")
_LATEST = ("latest", "end")


@dataclass(frozen=True)
class ReadRange:
    """A consume's start and stop, resolved from its options.

    Exactly one start is set: ``start`` ("earliest", "latest" or an offset), or
    ``start_timestamp_ms``, or ``tail_records`` (the last N of each partition; ``start`` is
    then "latest", where the Consumer starts before seeking back). ``end_timestamp_ms`` is
    independent: None reads to the end (or forever with --follow).
    """

    start: str | int = "earliest"
    start_timestamp_ms: int | None = None
    tail_records: int | None = None
    end_timestamp_ms: int | None = None


def read_range(wheres: list[str] | None, from_timestamp: str | None) -> ReadRange:
    """The range that ``--from``/``-o`` values (in the order given) and ``--from-timestamp``
    describe.

    Raises:
        ValueError: a value of none of the forms, or two starts; the message names the value
            and lists the forms.
    """
    starts: list[tuple[str, ReadRange]] = []
    end_timestamp_ms = None
    if from_timestamp is not None:
        starts.append((f"--from-timestamp {from_timestamp}",
                       ReadRange(start_timestamp_ms=_timestamp(from_timestamp, "--from-timestamp"))))
    for where in wheres or ():
        text = where.strip()
        lowered = text.lower()
        if lowered.startswith("e@"):
            if end_timestamp_ms is not None:
                raise ValueError(f"two stop times: e@... given twice (last {where!r})")
            end_timestamp_ms = _timestamp(text[2:], "e@")
            continue
        if lowered in _EARLIEST:
            found = ReadRange(start="earliest")
        elif lowered in _LATEST:
            found = ReadRange(start="latest")
        elif lowered.startswith("s@"):
            found = ReadRange(start_timestamp_ms=_timestamp(text[2:], "s@"))
        elif text.isascii() and text.isdigit():
            found = ReadRange(start=int(text))
        elif (tail := _TAIL.fullmatch(text)) is not None:
            found = ReadRange(start="latest", tail_records=int(tail.group(1)))
        else:
            raise ValueError(f"--from takes {WHERE_HELP}; got {where!r}")
        starts.append((where, found))
    if len(starts) > 1:
        raise ValueError("two places to start: " + " and ".join(repr(w) for w, _ in starts)
                         + "; give one")
    chosen = starts[0][1] if starts else ReadRange()
    return ReadRange(chosen.start, chosen.start_timestamp_ms, chosen.tail_records,
                     end_timestamp_ms)


def _timestamp(text: str, option: str) -> int:
    try:
        return parse_timestamp_ms(text)
    except ValueError as exc:
        raise ValueError(f"{option}: {exc}") from None
