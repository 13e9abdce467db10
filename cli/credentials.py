"""``stratalog credentials add|remove|list --file F``: the server's credential file.

The server checks passwords and tokens against this file (``authentication_credentials_file``;
reloaded on SIGHUP). It holds salted SCRAM hashes only: for each user a SCRAM-SHA-256 and a
SCRAM-SHA-512 credential, each with its own salt (Kafka's SASL/SCRAM of either mechanism; the
gRPC listener and SASL/PLAIN check passwords against the SHA-256 one), for a token a
SCRAM-SHA-256 one (format and cost: stratalog.server.security.credentials); this command writes
it atomically, mode 0600::

    stratalog credentials add --file creds.json --user alice            # password prompted
    stratalog credentials add --file creds.json --user alice --password-file pw.txt
    stratalog credentials add --file creds.json --user etl --token      # prints the token once
    stratalog credentials remove --file creds.json --user alice
    stratalog credentials remove --file creds.json --token 5f0c2a9be13d
    stratalog credentials list --file creds.json [--format json]

A password comes from ``--password-file`` (its first line), else from a prompt on a terminal
(asked twice), else from the first line of standard input; never from a flag, which ``ps``
shows. The file is created by the first ``add``. A user added before SCRAM-SHA-512 credentials
were stored has none (``list`` shows its mechanisms): ``add`` it again to store one. Exit
codes: 0 done, 1 nothing to remove or an unreadable file, 2 bad usage.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path

from stratalog.client.credentials import read_secret_file
from stratalog.server.security.credentials import (
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    PASSWORD_ITERATIONS_DEFAULT,
    SCRAM_SHA_512,
    TOKEN_ITERATIONS_DEFAULT,
    CredentialFile,
    check_user_name,
)
from stratalog.server.security.errors import SecurityConfigError
from stratalog.server.security.principal import Principal

from .connection import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, fail
from .output_format import add_format_argument, wants_json

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "credentials",
        help="add, remove and list users and tokens of a credential file",
        description="Edit the credential file the server checks passwords and tokens against"
                    " (salted SCRAM-SHA-256 and SCRAM-SHA-512 hashes, never the secrets). Send"
                    " the server SIGHUP to load the change.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a user (or set its password), or a new token")
    remove = actions.add_parser("remove", help="remove a user or a token")
    listing = actions.add_parser("list", help="list users and tokens (no secrets)")
    for sub in (add, remove, listing):
        sub.add_argument("--file", required=True, type=Path, metavar="PATH",
                         help="the credential file")
        sub.set_defaults(run=run)
    add.add_argument("--user", dest="entry_user", required=True, metavar="NAME",
                     help="the user (principal User:NAME); with --token, the token's user")
    add.add_argument("--token", action="store_true",
                     help="make a new random token for --user instead of setting a password;"
                          " the token is printed once, only its hash is kept")
    add.add_argument("--password-file", dest="entry_password_file", metavar="PATH",
                     help="file whose first line is the password (default: prompt or stdin)")
    add.add_argument("--iterations", type=int, default=None, metavar="N",
                     help=f"PBKDF2 iterations ({ITERATIONS_MIN}..{ITERATIONS_MAX}; default "
                          f"{PASSWORD_ITERATIONS_DEFAULT} for a password, "
                          f"{TOKEN_ITERATIONS_DEFAULT} for a token)")
    which = remove.add_mutually_exclusive_group(required=True)
    which.add_argument("--user", dest="entry_user", metavar="NAME", help="the user to remove")
    which.add_argument("--token", dest="token_id", metavar="ID", help="the token id to remove")
    add_format_argument(listing)


def _load(path: Path, *, create: bool) -> CredentialFile:
    if create and not path.exists():
        return CredentialFile()
    return CredentialFile.load(path)


def _read_password(args: argparse.Namespace) -> str:
    if args.entry_password_file is not None:
        return read_secret_file(args.entry_password_file, "password file")
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {args.entry_user}: ")
        if first != getpass.getpass("again: "):
            raise ValueError("the two passwords differ")
        return first
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise ValueError("no password: give --password-file, or a line on standard input")
    return line


def run(args: argparse.Namespace) -> int:
    command = f"credentials {args.action}"
    try:
        if args.action == "list":
            return _list(args)
        if args.action == "add":
            return _add(args)
        return _remove(args)
    except SecurityConfigError as exc:
        return fail(command, str(exc), EXIT_REFUSED)
    except (ValueError, OSError) as exc:
        return fail(command, str(exc), EXIT_USAGE)


def _add(args: argparse.Namespace) -> int:
    check_user_name(args.entry_user)
    store = _load(args.file, create=True)
    if args.token:
        if args.entry_password_file is not None:
            raise ValueError("--token makes a random token: --password-file does not apply")
        iterations = args.iterations or TOKEN_ITERATIONS_DEFAULT
        store, token = store.with_new_token(Principal.user(args.entry_user), iterations)
        store.save(args.file)
        # The only time the token exists outside the client that keeps it.
        print(token)
        print(f"token {token.partition('.')[0]} for User:{args.entry_user} added to {args.file};"
              " keep it now, it is not stored", file=sys.stderr)
        return EXIT_OK
    iterations = args.iterations or PASSWORD_ITERATIONS_DEFAULT
    existed = args.entry_user in store.users
    store = store.with_user(args.entry_user, _read_password(args), iterations)
    store.save(args.file)
    print(f"{'password of' if existed else 'user'} {args.entry_user} "
          f"{'changed' if existed else 'added'} in {args.file}", file=sys.stderr)
    return EXIT_OK


def _remove(args: argparse.Namespace) -> int:
    store = _load(args.file, create=False)
    try:
        if args.entry_user is not None:
            store = store.without_user(args.entry_user)
            what = f"user {args.entry_user}"
        else:
            store = store.without_token(args.token_id)
            what = f"token {args.token_id}"
    except KeyError:
        kind = "user" if args.entry_user is not None else "token"
        name = args.entry_user if args.entry_user is not None else args.token_id
        return fail(f"credentials {args.action}", f"no {kind} {name!r} in {args.file}",
                    EXIT_REFUSED)
    store.save(args.file)
    print(f"{what} removed from {args.file}", file=sys.stderr)
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    store = _load(args.file, create=False)
    users = [{"user": name, "principal": f"User:{name}", "iterations": secret.iterations,
              "mechanisms": [secret.mechanism.name] + (
                  [SCRAM_SHA_512.name] if name in store.users_sha512 else [])}
             for name, secret in sorted(store.users.items())]
    tokens = [{"token_id": token_id, "principal": str(entry.principal),
               "iterations": entry.secret.iterations}
              for token_id, entry in sorted(store.tokens.items())]
    if wants_json(args):
        print(json.dumps({"users": users, "tokens": tokens}, indent=2))
        return EXIT_OK
    for user in users:
        print(f"user\t{user['user']}\t{user['principal']}\titerations={user['iterations']}"
              f"\tmechanisms={','.join(user['mechanisms'])}")
    for token in tokens:
        print(f"token\t{token['token_id']}\t{token['principal']}\t"
              f"iterations={token['iterations']}")
    return EXIT_OK
