"""``--format text|json``: how a command prints what it found.

Every command with JSON output takes ``--format json`` (``text``, for people, is the default).
``--json``, which some commands had before, stays as a deprecated alias of ``--format json`` so
that existing scripts and docs keep working; it is no longer documented elsewhere.

The JSON shapes are the commands' own (see each module); one rule holds for all: record headers
are a list of ``[key, value]`` pairs in record order, as kcat ``-J`` writes them, since Kafka
allows a key to repeat and an object would keep only its last value.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["add_format_argument", "print_table", "wants_json"]


def add_format_argument(parser: argparse.ArgumentParser, *, json_help: str = "") -> None:
    """``--format text|json`` (in ``args.format``) and its deprecated alias ``--json``."""
    parser.add_argument(
        "--format", choices=("text", "json"), default="text",
        help="text for people (default), json for scripts" + (f": {json_help}" if json_help
                                                                else ""),
    )
    parser.add_argument("--json", dest="format", action="store_const", const="json",
                        help="deprecated: the same as --format json")


def print_table(rows: Sequence[Sequence[str]]) -> None:
    """Rows (the first one the header) in columns padded to their widest cell, two spaces
    apart, as Kafka's ``kafka-consumer-groups.sh`` prints them; the last column unpadded."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        print("  ".join([*cells, row[-1]]))


def wants_json(args: argparse.Namespace) -> bool:
    """Whether the command was asked for JSON."""
    return getattr(args, "format", "text") == "json"
