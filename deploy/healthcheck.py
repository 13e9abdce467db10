"""The image's HEALTHCHECK: ask the server's grpc.health.v1 service whether the Broker is SERVING.

Docker runs this inside the container every interval; exit 0 means healthy, 1 unhealthy. The
server sets its health to SERVING once it listens, and NOT_SERVING as soon as a SIGTERM starts
the shutdown, so a stopping container turns unhealthy before it exits.

Which address to ask, first match wins:

1. the first argument, ``HOST:PORT``;
2. ``$STRATALOG_HEALTHCHECK_TARGET`` (not a server setting; the server ignores it);
3. the server's own effective ``listen`` setting, computed as the server does (defaults <
   ``$STRATALOG_CONFIG`` file < ``STRATALOG_*`` variables). A wildcard host (``0.0.0.0``,
   ``::``) is asked on the matching loopback address.

Flags given to ``stratalog serve`` on the command line are not visible here: configure the
container through the environment (or a config file), or set ``STRATALOG_HEALTHCHECK_TARGET``.

    python healthcheck.py [HOST:PORT] [--service NAME] [--timeout-s SECONDS]
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["check", "default_target", "main"]

TARGET_ENV_VAR = "STRATALOG_HEALTHCHECK_TARGET"
#: Below Docker's default health-check timeout (30 s) and the image's (5 s).
DEFAULT_TIMEOUT_S = 3.0
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def default_target() -> str:
    """The address to ask when none is given: see the module docstring."""
    explicit = os.environ.get(TARGET_ENV_VAR, "").strip()
    if explicit:
        return explicit
    from stratalog.server.settings import load_settings

    address = load_settings().listen_address
    host = _WILDCARDS.get(address.host, address.host)
    return f"[{host}]:{address.port}" if ":" in host else f"{host}:{address.port}"


def check(target: str, service: str, timeout_s: float) -> str:
    """The serving status ``target`` reports for ``service`` (e.g. ``"SERVING"``).

    Raises:
        grpc.RpcError: the server did not answer within ``timeout_s`` or refused the call
            (NOT_FOUND for a service it does not know).
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)


def main(argv: list[str] | None = None) -> int:
    from stratalog.v1 import broker_pb2

    broker_service = broker_pb2.DESCRIPTOR.services_by_name["Broker"].full_name
    parser = argparse.ArgumentParser(description="Exit 0 if the stratalog server is SERVING.")
    parser.add_argument("target", nargs="?", help="HOST:PORT (default: see the module docstring)")
    parser.add_argument("--service", default=broker_service,
                        help=f"service to ask about (default {broker_service}; '' = the server)")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S)
    args = parser.parse_args(argv)
    try:
        target = args.target or default_target()
    except ValueError as exc:  # SettingsError: the same message the server would stop with
        print(f"unhealthy: cannot tell where the server listens: {exc}")
        return 1
    import grpc

    try:
        status = check(target, args.service, args.timeout_s)
    except grpc.RpcError as err:
        print(f"unhealthy: {target} {args.service}: {err.code().name} {err.details()}")
        return 1
    print(f"{status}: {target} {args.service}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
