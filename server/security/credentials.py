"""The credential file: users' passwords and API tokens as salted SCRAM secrets.

The server reads this file (``authentication_credentials_file``) at start and on SIGHUP;
``stratalog credentials add|remove|list --file F`` writes it. No password or token is ever
stored: each entry keeps what SCRAM (RFC 5802/7677) keeps and Kafka stores for a SCRAM user,
one credential per mechanism (Kafka's ``ScramCredential``, per ``ScramMechanism``:
clients/src/main/java/org/apache/kafka/common/security/scram/internals/ScramMechanism.java),
from which the password cannot be read back. With H = SHA-256 (SCRAM-SHA-256, 32-byte keys)
or SHA-512 (SCRAM-SHA-512, 64-byte keys)::

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)   never stored
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")        never stored
    StoredKey      = H(ClientKey)                                stored
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")        stored (a SCRAM exchange's
                                                                 server signature)

A user's SCRAM-SHA-256 credential is the one its password is checked against (a gRPC call's
Basic credentials, SASL/PLAIN); its SCRAM-SHA-512 credential (its own salt) serves
SCRAM-SHA-512 exchanges only. A file written before SHA-512 credentials were stored has
SHA-256 ones only: it keeps working, and such a user's SCRAM-SHA-512 exchanges fail (as Kafka's
for a user without a credential of that mechanism) until its password is set again.

A password arrives over TLS in the call's metadata (see authentication.py); checking it means
computing StoredKey again with the entry's salt and iteration count and comparing in constant
time (:func:`hmac.compare_digest`). The salt is 16 random bytes per entry, so equal passwords get
unequal entries and no table precomputed for one file serves another.

Format: UTF-8 JSON, one document, written by :meth:`CredentialFile.dumps`::

    {
      "format": "stratalog-credentials",
      "version": 1,
      "users": {
        "alice": {"mechanism": "SCRAM-SHA-256", "iterations": 100000,
                  "salt": "<base64>", "stored_key": "<base64>", "server_key": "<base64>",
                  "scram_sha_512": {"mechanism": "SCRAM-SHA-512", "iterations": 100000,
                                    "salt": "<base64>", "stored_key": "<base64 of 64 bytes>",
                                    "server_key": "<base64 of 64 bytes>"}}
      },
      "tokens": {
        "5f0c2a9be13d": {"principal": "User:etl", "mechanism": "SCRAM-SHA-256",
                         "iterations": 4096, "salt": "...", "stored_key": "...",
                         "server_key": "..."}
      }
    }

A user's top-level fields are its SCRAM-SHA-256 credential, as in the first files of this
format; ``scram_sha_512`` is optional (absent from files written before it existed). Still
version 1: a server that does not know ``scram_sha_512`` reads the file and ignores it.
Tokens have a SCRAM-SHA-256 credential only (they are gRPC's Bearer credentials).

A user ``alice`` authenticates as the principal ``User:alice``. A token is
``<id>.<secret>``: the id (12 hex digits) is the public key of its entry, so the server finds
the one entry to check without trying them all; the secret (32 random bytes, URL-safe base64)
is what the salted hash protects. A token's entry names the principal it stands for.

Iterations: 100,000 by default for passwords (people choose guessable ones; each guess of an
attacker who stole the file costs that many HMACs), 4,096 (Kafka's SCRAM minimum) for tokens,
whose 256 random bits no number of guesses finds. At most :data:`ITERATIONS_MAX`, so that a file
cannot make one check take minutes.

**Constant cost per check.** A check's time must not tell a client whether the user (or the
token id) exists, nor anything about its entry: every password check of one file costs the
same number of HMACs, the largest iteration count of the file's users (:attr:`CredentialFile.
password_iterations`), and every token check the largest of its tokens'. An entry with fewer
iterations is checked with its own count and then *padded*: a PBKDF2 of the difference is
computed and thrown away; an unknown user or token is checked against a decoy of the full
count. Work, not a sleep: the padding takes what the hashing would take on the same core under
the same load, where a sleep to a measured time would drift with the load. The price: every
check costs what the most expensive entry costs (a file whose entries all have the default
100,000 iterations pays nothing extra).

Crash behaviour: :meth:`CredentialFile.save` writes a temporary file in the same directory,
fsyncs it, renames it over the old one and fsyncs the directory: a reader sees the old file or
the new one, never a torn one, and the new one survives power loss once ``save`` returned.

Concurrency: :class:`CredentialFile` is immutable (every change returns a new one); checks are
blocking (PBKDF2) and run in a thread pool of the server's, never on the event loop.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SecurityConfigError
from .principal import Principal

__all__ = [
    "FILE_BYTES_MAX",
    "ITERATIONS_MAX",
    "ITERATIONS_MIN",
    "MECHANISM",
    "PASSWORD_BYTES_MAX",
    "PASSWORD_ITERATIONS_DEFAULT",
    "SCRAM_MECHANISMS",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "TOKEN_ITERATIONS_DEFAULT",
    "USER_NAME_CHARS_MAX",
    "CredentialFile",
    "ScramMechanism",
    "ScramSecret",
    "TokenEntry",
    "check_user_name",
]



@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM mechanism: its SASL name, the hash it is built on, that hash's size."""

    name: str
    hash_name: str
    key_bytes: int


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 32)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 64)
#: Mechanism by SASL name.
SCRAM_MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
#: The mechanism of a user's password credential and of tokens.
MECHANISM = SCRAM_SHA_256.name
_FORMAT = "stratalog-credentials"
_VERSION = 1

