"""``stratalog acls add|remove|list``: manage the server's ACLs, as Kafka's kafka-acls.sh does.

The options are kafka-acls.sh's::

    stratalog acls add --allow-principal User:alice --operation Read --topic orders
    stratalog acls add --allow-principal User:alice --producer --topic orders- \\
        --resource-pattern-type prefixed --transactional-id app-1
    stratalog acls add --deny-principal User:bob --deny-host 10.0.0.7 --operation All --topic '*'
    stratalog acls add --allow-principal User:ops --operation Alter --cluster
    stratalog acls remove --allow-principal User:alice --topic orders
    stratalog acls list [--topic orders] [--principal User:alice] [--format json]
    stratalog acls add --allow-principal User:alice --consumer --topic orders --group billing

``add`` creates, for every resource named (``--topic``, ``--group``, ``--cluster``,
``--transactional-id``, each repeatable), an ALLOW binding per allowed principal × ``--allow-host`` × operation and a
DENY binding per denied principal × ``--deny-host`` × operation. Hosts default to ``*``;
operations to All. ``--producer`` stands for WRITE, DESCRIBE and CREATE on the topics (and
WRITE, DESCRIBE on ``--transactional-id``s; IDEMPOTENT_WRITE on the cluster with
``--idempotent``); ``--consumer`` for READ and DESCRIBE on the topics and READ on the
``--group``s, as Kafka's. A consumer group (``--group``, the GROUP resource type) takes READ (to
join it and commit), DESCRIBE (to list and describe it) and DELETE (to delete it or its
offsets), as Kafka's (docs/groups.md).

``remove`` deletes the bindings on the resources named that match the principals, hosts and
operations given; what is not given matches anything (Kafka's tool removes only operation All
when no ``--operation`` is given, and every principal's ACLs when no principal is: here both
mean "any"). With no resource, it refuses unless ``--all`` says to consider every resource.

``list`` shows the bindings on the resources named (every binding when none is), filtered by
``--principal``; ``--resource-pattern-type match`` lists what applies to a name (the literal, the
``*`` and the prefixes). Patterns: ``literal`` (default) or ``prefixed`` for ``add``; also
``any`` and ``match`` for ``remove`` and ``list``.

The connection's TLS and credential options are connection.py's (``--tls``, ``--ca-file``,
``--user`` with ``--password-file``, ``--token-file`` ...): the caller's principal is the one the
ACLs are checked for. Exit codes are connection.py's too: 0 done, 1 refused by the server (NOT_AUTHORIZED: the caller
needs ALTER on the cluster to change ACLs, DESCRIBE to list them), 2 bad usage, 3 unreachable.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from itertools import product

from stratalog.client.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

from .connection import EXIT_OK, add_target_argument, connect, fail, run_client_command
from .output_format import add_format_argument, wants_json

__all__ = ["add_parser", "run"]

_WILDCARD_HOST = "*"
_PRODUCER_TOPIC = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
_PRODUCER_TRANSACTIONAL_ID = (AclOperation.WRITE, AclOperation.DESCRIBE)
_CONSUMER_TOPIC = (AclOperation.READ, AclOperation.DESCRIBE)
_CONSUMER_GROUP = (AclOperation.READ,)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acls", help="add, remove, list ACLs (Kafka's kafka-acls.sh options)",
        description="Manage the server's ACLs (it must run with authorizer = \"acl\").",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="create ACL bindings")
    remove = actions.add_parser("remove", help="delete the ACL bindings that match")
    listing = actions.add_parser("list", help="show ACL bindings")
    for sub, pattern_types in (
        (add, ("literal", "prefixed")),
        (remove, ("literal", "prefixed", "any", "match")),
        (listing, ("literal", "prefixed", "any", "match")),
    ):
        resources = sub.add_argument_group("resources")
        resources.add_argument("--topic", action="append", default=[], metavar="NAME",
                               help="a topic (repeatable); '*' is every topic")
        resources.add_argument("--group", action="append", default=[], metavar="NAME",
                               help="a consumer group (repeatable); '*' is every group")
        resources.add_argument("--cluster", action="store_true", help="the cluster")
        resources.add_argument("--transactional-id", action="append", default=[],
                               metavar="ID", help="a transactional id (repeatable)")
        resources.add_argument(
            "--resource-pattern-type", default="literal", choices=pattern_types,
            type=str.lower,
            help="how the names above select resources: literal (the name itself; default),"
                 " prefixed (every name starting with it)"
                 + ("" if sub is add else ", any (literal or prefixed), match (the bindings"
                    " that apply to the name)"),
        )
        add_target_argument(sub)
        add_format_argument(sub)
    for sub in (add, remove):
        entries = sub.add_argument_group("who and what")
        entries.add_argument("--allow-principal", action="append", default=[],
                             metavar="PRINCIPAL", help="User:<name>, or User:* (repeatable)")
        entries.add_argument("--deny-principal", action="append", default=[],
                             metavar="PRINCIPAL", help="User:<name>, or User:* (repeatable)")
        entries.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                             help="IP address the allowed principals connect from (default *)")
        entries.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                             help="IP address the denied principals connect from (default *)")
        entries.add_argument(
            "--operation", action="append", default=[], metavar="OPERATION",
            help="All, Read, Write, Create, Delete, Alter, Describe, ClusterAction,"
                 " DescribeConfigs, AlterConfigs, IdempotentWrite (repeatable; default: "
                 + ("All)" if sub is add else "any)"),
        )
    add.add_argument("--producer", action="store_true",
                     help="WRITE, DESCRIBE, CREATE on the topics; WRITE, DESCRIBE on the"
                          " transactional ids")
    add.add_argument("--idempotent", action="store_true",
                     help="with --producer: IDEMPOTENT_WRITE on the cluster too")
    add.add_argument("--consumer", action="store_true",
                     help="READ, DESCRIBE on the topics; READ on the groups")
    remove.add_argument("--all", action="store_true",
                        help="with no resource option: remove matching ACLs of every resource")
    listing.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL",
                         help="only the ACLs of this principal (repeatable)")
    parser.set_defaults(run=run)


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in args.topic]
    resources += [(ResourceType.GROUP, name) for name in args.group]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    resources += [(ResourceType.TRANSACTIONAL_ID, name) for name in args.transactional_id]
    return resources


def _operations(names: Sequence[str]) -> list[AclOperation]:
    operations = []
    for name in names:
        operation = AclOperation.parse(name)
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise ValueError(f"--operation {name!r}: not an operation an ACL can name")
        operations.append(operation)
    return list(dict.fromkeys(operations))


def _pattern_for(resource_type: ResourceType, pattern_type: PatternType) -> PatternType:
    # The cluster has one literal name whatever the pattern asked for the others.
    if resource_type == ResourceType.CLUSTER and pattern_type == PatternType.PREFIXED:
        return PatternType.LITERAL
    return pattern_type


def _bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    resources = _resources(args)
    if not resources:
        raise ValueError("name a resource: --topic, --group, --cluster or --transactional-id")
    if not args.allow_principal and not args.deny_principal:
        raise ValueError("name who: --allow-principal or --deny-principal")
    if args.idempotent and not args.producer:
        raise ValueError("--idempotent goes with --producer")
    pattern = PatternType.parse(args.resource_pattern_type)
    explicit = _operations(args.operation)
    convenience = args.producer or args.consumer
    if convenience and explicit:
        raise ValueError("give --operation or --producer/--consumer, not both")
    wanted: list[tuple[ResourceType, str, AclOperation]] = []
    for resource_type, name in resources:
        if not convenience:
            wanted += [(resource_type, name, op) for op in explicit or [AclOperation.ALL]]
            continue
        if resource_type == ResourceType.TOPIC:
            ops = (*(_PRODUCER_TOPIC if args.producer else ()),
                   *(_CONSUMER_TOPIC if args.consumer else ()))
        elif resource_type == ResourceType.TRANSACTIONAL_ID and args.producer:
            ops = _PRODUCER_TRANSACTIONAL_ID
        elif resource_type == ResourceType.GROUP and args.consumer:
            ops = _CONSUMER_GROUP
        else:
            raise ValueError(
                "--producer and --consumer make topic (with --producer, transactional id; with"
                " --consumer, group) ACLs; give --operation for the others"
            )
        wanted += [(resource_type, name, op) for op in dict.fromkeys(ops)]
    if args.idempotent:
        wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.IDEMPOTENT_WRITE))
    bindings = []
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        for (resource_type, name, operation), principal, host in product(
            wanted, principals, hosts or [_WILDCARD_HOST]
        ):
            bindings.append(AclBinding(
                resource_type, name, _pattern_for(resource_type, pattern), principal, host,
                operation, permission,
            ))
    return list(dict.fromkeys(bindings))


def _resource_filters(args: argparse.Namespace) -> list[tuple[ResourceType, str | None]]:
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args))
    return resources or [(ResourceType.ANY, None)]


def _filters_to_remove(args: argparse.Namespace) -> list[AclBindingFilter]:
    if not _resources(args) and not args.all:
        raise ValueError(
            "name a resource (--topic, --group, --cluster, --transactional-id), or give --all"
            " to remove the matching ACLs of every resource"
        )
    pattern = PatternType.parse(args.resource_pattern_type)
    operations = _operations(args.operation) or [AclOperation.ANY]
    entries: list[tuple[str | None, str | None, AclPermissionType]] = []
    for permission, principals, hosts in (
        (AclPermissionType.ALLOW, args.allow_principal, args.allow_host),
        (AclPermissionType.DENY, args.deny_principal, args.deny_host),
    ):
        entries += [(p, h, permission)
                    for p, h in product(principals, hosts or [None])]
    if not entries:
        if args.allow_host or args.deny_host:
            raise ValueError("--allow-host/--deny-host go with --allow-principal/--deny-principal")
        entries = [(None, None, AclPermissionType.ANY)]
    filters = []
    for (resource_type, name), (principal, host, permission), operation in product(
        _resource_filters(args), entries, operations
    ):
        filters.append(AclBindingFilter(
            resource_type, name,
            PatternType.ANY if resource_type == ResourceType.ANY else _pattern_for(
                resource_type, pattern),
            principal, host, operation, permission,
        ))
    return filters


def _filters_to_list(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern = PatternType.parse(args.resource_pattern_type)
    filters = []
    for (resource_type, name), principal in product(
        _resource_filters(args), args.principal or [None]
    ):
        filters.append(AclBindingFilter(
            resource_type, name,
            PatternType.ANY if resource_type == ResourceType.ANY else _pattern_for(
                resource_type, pattern),
            principal,
        ))
    return filters


def _binding_json(binding: AclBinding) -> dict[str, str]:
    return {
        "resource_type": binding.resource_type.name,
        "resource_name": binding.resource_name,
        "pattern_type": binding.pattern_type.name,
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation.name,
        "permission_type": binding.permission_type.name,
    }


def _print_by_resource(heading: str, bindings: Iterable[AclBinding]) -> None:
    """Kafka's listing: one block per resource pattern, one line per entry."""
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for binding in bindings:
        key = (binding.resource_type, binding.resource_name, binding.pattern_type)
        by_pattern.setdefault(key, []).append(binding)
    for (resource_type, name, pattern_type), entries in by_pattern.items():
        print(f"{heading} `ResourcePattern(resourceType={resource_type.name}, name={name}, "
              f"patternType={pattern_type.name})`:")
        for binding in entries:
            print(f" \t{binding}")
        print()


