"""Bootstrap targets: where a client first reaches a cluster (Kafka's ``bootstrap.servers``).

A client is given one target or several, as a list or as one comma-separated string::

    "127.0.0.1:50051"                                   one server (or one member of a cluster)
    "db1:50051,db2:50051,db3:50051"                     three; the first that answers is used
    ["db1:50051", "db2:50051"]                          the same, as a list

Each entry is a gRPC target (``HOST:PORT``, ``[IPV6]:PORT``, ``dns:///host:port``, ...). A string
that starts with one of gRPC's own name schemes (``ipv4:``, ``ipv6:``, ``dns:``, ``unix:``, ...)
is one target whatever it holds: gRPC's ``ipv4:`` and ``ipv6:`` schemes take a comma-separated
address list of their own, which gRPC balances itself. Entries are stripped of blanks; an
empty entry (``"a:1,,b:2"``, a trailing comma) is an error naming it, as a typo must not silently
drop a server; repeats are dropped, keeping the first. At most :data:`BOOTSTRAP_TARGETS_MAX`.

Sans-IO: checks and splits, never connects.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BOOTSTRAP_TARGETS_MAX", "GRPC_SCHEMES", "bootstrap_targets"]

#: Most bootstrap targets a client takes (a cluster's few seed servers; a list longer than this
#: is a mistake, e.g. a file's contents passed as a target).
BOOTSTRAP_TARGETS_MAX = 64

#: gRPC's own name schemes (grpc/doc/naming.md): a target starting with one is never split.
GRPC_SCHEMES = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")


def bootstrap_targets(target: object) -> tuple[str, ...]:
    """The bootstrap targets in ``target`` (a str, comma-separated or not, or a sequence of
    str), in order, without repeats.

    Raises:
        TypeError: ``target`` is neither a non-empty str nor a sequence of them.
        ValueError: an empty entry (naming its position), no entry at all, or more than
            :data:`BOOTSTRAP_TARGETS_MAX`.
    """
    if isinstance(target, str):
        if not target.strip():
            raise TypeError("target must be a non-empty str such as '127.0.0.1:50051'")
        items: Sequence[object] = [target]
    elif isinstance(target, Sequence) and not isinstance(target, bytes | bytearray):
        items = target
        if not items:
            raise ValueError("target: the list of bootstrap targets is empty")
    else:
        raise TypeError(
            "target must be a non-empty str such as '127.0.0.1:50051', a comma-separated "
            f"list of them, or a list of str; got {target!r}"
        )
    entries: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"target: every bootstrap target must be a str, got {item!r}")
        if item.strip().lower().startswith(GRPC_SCHEMES):
            entries.append(item.strip())
            continue
        for position, entry in enumerate(item.split(","), start=1):
            entry = entry.strip()
            if not entry:
                raise ValueError(
                    f"target {item!r}: entry {position} is empty (a doubled or trailing comma?);"
                    " give HOST:PORT[,HOST:PORT...]"
                )
            entries.append(entry)
    unique = tuple(dict.fromkeys(entries))
    if len(unique) > BOOTSTRAP_TARGETS_MAX:
        raise ValueError(
            f"target: {len(unique)} bootstrap targets, more than {BOOTSTRAP_TARGETS_MAX}; a few"
            " servers of the cluster are enough (the others are learnt from Metadata)"
        )
    return unique