#: Kafka's minimum for SCRAM-SHA-256 and SCRAM-SHA-512 (``ScramMechanism.minIterations``).
ITERATIONS_MIN = 4096
#: A check costs this many HMACs at most (~4 s on one core today): a bound on what one entry
#: of the file can make the server spend per new credential.
ITERATIONS_MAX = 10_000_000
PASSWORD_ITERATIONS_DEFAULT = 100_000
TOKEN_ITERATIONS_DEFAULT = ITERATIONS_MIN
#: The file is read whole; anything larger is refused rather than read into memory.
FILE_BYTES_MAX = 16 * 1024 * 1024
#: Longest password (or token) checked, in UTF-8 bytes; longer ones fail without hashing.
PASSWORD_BYTES_MAX = 1024
USER_NAME_CHARS_MAX = 256

_SALT_BYTES = 16
#: The key of a user's SCRAM-SHA-512 credential in its entry.
_SHA_512_KEY = "scram_sha_512"
_TOKEN_ID_HEX_CHARS = 12
_TOKEN_SECRET_BYTES = 32


def check_user_name(name: str) -> str:
    """``name`` if it may be a user name: 1..256 printable characters, no ``:`` or whitespace
    (``user:password`` is how Basic credentials are sent, and a principal is ``User:<name>``).

    Raises:
        ValueError: naming what is wrong with it.
    """
    if not isinstance(name, str) or not 0 < len(name) <= USER_NAME_CHARS_MAX:
        raise ValueError(f"a user name has 1 to {USER_NAME_CHARS_MAX} characters, got {name!r}")
    if ":" in name or any(c.isspace() or not c.isprintable() for c in name):
        raise ValueError(f"a user name has no ':', spaces or control characters, got {name!r}")
    return name


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _salted_password(password: bytes, salt: bytes, iterations: int,
                     hash_name: str = "sha256") -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


