"""server/startup_banner.py: the five lines a start logs (issue 25 item 13)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from stratalog.server.settings import load_settings
from stratalog.server.startup_banner import ServingFacts, banner_lines, security_summary

FACTS = ServingFacts(
    version="9.9.9", host="127.0.0.1", port=50051, metrics_url=None, log_dirs=["/d"],
    topics=2, partitions=5, clean_shutdown=False, recovered_segments=3,
    open_files_limit=1024, partitions_max=101,
)


def test_the_banner_names_the_kafka_listener() -> None:
    settings = load_settings(environ={}, overrides={"listen": "127.0.0.1:50051"})
    facts = dataclasses.replace(FACTS, kafka="127.0.0.1:9092")
    assert banner_lines(settings, facts)[0] == (
        "stratalog 9.9.9 serving on 127.0.0.1:50051 (gRPC, plaintext), 127.0.0.1:9092 (Kafka,"
        " plaintext); metrics off")


def test_the_banner_names_what_runs_where_on_what() -> None:
    settings = load_settings(environ={}, overrides={"listen": "127.0.0.1:50051"})
    lines = banner_lines(settings, FACTS)
    assert lines == [
        "stratalog 9.9.9 serving on 127.0.0.1:50051 (gRPC, plaintext); metrics off",
        "data: /d (2 topics, 5 partitions; recovered: 3 segments rebuilt); RLIMIT_NOFILE 1,024 "
        "leaves room for 101 partitions",
        "security: NONE: no TLS, no authentication, no authorizer: anyone who reaches "
        "127.0.0.1:50051 may do everything (docs/security.md)",
        "cluster: none (a single server)",
        "settings: 1 given (listen), the rest defaults; every value: stratalog serve "
        "--print-settings, or --log-level debug",
    ]


def test_security_names_each_layer(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials.json"
    settings = load_settings(environ={}, overrides={
        "authentication_credentials_file": str(credentials),
        "authentication_plaintext_allowed": "true",
        "authorizer": "acl", "super_users": "User:admin;User:ops",
        "metrics_authentication": "required",
    })
    assert security_summary(settings, "h:1") == (
        f"no TLS, passwords and tokens from {credentials}, anonymous callers refused, "
        "authorizer acl (2 super users), metrics authentication required")
    open_acl = load_settings(environ={}, overrides={"authorizer": "acl", "metrics_port": "-1"})
    assert security_summary(open_acl, "h:1") == (
        "no TLS, anonymous callers allowed, authorizer acl (0 super users)")
