"""The few lines a server logs once it serves: what runs, where, on which data, how secured.

Before issue 25 every start logged one ``setting X = ...`` line per setting (about 66), and
nothing said in a glance what was secured. The banner is five lines at INFO::

    stratalog 0.1.0 serving on 127.0.0.1:50051 (gRPC, plaintext), 127.0.0.1:9092 (Kafka, plaintext); metrics on http://127.0.0.1:9464/metrics
    data: /srv/data (2 topics, 5 partitions; shut down cleanly last time); RLIMIT_NOFILE 65,536 leaves room for 10,667 partitions
    security: NONE: no TLS, no authentication, no authorizer: anyone who reaches 127.0.0.1:50051 may do everything (docs/security.md)
    cluster: none (a single server)
    settings: 2 given (listen, log_dirs), the rest defaults; every value: stratalog serve --print-settings, or --log-level debug

Every setting is still logged, at DEBUG (``--log-level debug``), and ``stratalog serve
--print-settings`` prints them without starting a server. The banner never names a secret
(passwords and tokens live in files; only the files' paths are settings).

Pure functions: the caller (app.py) gathers the facts and logs the lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stratalog.server.settings import Settings

__all__ = ["ServingFacts", "banner_lines", "security_summary", "settings_summary"]


@dataclass(frozen=True)
class ServingFacts:
    """What the server found and bound at start, for the banner."""

    version: str
    host: str
    port: int
    metrics_url: str | None  # None: the metrics endpoint is off
    log_dirs: Sequence[str]  # resolved paths
    topics: int
    partitions: int
    clean_shutdown: bool  # every log directory had its clean-shutdown marker
    recovered_segments: int
    open_files_limit: int
    partitions_max: int  # what the open files limit leaves room for
    kafka: str | None = None  # the Kafka listener's HOST:PORT; None: off


def banner_lines(settings: Settings, facts: ServingFacts) -> list[str]:
    """The banner, one string per line (see the module docstring)."""
    scheme = "TLS" if settings.tls_enabled else "plaintext"
    metrics = f"; metrics on {facts.metrics_url}" if facts.metrics_url else "; metrics off"
    if facts.recovered_segments:
        shutdown = f"; recovered: {facts.recovered_segments:,} segments rebuilt"
    elif facts.clean_shutdown:
        shutdown = "; shut down cleanly last time"
    else:
        shutdown = ""  # new, or a crash that left nothing to rebuild: nothing to say
    kafka = f", {facts.kafka} (Kafka, {scheme})" if facts.kafka else ""
    cluster = (f"node {settings.node_id} of {settings.cluster}" if settings.cluster
               else "none (a single server)")
    return [
        f"stratalog {facts.version} serving on {facts.host}:{facts.port} (gRPC, {scheme})"
        f"{kafka}{metrics}",
        f"data: {', '.join(facts.log_dirs)} ({facts.topics:,} topics, {facts.partitions:,} "
        f"partitions{shutdown}); RLIMIT_NOFILE {facts.open_files_limit:,} leaves room for "
        f"{facts.partitions_max:,} partitions",
        f"security: {security_summary(settings, f'{facts.host}:{facts.port}')}",
        f"cluster: {cluster}",
        f"settings: {settings_summary(settings)}",
    ]


def security_summary(settings: Settings, address: str) -> str:
    """One line: TLS, who may call (authentication) and what they may do (authorizer)."""
    if (not settings.tls_enabled and not settings.authentication_configured
            and settings.authorizer == "none"):
        return (f"NONE: no TLS, no authentication, no authorizer: anyone who reaches {address} "
                "may do everything (docs/security.md)")
    parts = []
    if settings.tls_enabled:
        client_certificates = (", client certificates required"
                               if settings.tls_client_auth == "required" else "")
        parts.append(f"TLS{client_certificates}")
    else:
        parts.append("no TLS")
    if settings.authentication_credentials_file:
        parts.append(f"passwords and tokens from {settings.authentication_credentials_file}")
    parts.append("anonymous callers allowed" if settings.anonymous_allowed
                 else "anonymous callers refused")
    if settings.authorizer == "none":
        parts.append("no authorizer: every caller may do everything")
    else:
        super_users = len(settings.super_users)
        parts.append(f"authorizer {settings.authorizer} ({super_users} super "
                     f"user{'s' if super_users != 1 else ''})")
    if settings.metrics_port >= 0:
        parts.append(f"metrics authentication {settings.metrics_authentication}")
    return ", ".join(parts)


def settings_summary(settings: Settings) -> str:
    """Which settings were given (by name only: a value may be a path one does not log), and
    where to see them all."""
    given = sorted(settings.explicit)
    named = f"{len(given)} given ({', '.join(given)})" if given else "none given"
    return (f"{named}, the rest defaults; every value: stratalog serve --print-settings, or "
            "--log-level debug")
