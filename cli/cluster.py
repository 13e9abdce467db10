"""``stratalog cluster describe``: the brokers, the controller and who leads what (Metadata).

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