def run(args: argparse.Namespace) -> int:
    command = f"acls {args.action}"
    try:
        if args.action == "add":
            bindings = _bindings_to_add(args)
        elif args.action == "remove":
            filters = _filters_to_remove(args)
        else:
            filters = _filters_to_list(args)
    except ValueError as exc:
        return fail(command, str(exc))

    async def body() -> int:
        async with connect(args) as client:
            if args.action == "add":
                await client.create_acls(bindings)
                if wants_json(args):
                    print(json.dumps({"added": [_binding_json(b) for b in bindings]}, indent=2))
                else:
                    _print_by_resource("Added ACLs for resource", bindings)
                return EXIT_OK
            if args.action == "remove":
                deleted = await client.delete_acls(filters)
                if wants_json(args):
                    print(json.dumps({"removed": [_binding_json(b) for b in deleted]}, indent=2))
                elif deleted:
                    _print_by_resource("Removed ACLs for resource", deleted)
                else:
                    print("No ACL matched; nothing removed.")
                return EXIT_OK
            found: dict[AclBinding, None] = {}
            for acl_filter in filters:
                found.update(dict.fromkeys(await client.describe_acls(acl_filter)))
            if wants_json(args):
                print(json.dumps([_binding_json(b) for b in found], indent=2))
            else:
                _print_by_resource("Current ACLs for resource", found)
            return EXIT_OK

    return run_client_command(command, body)
