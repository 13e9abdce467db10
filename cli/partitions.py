"""``--partition N`` on the commands that take it: repeatable where several make sense.

``consume`` and ``offsets`` read "these partitions" from a repeated ``--partition`` or a
comma-separated list (``--partition 0,1``, as kcat users write it; in the order given; a
partition named twice is a usage error). ``produce`` sends to one partition: a
second ``--partition`` is a usage error rather than the last one silently winning, which is
argparse's default for an option given twice.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["add_partition_argument", "chosen_or_all", "partition_list", "partition_number"]


def partition_number(text: str) -> int:
    """A partition number >= 0 (argparse ``type``: a bad one is a usage error, exit 2)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a partition number, got {text!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"a partition number is >= 0, got {number}")
    return number


def partition_list(text: str) -> list[int]:
    """``N`` or ``N,M,...``: partition numbers >= 0 (argparse ``type``)."""
    return [partition_number(entry) for entry in text.split(",")]


class _Partitions(argparse.Action):
    """Collects repeated ``--partition`` values (each one or a comma-separated list) into a
    list, refusing one named twice."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        chosen = list(getattr(namespace, self.dest, None) or ())
        for value in values:
            if value in chosen:
                parser.error(f"argument {option_string}: partition {value} is given twice")
            chosen.append(value)
        setattr(namespace, self.dest, chosen)


class _OnlyOnce(argparse.Action):
    """Stores the value, refusing a second occurrence of the option."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"argument {option_string}: given twice; this command sends to one "
                         "partition")
        setattr(namespace, self.dest, values)


def add_partition_argument(
    parser: argparse.ArgumentParser, *, repeatable: bool, help: str
) -> None:
    """``--partition N``: a list in ``args.partitions`` (None: not given) when ``repeatable``,
    else one number in ``args.partition`` (None: not given)."""
    if repeatable:
        parser.add_argument("--partition", type=partition_list, action=_Partitions,
                            dest="partitions", default=None, metavar="N[,N...]", help=help)
    else:
        parser.add_argument("--partition", type=partition_number, action=_OnlyOnce,
                            default=None, metavar="N", help=help)


def chosen_or_all(chosen: Sequence[int] | None, count: int) -> list[int]:
    """The partitions ``--partition`` named, or all ``count`` of the topic when none was."""
    return list(range(count)) if chosen is None else list(chosen)
