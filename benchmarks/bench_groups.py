"""Consumer groups: decoding a ``__consumer_offsets`` partition of offset commits, records/s.

A group coordinator that starts, or becomes the leader of a ``__consumer_offsets`` partition,
replays every record of it before it answers (issue 27: a load of 1,000,000 commits in under
2 s). This harness measures the codec's share of that load: decoding the key and value of each
offset commit.

Workload (``--records``, default 1,000,000): offset commits of 200 groups, each committing for
its topic's 50 partitions in turn, as Kafka writes them: key record type 1 (OffsetCommitKey
``consumer-group-NNN``, ``topic-NNN``, partition), value version 3 (offset, leader epoch,
empty metadata, commit time). The commits of one request are one batch (``--per-batch``, 10),
as the coordinator appends them; the keys and values are taken from the batches with
``decode_batch_columns`` (the bytes a loaded segment gives), and the first row times that walk.

Rows (each the best of ``--repeats`` passes over all records, process CPU time):
  segment walk       decode_batch_columns over the batches (context: not the codec's share)
  decode_offset_commit  the flat fields a coordinator's load builds its records from
  decode_record      the typed CoordinatorRecord (OffsetCommitKey, OffsetCommitValue)
  generic reader     key and value through MessageSchema.decode_generic alone: the
                     field-by-field reader every version used to run through
  baseline           decode_record of ``--baseline`` (a git revision, default the merge before
                     the generated readers), run in a child process on the same bytes:
                     "before", in the same run

Run: ``.venv/bin/python -m benchmarks.bench_groups [--records N] [--repeats 3]
[--baseline REV | --baseline none]``.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stratalog.records import BatchBuilder
from stratalog.records.consumer_offsets import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offset_commit,
    decode_record,
    encode_key,
    encode_value,
    key_schema,
    value_schema,
)
from stratalog.records.reader import decode_batch_columns

REPO = Path(__file__).resolve().parent.parent
# The merge of issue 26's consumer-offsets codec, before the generated readers.
DEFAULT_BASELINE = "247a897"
GROUPS = 200
PARTITIONS = 50
BASE_TIMESTAMP_MS = 1_700_000_000_000


def commits(count: int, seed: int = 27) -> list[tuple[bytes, bytes]]:
    """``count`` (key, value) byte pairs of offset commits, as the module docstring says."""
    rng = random.Random(seed)
    pairs = []
    for i in range(count):
        group = (i // PARTITIONS) % GROUPS
        key = OffsetCommitKey(f"consumer-group-{group:03d}", f"topic-{group:03d}", i % PARTITIONS)
        value = OffsetCommitValue(
            offset=rng.randrange(2**40), metadata="", commit_timestamp_ms=BASE_TIMESTAMP_MS + i,
            leader_epoch=rng.randrange(100),
        )
        pairs.append((encode_key(key), encode_value(value)))
    return pairs


def segment(pairs: list[tuple[bytes, bytes]], per_batch: int) -> list[bytes]:
    """The pairs as the coordinator appends them: one batch per commit request."""
    batches = []
    for start in range(0, len(pairs), per_batch):
        builder = BatchBuilder(base_offset=start)
        for offset, (key, value) in enumerate(pairs[start : start + per_batch], start):
            builder.append(BASE_TIMESTAMP_MS + offset, key, value)
        batches.append(builder.build())
    return batches


def walk(batches: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    keys: list[bytes] = []
    values: list[bytes] = []
    for batch in batches:
        _, columns = decode_batch_columns(batch)
        keys += columns.keys
        values += columns.values
    return keys, values


def best_seconds(work: Callable[[], object], repeats: int) -> float:
    """The least process CPU time of ``repeats`` runs of ``work`` (one pass over all records):
    CPU time and the best of several filter out most of a shared machine's noise."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def rows(keys: list[bytes], values: list[bytes], repeats: int) -> dict[str, float]:
    key_reader = key_schema(1)
    value_reader = value_schema(1)

    def flat() -> None:
        for key, value in zip(keys, values, strict=True):
            decode_offset_commit(key, value)

    def typed() -> None:
        for key, value in zip(keys, values, strict=True):
            decode_record(key, value)

    def generic() -> None:
        for key, value in zip(keys, values, strict=True):
            key_reader.decode_generic(key, 1, 2)
            value_reader.decode_generic(value, 3, 2)

    return {
        "decode_offset_commit": best_seconds(flat, repeats),
        "decode_record": best_seconds(typed, repeats),
        "generic reader": best_seconds(generic, repeats),
    }


def baseline_row(revision: str, pairs_file: str, repeats: int) -> float:
    """decode_record of ``revision``'s records/ on the same bytes, in a child process that
    imports that revision's package (git archive into a temporary directory)."""
    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "stratalog"
        package.mkdir()
        (package / "__init__.py").write_text("")
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", revision, "records"],
            check=True, capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(package)], input=archive, check=True)
        code = (
            "import pickle, sys, time\n"
            "import stratalog.records.consumer_offsets as co\n"
            f"assert co.__file__.startswith({tmp!r}), co.__file__\n"
            f"keys, values = pickle.load(open({pairs_file!r}, 'rb'))\n"
            "best = float('inf')\n"
            f"for _ in range({repeats}):\n"
            "    started = time.process_time()\n"
            "    for key, value in zip(keys, values):\n"
            "        co.decode_record(key, value)\n"
            "    best = min(best, time.process_time() - started)\n"
            "print(best)\n"
        )
        # The revision's package first on the path: ahead of this worktree's editable install.
        env = dict(os.environ, PYTHONPATH=tmp, STRATALOG_PURE_PYTHON="1")
        result = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                capture_output=True, text=True, cwd=tmp)
        return float(result.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--per-batch", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE,
                        help="git revision for the 'before' row, or 'none'")
    args = parser.parse_args()

    pairs = commits(args.records)
    batches = segment(pairs, args.per_batch)
    keys, values = walk(batches)
    assert keys == [k for k, _ in pairs] and values == [v for _, v in pairs]
    del pairs
    figures = {"segment walk": best_seconds(lambda: walk(batches), args.repeats)}
    figures.update(rows(keys, values, args.repeats))
    if args.baseline != "none":
        with tempfile.NamedTemporaryFile(suffix=".pickle") as pairs_file:
            pickle.dump((keys, values), pairs_file)
            pairs_file.flush()
            figures[f"baseline {args.baseline}"] = baseline_row(
                args.baseline, pairs_file.name, args.repeats
            )

    print(f"{args.records:,} offset commits (key + value v3), {len(batches):,} batches of "
          f"{args.per_batch}; best of {args.repeats}, CPU s; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'row':28s} {'seconds':>8s} {'records/s':>12s} {'us/record':>10s}")
    for name, seconds in figures.items():
        print(f"{name:28s} {seconds:8.2f} {args.records / seconds:12,.0f} "
              f"{seconds / args.records * 1e6:10.2f}")


if __name__ == "__main__":
    main()
