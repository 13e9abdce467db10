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

TLS (docs/security.md): when the server's settings name a certificate (``tls_cert_file``), the
check connects with TLS, trusting ``$STRATALOG_HEALTHCHECK_CA_FILE``, else ``tls_ca_file``,
else the server's own certificate file, and checks the name
``$STRATALOG_HEALTHCHECK_SERVER_NAME`` (default ``localhost``: give the server's certificate
that name). With ``tls_client_auth = required`` it presents the server's own certificate and
key (which then need the clientAuth usage too). Health needs no credentials.

    python healthcheck.py [HOST:PORT] [--service NAME] [--timeout-s SECONDS]
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["check", "default_target", "main"]

TARGET_ENV_VAR = "STRATALOG_HEALTHCHECK_TARGET"
CA_FILE_ENV_VAR = "STRATALOG_HEALTHCHECK_CA_FILE"
SERVER_NAME_ENV_VAR = "STRATALOG_HEALTHCHECK_SERVER_NAME"
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


def channel_security() -> tuple[object | None, list[tuple[str, str]]]:
    """gRPC channel credentials and options for the server's own TLS settings (None: plaintext).

    Raises:
        ValueError: the settings do not load (SettingsError), or a file does not read.
    """
    from stratalog.server.settings import load_settings

    settings = load_settings()
    if not settings.tls_enabled:
        return None, []
    import grpc

    def read(path: str) -> bytes:
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None

    ca = os.environ.get(CA_FILE_ENV_VAR) or settings.tls_ca_file or settings.tls_cert_file
    key = cert = None
    if settings.tls_client_auth == "required":
        key, cert = read(settings.tls_key_file), read(settings.tls_cert_file)
    credentials = grpc.ssl_channel_credentials(read(ca), key, cert)
    name = os.environ.get(SERVER_NAME_ENV_VAR) or "localhost"
    return credentials, [("grpc.ssl_target_name_override", name)]


def check(target: str, service: str, timeout_s: float,
          security: tuple[object | None, list[tuple[str, str]]] = (None, [])) -> str:
    """The serving status ``target`` reports for ``service`` (e.g. ``"SERVING"``).

    Raises:
        grpc.RpcError: the server did not answer within ``timeout_s`` or refused the call
            (NOT_FOUND for a service it does not know).
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    credentials, options = security
    if credentials is None:
        channel = grpc.insecure_channel(target)
    else:
        channel = grpc.secure_channel(target, credentials, options=options)  # type: ignore[arg-type]
    with channel:
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
        security = channel_security()
    except ValueError as exc:  # SettingsError: the same message the server would stop with
        print(f"unhealthy: cannot tell where and how the server listens: {exc}")
        return 1
    import grpc

    try:
        status = check(target, args.service, args.timeout_s, security)
    except grpc.RpcError as err:
        print(f"unhealthy: {target} {args.service}: {err.code().name} {err.details()}")
        return 1
    print(f"{status}: {target} {args.service}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
