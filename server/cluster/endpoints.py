"""The ``--cluster`` URL: ``etcd://HOST:PORT[,HOST:PORT...]``, the etcd endpoints to use.

Two schemes: ``etcd://`` (plaintext gRPC) and ``etcds://`` (TLS to every endpoint, verified
against ``etcd_ca_file``; server/cluster/etcd_client.py). Hosts are names or IPv4 addresses,
IPv6 in brackets; the port is required (etcd's client port, 2379 by convention, is not assumed:
a wrong guess would hang the start instead of failing it). The endpoints are members of one
etcd cluster, used in turn: the first that answers at start, the next one when it stops
answering (session.py).
"""

from __future__ import annotations

from typing import NamedTuple

from .errors import ClusterConfigError

__all__ = ["Endpoint", "parse_cluster_url", "uses_tls"]

_SCHEME = "etcd://"
_TLS_SCHEME = "etcds://"


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
    scheme = _TLS_SCHEME if uses_tls(url) else _SCHEME
    if not url.startswith(scheme):
        raise ClusterConfigError(
            f"{url!r} is not an etcd URL: expected etcd://HOST:PORT[,HOST:PORT...], or"
            " etcds://... for TLS"
        )
    endpoints = []
    for part in url[len(scheme):].rstrip("/").split(","):
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


def uses_tls(url: str) -> bool:
    """Whether ``url`` asks for TLS to etcd (``etcds://``)."""
    return url.startswith(_TLS_SCHEME)
