"""``stratalog reload``: make the running server read its TLS files, credential file and quotas
again (SIGHUP), found through its pid file.

The server writes the pid file when started with ``pid_file`` set (``--pid-file PATH``,
``STRATALOG_PID_FILE``, or ``pid_file`` in its TOML file; the Docker image sets
``/var/lib/stratalog/stratalog.pid``). This command finds the path the same way, ``--pid-file``
first, then ``STRATALOG_PID_FILE``, then ``pid_file`` in ``--config`` or ``$STRATALOG_CONFIG``,
and signals the process only if it still holds the file's lock (server/pid_file.py): a pid alone
may belong to another program by now, which is what ``kill -HUP $(pidof -s python)`` risks.

The signal is all it sends: the reload runs in the server, which logs what it reloaded, or what
failed to load and kept its previous version (docs/security.md, "Reload").

Exit codes::

    0  the server was sent SIGHUP
    1  no server runs with that pid file (missing or stale), or it cannot be signalled
    2  bad usage: no pid file configured anywhere, or a settings file that does not read
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

__all__ = ["add_parser", "run"]

# The two variables of the server's settings that say where its pid file is; the others (the
# clients' STRATALOG_TARGET, STRATALOG_TLS_CA_FILE ...) are not read here.
_PID_FILE_ENV = "STRATALOG_PID_FILE"
_CONFIG_ENV = "STRATALOG_CONFIG"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reload",
        help="make the running server reload its TLS files, credential file and quotas (SIGHUP)",
        description="Send SIGHUP to the server named by its pid file, if that server still runs:"
                    " it reads its TLS certificate and key, its credential file and its quota"
                    " settings again. The pid file is --pid-file, else $STRATALOG_PID_FILE, else"
                    " pid_file in the settings file (--config or $STRATALOG_CONFIG).",
    )
    parser.add_argument("--pid-file", metavar="PATH",
                        help="the server's pid file (its --pid-file)")
    parser.add_argument("--config", metavar="PATH",
                        help="the server's TOML settings file, to read pid_file from")
    parser.set_defaults(run=run)


def _pid_file_path(args: argparse.Namespace) -> str:
    """The pid file's path, as the server resolves its own ``pid_file`` setting.

    Raises:
        SettingsError: the settings file does not read.
    """
    if args.pid_file:
        return args.pid_file
    from stratalog.server.settings import load_settings

    environ = {name: os.environ[name] for name in (_PID_FILE_ENV, _CONFIG_ENV)
               if name in os.environ}
    return load_settings(config_file=args.config, environ=environ).pid_file


def run(args: argparse.Namespace) -> int:
    from stratalog.server.pid_file import PidFileError, signal_server
    from stratalog.server.settings import SettingsError

    try:
        path = _pid_file_path(args)
    except SettingsError as exc:
        print(f"stratalog reload: {exc}", file=sys.stderr)
        return 2
    if not path:
        print("stratalog reload: no pid file to find the server by: give --pid-file PATH (the"
              f" server's --pid-file), or set {_PID_FILE_ENV} or pid_file in the settings file",
              file=sys.stderr)
        return 2
    try:
        pid = signal_server(path, signal.SIGHUP)
    except PidFileError as exc:  # NoServerRunningError among them
        print(f"stratalog reload: {exc}", file=sys.stderr)
        return 1
    print(f"sent SIGHUP to the server (pid {pid}, pid file {path}): it reloads its TLS files,"
          " credential file and quotas, and logs the outcome")
    return 0
