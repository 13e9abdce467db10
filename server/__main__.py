"""``python -m stratalog.server``: the same as ``stratalog serve`` (same flags and settings)."""

from __future__ import annotations

import argparse
import sys

from stratalog.server.settings import (
    SettingsError,
    add_arguments,
    describe,
    settings_from_args,
)


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stratalog.server",
        description="Run the stratalog gRPC server until SIGTERM or SIGINT.",
    )
    add_arguments(parser)
    args = parser.parse_args()
    try:
        settings = settings_from_args(args)
    except SettingsError as exc:
        print(f"stratalog.server: {exc}", file=sys.stderr)
        return 2
    if args.print_settings:
        print("\n".join(describe(settings)))
        return 0
    from stratalog.server.app import run

    return run(settings)


if __name__ == "__main__":
    sys.exit(main())
