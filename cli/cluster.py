"""``stratalog cluster describe``: the brokers, the controller and who leads what (Metadata);
``stratalog cluster drain --node N [--wait]``: every replica moved off a server
(cli/reassignments.py).

For people::

    controller: node 2 (epoch 3), answered by node 1
    brokers:
      1  127.0.0.1:50051  rack eu-1a
      2  127.0.0.1:50052  rack eu-1b
    topic orders
      partition 0  leader 1  epoch 0  replicas [1]  isr [1]

``--topic NAME`` (repeatable) limits the topics; ``--format json`` prints one JSON document.
A single server (no ``--cluster``) shows itself as node 0, controller and leader of all. A
broker's rack (``broker_rack``) is shown when it has one.
"""

from __future__ import annotations

import argparse
import json

from .connection import add_target_argument, connect, run_client_command
from .output_format import add_format_argument, wants_json
from .reassignments import drain

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="the cluster's brokers, controller and partition leaders",
        description="Inspect the cluster (docs/cluster.md).",
    )
    actions = parser.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    describe = actions.add_parser(
        "describe",
        help="brokers, controller and epoch, and each partition's leader, replicas and ISR",
        description="Ask a server for the cluster's metadata (the Metadata RPC).",
    )
    describe.add_argument("--topic", action="append", default=[], metavar="NAME",
                          help="only this topic (repeatable); default: every topic")
    add_target_argument(describe)
    add_format_argument(describe)
    describe.set_defaults(run=run)
    drain_parser = actions.add_parser(
        "drain", help="move every replica off a server (before removing it)",
        description="Reassign every partition that has the node among its replicas to"
                    " replicas without it: a replacement chosen as new partitions' replicas"
                    " are (racks respected), the leaderships moved off the node first"
                    " (docs/cluster.md, \"Draining a server\").")
    drain_parser.add_argument("--node", type=int, required=True, metavar="N",
                              help="the node id to drain")
    drain_parser.add_argument("--wait", action="store_true",
                              help="wait until every partition moved")
    drain_parser.add_argument("--timeout-s", type=float, default=600.0, metavar="SECONDS",
                              help="how long --wait waits (default: 600)")
    add_target_argument(drain_parser)
    add_format_argument(drain_parser)
    drain_parser.set_defaults(run=run_drain)


def run_drain(args: argparse.Namespace) -> int:
    async def body() -> int:
        async with connect(args) as client:
            return await drain(client, args)

    return run_client_command("cluster drain", body)


def run(args: argparse.Namespace) -> int:
    async def body() -> int:
        async with connect(args) as client:
            metadata = await client.metadata(args.topic)
        if wants_json(args):
            print(json.dumps({
                "node_id": metadata.node_id,
                "controller_id": metadata.controller_id,
                "controller_epoch": metadata.controller_epoch,
                "brokers": [b._asdict() for b in metadata.brokers],
                "topics": {name: [p._asdict() for p in partitions]
                           for name, partitions in metadata.topics.items()},
            }))
            return 0
        controller = ("none known" if metadata.controller_id < 0 else
                      f"node {metadata.controller_id} (epoch {metadata.controller_epoch})")
        print(f"controller: {controller}, answered by node {metadata.node_id}")
        print("brokers:")
        for broker in metadata.brokers:
            rack = f"  rack {broker.rack}" if broker.rack else ""
            print(f"  {broker.node_id}  {broker.address}{rack}")
        for name, partitions in metadata.topics.items():
            print(f"topic {name}")
            for p in partitions:
                print(f"  partition {p.partition}  leader {p.leader}  epoch {p.leader_epoch}"
                      f"  replicas {list(p.replicas)}  isr {list(p.isr)}")
        return 0

    return run_client_command("cluster describe", body)
