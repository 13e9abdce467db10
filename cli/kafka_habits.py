"""What Kafka and kcat users type, and what the ``stratalog`` command makes of it.

Users arrive with ``kafka-console-consumer.sh``, ``kafka-topics.sh`` and ``kcat`` in their
fingers. What means the same here is accepted as an alias where the subcommand defines its
options (``--bootstrap-server`` for ``--target``, ``--from-beginning``, ``--topic T``,
``--partition 0,1``, ``--offset``/``-o`` with kcat's forms, ``--max-messages``,
``--if-not-exists``, ``--if-exists``, ``--group G``; kafka-topics.sh's ``--create`` ...
``--delete`` and kafka-consumer-groups.sh's ``--list``, ``--describe``, ``--delete``,
``--reset-offsets``, ``--delete-offsets``, turned into the ``topics`` or ``groups`` action by
:func:`kafka_topics_action`). What does not is refused by
:func:`refuse_unknown`: argparse alone would print the *top-level* usage and a bare
"unrecognized arguments"; this prints the subcommand's usage, then one line per flag saying
what to use instead (exit 2, a usage error, as before).

The table is mostly by flag, not by subcommand: a Kafka flag means one thing in every Kafka tool
that takes it. Flags the subcommand does define never reach it (argparse consumed them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = [
    "HINTS",
    "add_topic_argument",
    "chosen_parser",
    "kafka_topics_action",
    "refuse_unknown",
    "resolve_topic",
]

#: A Kafka or kcat flag that ``stratalog`` does not take -> what to use instead (one line). A
#: key with the subcommand before the flag (``produce --topic``) holds for that
#: subcommand only.
HINTS: dict[str, str] = {
    "--group": "consumer groups: stratalog consume T --group G reads as a member; "
               "stratalog groups describe G shows its committed offsets and lag",
    "--all-groups": "one group per command: stratalog groups list, then groups describe G",
    "--all-topics": "one topic per command: --topic T (reset-offsets, delete-offsets)",
    "--to-current": "the committed offsets stay as they are: nothing to reset",
    "--by-duration": "--to-datetime -1h (a relative time counts back from now)",
    "--from-file": "one --to-offset N per --topic T --partition P",
    "--export": "--format json prints the plan for scripts",
    "--offsets": "the partition table (offsets, lag) is what groups describe prints by default",
    "--consumer-property": "the console consumer's properties are options here: "
                           "--isolation-level, --reset (auto.offset.reset; with --group: "
                           "--from earliest|latest), --auto-commit-interval-ms, --target",
    "--consumer.config": "client settings are options here (--target, --tls, --ca-file, --user "
                         "...), or STRATALOG_* environment variables (stratalog consume --help)",
    "--command-config": "client settings are options here (--target, --tls, --ca-file, --user "
                        "...), or STRATALOG_* environment variables",
    "--property": "print.key=true is --print-key, key.separator=S is --key-separator S, "
                  "print.partition/print.offset/print.timestamp are --print-metadata",
    "--formatter": "--format json (one object per record) or --print-metadata",
    "--timeout-ms": "without --follow, consume stops at the end of every partition; "
                    "--max-records N stops after N",
    "produce --topic": "the topic is the first argument: stratalog produce TOPIC",
    "--whitelist": "--include REGEX (with --group G)",
    "--include": "consume T1,T2 --group G, or consume --include REGEX --group G",
    "--skip-message-on-error": "a record is never skipped: a batch that fails its CRC is an error",
    "--replica-assignment": "replicas are placed by the cluster's controller: "
                            "--replication-factor N on topics create",
    "--add-config": "topics alter NAME --set NAME=VALUE (repeatable)",
    "--delete-config": "topics alter NAME --delete NAME (repeatable)",
    "topics alter --config": "--set NAME=VALUE (repeatable)",
    "--entity-type": "topic configs: stratalog topics alter TOPIC --set NAME=VALUE",
    "--entity-name": "topic configs: stratalog topics alter TOPIC --set NAME=VALUE",
    # kcat's one-letter flags.
    "-b": "--target HOST[:PORT] (kcat's -b, Kafka's --bootstrap-server)",
    "-t": "the topic is the first argument: stratalog consume TOPIC",
    "-C": "consume is the subcommand: stratalog consume TOPIC",
    "-P": "produce is the subcommand: stratalog produce TOPIC",
    "-L": "stratalog topics list, stratalog topics describe TOPIC",
    "-e": "consume stops at the end of every partition already (kcat's -e); --follow waits "
          "for more",
    "-c": "--max-records N",
    "-J": "--format json",
    "-K": "--print-key --key-separator SEP",
    "-f": "--format json, --print-key and --print-metadata choose what is printed",
    "-G": "stratalog consume T --group G (kcat -G G T)",
}


# kafka-topics.sh's and kafka-consumer-groups.sh's actions, which are flags there and
# subcommands here.
_ACTIONS = {
    "topics": {"--create": "create", "--list": "list", "--describe": "describe",
               "--delete": "delete", "--alter": "alter"},
    "groups": {"--list": "list", "--describe": "describe", "--delete": "delete",
               "--reset-offsets": "reset-offsets", "--delete-offsets": "delete-offsets"},
}


def kafka_topics_action(argv: Sequence[str]) -> list[str]:
    """``argv`` with kafka-topics.sh's (or kafka-consumer-groups.sh's) action flag made the
    ``topics`` (or ``groups``) subcommand's action.

    ``stratalog topics --create --topic T --partitions 3`` (as ``kafka-topics.sh`` takes it)
    becomes ``stratalog topics create --topic T --partitions 3``; ``stratalog groups
    --describe --group G`` becomes ``stratalog groups describe --group G``. Only when the
    command is not already followed by an action and exactly one such flag follows it;
    ``topics alter --delete NAME`` (a config to return to its default) is left alone, since
    ``alter`` comes first there.
    """
    argv = list(argv)
    command = _command_index(argv)
    if command is None or argv[command] not in _ACTIONS:
        return argv  # (a topic named "topics" is not the command)
    actions = _ACTIONS[argv[command]]
    start = command + 1
    if start < len(argv) and not argv[start].startswith("-"):
        return argv  # an action is there already (or a mistake argparse will name)
    flags = [i for i in range(start, len(argv)) if argv[i] in actions]
    if len(flags) != 1:
        return argv
    action = actions[argv.pop(flags[0])]
    argv.insert(start, action)
    return argv


def _command_index(argv: Sequence[str]) -> int | None:
    """Where the subcommand is: the first argument that is neither an option nor the value of
    the option before it (``--target db1 topics``: 2)."""
    expects_value = False
    for index, token in enumerate(argv):
        if token.startswith("-"):
            # A global option with a value given separately (--target X); the flags among
            # them (--tls, --allow-plaintext-credentials) take none.
            expects_value = "=" not in token and token not in _GLOBAL_FLAGS
        elif expects_value:
            expects_value = False
        else:
            return index
    return None


_GLOBAL_FLAGS = frozenset({"--tls", "--allow-plaintext-credentials", "--version", "-h", "--help"})


def chosen_parser(parser: argparse.ArgumentParser,
                  args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subcommand's parser (``stratalog topics create`` -> ``create``'s), so that
    its usage, not the top level's, is printed."""
    while True:
        # argparse keeps no public list of a parser's subcommands.
        subparsers = [a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            return parser
        name = getattr(args, subparsers[0].dest, None)
        if name is None or name not in subparsers[0].choices:
            return parser
        parser = subparsers[0].choices[name]


def refuse_unknown(parser: argparse.ArgumentParser, extras: Sequence[str]) -> NoReturn:
    """Exit 2 with ``parser``'s usage, the arguments it did not take, and what to use instead
    of each Kafka or kcat flag among them."""
    lines = [f"unrecognized arguments: {' '.join(extras)}"]
    command = parser.prog.partition(" ")[2]  # "topics alter" of "stratalog topics alter"
    for extra in extras:
        flag = _flag_of(extra)
        hint = HINTS.get(f"{command} {flag}", HINTS.get(flag))
        if hint is not None:
            lines.append(f"  {flag}: {hint}")
    if len(lines) == 1:
        lines.append(f"  see {parser.prog} --help for what it takes")
    parser.print_usage(sys.stderr)
    parser.exit(2, f"{parser.prog}: error: " + "\n".join(lines) + "\n")


def _flag_of(argument: str) -> str:
    """``--property`` of ``--property=x``, ``-K`` of kcat's ``-K:``."""
    if argument.startswith("--"):
        return argument.split("=", 1)[0]
    if argument.startswith("-") and len(argument) > 2 and argument[1].isalpha():
        return argument[:2]
    return argument


def add_topic_argument(parser: argparse.ArgumentParser, dest: str = "topic",
                       help: str = "the topic", *, required: bool = True) -> None:
    """The topic as the first argument, or as ``--topic T`` (Kafka's tools take it so).

    :func:`resolve_topic` puts the one given in ``args.<dest>`` and refuses two different ones,
    and neither unless not ``required`` (then ``args.<dest>`` is None)."""
    parser.add_argument(dest, nargs="?", metavar=dest.upper(), help=help)
    parser.add_argument("--topic", dest="topic_option", metavar=dest.upper(),
                        help="the same as the first argument (as Kafka's tools take it)")
    parser.set_defaults(topic_dest=dest, topic_required=required)


def resolve_topic(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.<dest>`` from the positional or ``--topic``; a usage error (exit 2) if neither
    or two different ones were given."""
    dest = getattr(args, "topic_dest", None)
    if dest is None:
        return
    positional, option = getattr(args, dest), getattr(args, "topic_option", None)
    if positional is None and option is None and args.topic_required:
        parser.error(f"the following arguments are required: {dest.upper()} (or --topic)")
    if positional is not None and option is not None and positional != option:
        parser.error(f"two topics: {positional!r} and --topic {option!r}; give one")
    setattr(args, dest, positional if positional is not None else option)