@dataclass(frozen=True, slots=True)
class ScramSecret:
    """One SCRAM credential as stored: salt, iteration count, StoredKey, ServerKey, and the
    mechanism they were computed with (SCRAM-SHA-256 unless said).

    Invariant: keys of the mechanism's hash size, ``ITERATIONS_MIN <= iterations <=
    ITERATIONS_MAX``.
    """

    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    mechanism: ScramMechanism = SCRAM_SHA_256

    def __post_init__(self) -> None:
        assert ITERATIONS_MIN <= self.iterations <= ITERATIONS_MAX, self.iterations
        key_bytes = self.mechanism.key_bytes
        assert len(self.stored_key) == len(self.server_key) == key_bytes

    @classmethod
    def derive(cls, password: str, iterations: int, salt: bytes | None = None,
               mechanism: ScramMechanism = SCRAM_SHA_256) -> ScramSecret:
        """The stored form of ``password`` for ``mechanism`` with a new random salt (or
        ``salt``). Blocking.

        Raises:
            ValueError: ``iterations`` out of range, or an empty or too long password.
        """
        if not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX:
            raise ValueError(f"iterations must be in {ITERATIONS_MIN}..{ITERATIONS_MAX}, "
                             f"got {iterations}")
        encoded = password.encode()
        if not 0 < len(encoded) <= PASSWORD_BYTES_MAX:
            raise ValueError(f"a password has 1 to {PASSWORD_BYTES_MAX} bytes in UTF-8, "
                             f"got {len(encoded)}")
        salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
        hash_name = mechanism.hash_name
        salted = _salted_password(encoded, salt, iterations, hash_name)
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        server_key = hmac.digest(salted, b"Server Key", hash_name)
        return cls(iterations, salt, hashlib.new(hash_name, client_key).digest(), server_key,
                   mechanism)

    def verify(self, password: str) -> bool:
        """Whether ``password`` is the one this secret was derived from. Blocking: one PBKDF2
        of ``iterations`` rounds; the comparison takes the same time wherever the keys differ."""
        encoded = password.encode()
        if not 0 < len(encoded) <= PASSWORD_BYTES_MAX:
            return False
        hash_name = self.mechanism.hash_name
        salted = _salted_password(encoded, self.salt, self.iterations, hash_name)
        client_key = hmac.digest(salted, b"Client Key", hash_name)
        return hmac.compare_digest(hashlib.new(hash_name, client_key).digest(),
                                   self.stored_key)

    def to_json(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism.name,
            "iterations": self.iterations,
            "salt": _b64(self.salt),
            "stored_key": _b64(self.stored_key),
            "server_key": _b64(self.server_key),
        }

    @classmethod
    def from_json(cls, value: object, where: str,
                  mechanism: ScramMechanism = SCRAM_SHA_256) -> ScramSecret:
        """A ``mechanism`` credential from its JSON object. Raises ValueError naming
        ``where`` and the field at fault."""
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        if value.get("mechanism") != mechanism.name:
            raise ValueError(f"{where}: mechanism must be {mechanism.name!r}, "
                             f"got {value.get('mechanism')!r}")
        iterations = value.get("iterations")
        if (not isinstance(iterations, int) or isinstance(iterations, bool)
                or not ITERATIONS_MIN <= iterations <= ITERATIONS_MAX):
            raise ValueError(f"{where}: iterations must be an integer in "
                             f"{ITERATIONS_MIN}..{ITERATIONS_MAX}, got {iterations!r}")
        fields: dict[str, bytes] = {}
        for name, size in (("salt", None), ("stored_key", mechanism.key_bytes),
                           ("server_key", mechanism.key_bytes)):
            raw = value.get(name)
            try:
                decoded = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
            except binascii.Error:
                decoded = None
            if decoded is None or (size is not None and len(decoded) != size) or not decoded:
                expected = f"{size} bytes" if size else "bytes"
                raise ValueError(f"{where}: {name} must be base64 of {expected}")
            fields[name] = decoded
        return cls(iterations, fields["salt"], fields["stored_key"], fields["server_key"],
                   mechanism)


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """A token's entry: the principal it authenticates as and its secret's stored form."""

    principal: Principal
    secret: ScramSecret


# The salt of the decoy and padding computations: any fixed one does (their result is
# thrown away; only their cost matters).
_PAD_SALT = b"\0" * _SALT_BYTES


def _pad(iterations: int) -> None:
    """Spend ``iterations`` PBKDF2 rounds for nothing: what a check of that many costs."""
    if iterations > 0:
        _salted_password(b"padding", _PAD_SALT, iterations)


def _verify_padded(secret: ScramSecret | None, password: str, iterations: int) -> bool:
    """Whether ``password`` matches ``secret`` (False without one), at the cost of exactly
    ``iterations`` PBKDF2 rounds whatever ``secret`` holds (see the module docstring)."""
    if secret is None or not 0 < len(password.encode()) <= PASSWORD_BYTES_MAX:
        _pad(iterations)  # a password the secret would refuse without hashing costs as much
        return False
    matched = secret.verify(password)
    _pad(iterations - secret.iterations)
    return matched


