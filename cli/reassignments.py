"""``stratalog topics reassign``, ``stratalog topics reassignments`` and ``stratalog cluster
drain``: moving partitions' replicas (Kafka's ``kafka-reassign-partitions``; the
AlterPartitionReassignments, ListPartitionReassignments and DrainBroker RPCs;
docs/cluster.md, "Reassigning partitions").

For people::

    $ stratalog topics reassign orders --partition 0 --replicas 2,3,4
    orders-0: reassignment to [2, 3, 4] started
    $ stratalog topics reassignments
    orders-0  replicas [2, 3, 4, 1]  adding [4]  removing [1]  leader 2
      log end: leader 1200, node 3 1200, node 4 310 (890 behind), node 1 1200
    $ stratalog cluster drain --node 1 --wait
    orders-0: [1, 2, 3] -> [2, 3, 4]
    ...
    drained node 1: 3 partition(s) moved

``--wait`` polls the reassignments once a second until the ones started are done, at most
``--timeout-s`` (exit 1 when they are not done by then). ``--format json`` prints one JSON
document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Iterable

from stratalog.client import Client, PartitionReassignment

from .output_format import wants_json

__all__ = ["drain", "list_reassignments", "parse_replicas", "reassign"]

#: How often ``--wait`` asks for the reassignments still in progress (seconds).
WAIT_POLL_S = 1.0


def parse_replicas(text: str) -> tuple[int, ...]:
    """``--replicas 2,3,4`` as node ids (argparse type: ValueError names the fault)."""
    try:
        nodes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--replicas takes node ids separated by commas (2,3,4), got {text!r}") from None
    if not nodes or any(node < 0 for node in nodes):
        raise argparse.ArgumentTypeError(f"--replicas needs node ids >= 0, got {text!r}")
    return nodes


async def _wait(client: Client, keys: Iterable[tuple[str, int]], timeout_s: float) -> bool:
    """Whether every partition of ``keys`` is done being reassigned within ``timeout_s``."""
    waited = set(keys)
    deadline = time.monotonic() + timeout_s
    while waited:
        ongoing = {(r.topic, r.partition) for r in await client.list_partition_reassignments()}
        waited &= ongoing
        if not waited:
            break
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(WAIT_POLL_S)
    return True


async def reassign(client: Client, args: argparse.Namespace) -> int:
    """``topics reassign``: start (``--replicas``) or cancel (``--cancel``) one partition's
    reassignment; 1 when refused, or not done within ``--timeout-s`` with ``--wait``."""
    key = (args.name, args.partition)
    outcome = (await client.alter_partition_reassignments(
        {key: None if args.cancel else args.replicas}))[key]
    done = True
    if outcome is None and args.wait:
        done = await _wait(client, [key], args.timeout_s)
    if wants_json(args):
        print(json.dumps({"topic": args.name, "partition": args.partition,
                          "replicas": None if args.cancel else list(args.replicas),
                          "error": outcome.reason if outcome is not None else None,
                          "message": outcome.message if outcome is not None else None,
                          "done": done if args.wait else None}))
    elif outcome is not None:
        print(f"{args.name}-{args.partition}: not reassigned: {outcome}")
    else:
        what = ("reassignment cancelled (back to the original replicas)" if args.cancel
                else f"reassignment to {list(args.replicas)} started")
        print(f"{args.name}-{args.partition}: {what}")
        if args.wait:
            print(f"{args.name}-{args.partition}: "
                  + ("done" if done else f"not done within {args.timeout_s:g} s"))
    return 1 if outcome is not None or not done else 0


def _progress_text(ongoing: PartitionReassignment) -> str:
    if ongoing.leader_log_end_offset < 0:
        return "  log end: unknown (the leader did not answer)"
    parts = [f"leader {ongoing.leader_log_end_offset}"]
    for node in ongoing.replicas:
        if node == ongoing.leader:
            continue
        end = ongoing.progress.get(node, -1)
        if end < 0:
            parts.append(f"node {node} not fetched yet")
        elif end < ongoing.leader_log_end_offset:
            parts.append(f"node {node} {end} ({ongoing.leader_log_end_offset - end} behind)")
        else:
            parts.append(f"node {node} {end}")
    return "  log end: " + ", ".join(parts)


async def list_reassignments(client: Client, args: argparse.Namespace) -> int:
    """``topics reassignments``: every partition being reassigned (of ``--topic`` if given),
    with its progress as its leader knows it."""
    listed = await client.list_partition_reassignments(progress=True)
    if args.name is not None:
        listed = [r for r in listed if r.topic == args.name]
    if wants_json(args):
        print(json.dumps([{**r._asdict(), "progress": {str(k): v for k, v in r.progress.items()},
                           "target": list(r.target)} for r in listed], indent=2))
        return 0
    if not listed:
        print("No partition is being reassigned.")
    for r in listed:
        print(f"{r.topic}-{r.partition}  replicas {list(r.replicas)}  adding {list(r.adding)}"
              f"  removing {list(r.removing)}  leader {r.leader}")
        print(_progress_text(r))
    return 0


async def drain(client: Client, args: argparse.Namespace) -> int:
    """``cluster drain``: reassign every partition off ``--node``; 1 when a partition could
    not be moved, or (``--wait``) the moves are not done within ``--timeout-s``."""
    metadata = await client.metadata()
    before = {(name, p.partition): p.replicas
              for name, partitions in metadata.topics.items() for p in partitions}
    planned = await client.drain_broker(args.node)
    moved = [key for key, outcome in planned.items() if not isinstance(outcome, Exception)]
    failed = {key: outcome for key, outcome in planned.items() if isinstance(outcome, Exception)}
    done = await _wait(client, moved, args.timeout_s) if args.wait and moved else True
    if wants_json(args):
        print(json.dumps({
            "node": args.node,
            "moved": [{"topic": t, "partition": p, "from": list(before.get((t, p), ())),
                       "to": list(planned[(t, p)])} for t, p in sorted(moved)],
            "failed": [{"topic": t, "partition": p, "error": e.reason, "message": e.message}
                       for (t, p), e in sorted(failed.items())],
            "done": done if args.wait else None}, indent=2))
    else:
        for key in sorted(planned):
            outcome = planned[key]
            if isinstance(outcome, Exception):
                print(f"{key[0]}-{key[1]}: not moved: {outcome}")
            else:
                print(f"{key[0]}-{key[1]}: {list(before.get(key, ()))} -> {list(outcome)}")
        if not planned:
            print(f"node {args.node} holds no replica: nothing to drain")
        elif args.wait:
            print(f"drained node {args.node}: {len(moved)} partition(s) moved" if done else
                  f"node {args.node}: the moves are not done within {args.timeout_s:g} s"
                  " (stratalog topics reassignments shows them)")
        else:
            print(f"node {args.node}: {len(moved)} reassignment(s) started (stratalog topics"
                  " reassignments shows their progress; --wait waits for them)")
    return 1 if failed or not done else 0
