"""The cluster package's errors: one base, a leaf per failure.

They stop a start (app.py turns them into StartupError: exit 1). None reaches a client yet: no
RPC needs etcd in this step (Metadata answers from the view each server keeps), so
server/status.py has no row for them; the RPCs that will need etcd (CreateTopic with replicas)
will add one.
"""

from __future__ import annotations

__all__ = [
    "ClusterConfigError",
    "ClusterError",
    "CoordinationUnavailableError",
    "NodeIdInUseError",
]


class ClusterError(Exception):
    """Base of the cluster package's errors."""


class ClusterConfigError(ClusterError):
    """A cluster setting that cannot work: a --cluster URL that does not parse."""


class CoordinationUnavailableError(ClusterError):
    """etcd did not answer (no endpoint reachable, or a call timed out)."""


class NodeIdInUseError(ClusterError):
    """Another live server holds this node id: its registration is under a lease that has not
    expired. Raised at start, before this server registers."""

    def __init__(self, node_id: int, holder: str, ttl_s: int) -> None:
        self.node_id = node_id
        self.holder = holder
        super().__init__(
            f"node id {node_id} is already registered by a live server at {holder} (its etcd "
            f"lease expires in {ttl_s} s if that server is gone); give this server another "
            "--node-id, or stop the other one"
        )