@dataclass(frozen=True, slots=True)
class CredentialFile:
    """The contents of one credential file: users by name, tokens by id. Immutable.

    Build it with :meth:`load`, :meth:`parse` or ``CredentialFile()`` (empty); change it with
    the ``with_*``/``without_*`` methods, which return a new one. ``users`` holds each user's
    SCRAM-SHA-256 credential (its password's), ``users_sha512`` the SCRAM-SHA-512 credentials
    of the users that have one (invariant: a subset of ``users``' names).
    """

    users: Mapping[str, ScramSecret] = field(
        default_factory=lambda: types.MappingProxyType({}))
    tokens: Mapping[str, TokenEntry] = field(
        default_factory=lambda: types.MappingProxyType({}))
    users_sha512: Mapping[str, ScramSecret] = field(
        default_factory=lambda: types.MappingProxyType({}))
    #: What every password check of this file costs: the users' largest iteration count
    #: (the default for a file without users).
    password_iterations: int = field(init=False, compare=False)
    #: What every token check costs: the tokens' largest iteration count.
    token_iterations: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        assert self.users_sha512.keys() <= self.users.keys()
        object.__setattr__(self, "password_iterations", max(
            (secret.iterations for secret in self.users.values()),
            default=PASSWORD_ITERATIONS_DEFAULT))
        object.__setattr__(self, "token_iterations", max(
            (entry.secret.iterations for entry in self.tokens.values()),
            default=TOKEN_ITERATIONS_DEFAULT))

    # ------------------------------------------------------------------ reading and writing

    @classmethod
    def load(cls, path: str | Path) -> CredentialFile:
        """Read and check the file at ``path``.

        Raises:
            SecurityConfigError: unreadable, larger than FILE_BYTES_MAX, not the format above;
                the message names the path and the entry at fault.
        """
        path = Path(path)
        try:
            with path.open("rb") as handle:
                data = handle.read(FILE_BYTES_MAX + 1)
        except OSError as exc:
            raise SecurityConfigError(f"cannot read the credential file {path}: "
                                      f"{exc.strerror or exc}") from None
        if len(data) > FILE_BYTES_MAX:
            raise SecurityConfigError(f"credential file {path} is larger than "
                                      f"{FILE_BYTES_MAX} bytes")
        return cls.parse(data, str(path))

    @classmethod
    def parse(cls, data: bytes, source: str = "<credentials>") -> CredentialFile:
        """The file's contents from its bytes; ``source`` names it in errors.

        Raises:
            SecurityConfigError: see :meth:`load`.
        """
        try:
            document = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SecurityConfigError(f"credential file {source} is not UTF-8 JSON: "
                                      f"{exc}") from None
        try:
            return cls._from_document(document)
        except ValueError as exc:
            raise SecurityConfigError(f"credential file {source}: {exc}") from None

    @classmethod
    def _from_document(cls, document: object) -> CredentialFile:
        if not isinstance(document, dict) or document.get("format") != _FORMAT:
            raise ValueError(f"not a stratalog credential file (no \"format\": \"{_FORMAT}\")")
        if document.get("version") != _VERSION:
            raise ValueError(f"version {document.get('version')!r} is not supported "
                             f"(this server reads version {_VERSION})")
        users_doc = document.get("users", {})
        tokens_doc = document.get("tokens", {})
        if not isinstance(users_doc, dict) or not isinstance(tokens_doc, dict):
            raise ValueError("\"users\" and \"tokens\" must be objects")
        users = {}
        users_sha512 = {}
        for name, entry in users_doc.items():
            check_user_name(name)
            users[name] = ScramSecret.from_json(entry, f"user {name!r}")
            if _SHA_512_KEY in entry:
                users_sha512[name] = ScramSecret.from_json(
                    entry[_SHA_512_KEY], f"user {name!r} {_SHA_512_KEY}", SCRAM_SHA_512)
        tokens = {}
        for token_id, entry in tokens_doc.items():
            where = f"token {token_id!r}"
            if not _is_token_id(token_id):
                raise ValueError(f"{where}: an id is {_TOKEN_ID_HEX_CHARS} lower-case hex digits")
            if not isinstance(entry, dict) or not isinstance(entry.get("principal"), str):
                raise ValueError(f"{where}: needs a \"principal\" such as \"User:etl\"")
            principal = Principal.parse(entry["principal"])
            tokens[token_id] = TokenEntry(principal, ScramSecret.from_json(entry, where))
        return cls(types.MappingProxyType(users), types.MappingProxyType(tokens),
                   types.MappingProxyType(users_sha512))

    def dumps(self) -> bytes:
        """The file's bytes: sorted keys, so that a change shows as a small diff."""
        document = {
            "format": _FORMAT,
            "version": _VERSION,
            "users": {name: self._user_json(name) for name in sorted(self.users)},
            "tokens": {
                token_id: {"principal": str(entry.principal), **entry.secret.to_json()}
                for token_id, entry in sorted(self.tokens.items())
            },
        }
        return (json.dumps(document, indent=2) + "\n").encode()

    def _user_json(self, name: str) -> dict[str, object]:
        document = self.users[name].to_json()
        sha512 = self.users_sha512.get(name)
        if sha512 is not None:
            document[_SHA_512_KEY] = sha512.to_json()
        return document

    def scram_secret(self, user: str, mechanism: ScramMechanism) -> ScramSecret | None:
        """``user``'s credential for ``mechanism`` (None: no such user, or none for that
        mechanism). O(1)."""
        if mechanism is SCRAM_SHA_512:
            return self.users_sha512.get(user)
        return self.users.get(user)

    def save(self, path: str | Path) -> None:
        """Write atomically (tmp + fsync + rename + directory fsync), mode 0600: the hashes
        are not secrets an attacker can use directly, but they let one guess offline."""
        path = Path(path)
        directory = path.parent if str(path.parent) else Path(".")
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(self.dumps())
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp_name, 0o600)
            os.replace(tmp_name, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    # ------------------------------------------------------------------ changes

    def with_user(self, name: str, password: str,
                  iterations: int = PASSWORD_ITERATIONS_DEFAULT) -> CredentialFile:
        """A copy with user ``name`` set to ``password`` (added, or its password replaced):
        a SCRAM-SHA-256 and a SCRAM-SHA-512 credential, each with its own salt. Blocking (two
        PBKDF2s of ``iterations``)."""
        users = dict(self.users)
        users_sha512 = dict(self.users_sha512)
        users[check_user_name(name)] = ScramSecret.derive(password, iterations)
        users_sha512[name] = ScramSecret.derive(password, iterations,
                                                mechanism=SCRAM_SHA_512)
        return CredentialFile(types.MappingProxyType(users), self.tokens,
                              types.MappingProxyType(users_sha512))

    def without_user(self, name: str) -> CredentialFile:
        """A copy without user ``name``. Raises KeyError if there is none."""
        if name not in self.users:
            raise KeyError(name)
        users = {n: s for n, s in self.users.items() if n != name}
        users_sha512 = {n: s for n, s in self.users_sha512.items() if n != name}
        return CredentialFile(types.MappingProxyType(users), self.tokens,
                              types.MappingProxyType(users_sha512))

    def with_new_token(self, principal: Principal,
                       iterations: int = TOKEN_ITERATIONS_DEFAULT) -> tuple[CredentialFile, str]:
        """A copy with a new random token for ``principal``, and the token (shown once: only
        its hash is kept)."""
        while True:
            token_id = secrets.token_hex(_TOKEN_ID_HEX_CHARS // 2)
            if token_id not in self.tokens:
                break
        secret = secrets.token_urlsafe(_TOKEN_SECRET_BYTES)
        tokens = dict(self.tokens)
        tokens[token_id] = TokenEntry(principal, ScramSecret.derive(secret, iterations))
        return (CredentialFile(self.users, types.MappingProxyType(tokens), self.users_sha512),
                f"{token_id}.{secret}")

    def without_token(self, token_id: str) -> CredentialFile:
        """A copy without the token ``token_id``. Raises KeyError if there is none."""
        if token_id not in self.tokens:
            raise KeyError(token_id)
        tokens = {i: e for i, e in self.tokens.items() if i != token_id}
        return CredentialFile(self.users, types.MappingProxyType(tokens), self.users_sha512)

    # ------------------------------------------------------------------ checks (blocking)

    def verify_password(self, user: str, password: str) -> Principal | None:
        """``User:<user>`` if ``password`` is the user's, else None. Blocking: PBKDF2 rounds
        of :attr:`password_iterations` whatever ``user`` is, known or not (module docstring,
        "Constant cost per check")."""
        secret = self.users.get(user)
        matched = _verify_padded(secret, password, self.password_iterations)
        return Principal.user(user) if matched else None

    def verify_token(self, token: str) -> Principal | None:
        """The token's principal if ``token`` is one of the file's, else None. Blocking:
        PBKDF2 rounds of :attr:`token_iterations` whatever the token is."""
        token_id, sep, secret = token.partition(".")
        entry = self.tokens.get(token_id) if sep else None
        matched = _verify_padded(None if entry is None else entry.secret, secret,
                                 self.token_iterations)
        return entry.principal if matched and entry is not None else None


def _is_token_id(text: object) -> bool:
    return (isinstance(text, str) and len(text) == _TOKEN_ID_HEX_CHARS
            and all(c in "0123456789abcdef" for c in text))

