"""The ``--cluster`` URL: ``etcd://HOST:PORT[,HOST:PORT...]``, the etcd endpoints to use.

Only the ``etcd`` scheme exists. Hosts are names or IPv4 addresses, IPv6 in brackets; the port
is required (etcd's client port, 2379 by convention, is not assumed: a wrong guess would hang
the start instead of failing it).
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import ClusterConfigError

__all__ = ["Endpoint", "parse_cluster_url"]

_SCHEME = "etcd://"


class Endpoint(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_cluster_url(url: str) -> list[Endpoint]:
    """The endpoints of ``url``, in order.

    Raises:
        ClusterConfigError: another scheme, no endpoint, or an endpoint that is not HOST:PORT
            with a port in 1..65535.
    """
    if not url.startswith(_SCHEME):
        raise ClusterConfigError(
            f"{url!r} is not an etcd URL: expected etcd://HOST:PORT[,HOST:PORT...]"
        )
    endpoints = []
    for part in url[len(_SCHEME):].rstrip("/").split(","):
        text = part.strip()
        if text.startswith("["):
            host, sep, rest = text[1:].partition("]")
            port_text = rest[1:] if sep and rest.startswith(":") else ""
        else:
            host, _, port_text = text.rpartition(":")
        if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ClusterConfigError(
                f"{url!r}: endpoint {text!r} is not HOST:PORT with a port in 1..65535"
            )
        endpoints.append(Endpoint(host, int(port_text)))
    return endpoints
