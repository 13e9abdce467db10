"""SCRAM-SHA-256 and SCRAM-SHA-512's server side (RFC 5802, RFC 7677): a challenge-response
exchange checked against the credential file's stored keys, never a password.

The exchange, as Kafka's ``ScramSaslServer``
(clients/src/main/java/org/apache/kafka/common/security/scram/internals/ScramSaslServer.java)
runs it; each message is UTF-8 text of ``key=value`` attributes separated by commas::

    client-first   n,,n=<user>,r=<client nonce>[,<extension>=<value>...]
                   (gs2 header "n,," or "y,,": no channel binding; "a=<authzid>," inside it
                   only if the authzid is the user itself, as Kafka allows)
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<the same nonce>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>

    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientSignature = HMAC(StoredKey, AuthMessage)
    ClientKey       = ClientProof XOR ClientSignature
    accepted iff    H(ClientKey) == StoredKey           (constant-time compare)
    ServerSignature = HMAC(ServerKey, AuthMessage)

HMAC and H are the mechanism's hash: SHA-256 or SHA-512.

The salt, iteration count, StoredKey and ServerKey are the user's credential for the mechanism
in the credential file (credentials.py: the same secret as Kafka's SCRAM credentials): the password never crosses the
network, and checking the proof costs two HMACs and a hash, so it runs on the event loop. The
client spends the PBKDF2.

A user the file does not hold gets a server-first message all the same, with a salt derived
from the user name under the process's secret key (the same at every attempt) and the file's
password iteration count; its exchange fails at the proof, with the same message as a wrong
password: an exchange never tells whether a user exists (RFC 5802 section 9). A user the file
holds without a credential for the mechanism (a SCRAM-SHA-512 exchange for a user whose entry
predates SHA-512 credentials) is challenged with a decoy too, and fails the same way;
:attr:`ScramServerExchange.lacks_credential` says so, for the server's log (Kafka fails it at
the client-first message, "Authentication failed: Invalid user credentials", which tells the
client the user exists).

Delegation tokens (Kafka's ``tokenauth=true`` extension) are not served: the file's tokens are
for gRPC's Bearer credentials.

Errors: :class:`ScramError` for a message that breaks the protocol (its text says what, never
whether the user exists); a wrong proof is :attr:`ScramServerExchange.failed`, not an exception,
so that the caller counts it against the client's host.

Concurrency: an exchange belongs to one connection; not thread-safe; no I/O.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable

from .credentials import (
    MECHANISM,
    SCRAM_SHA_256,
    USER_NAME_CHARS_MAX,
    CredentialFile,
    ScramMechanism,
    ScramSecret,
    check_user_name,
)
from .principal import Principal

__all__ = ["MECHANISM", "ScramError", "ScramServerExchange"]

_NONCE_BYTES = 24
#: Longest SCRAM message read, in bytes: a user name (256 characters), a nonce and a proof fit
#: many times over.
MESSAGE_BYTES_MAX = 4096


def _random_nonce() -> str:
    return base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()


class ScramError(ValueError):
    """A SCRAM message that breaks the protocol (RFC 5802's ``e=invalid-encoding`` and kin)."""


class _Step(enum.Enum):
    CLIENT_FIRST = "client-first"
    CLIENT_FINAL = "client-final"
    DONE = "done"


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    pairs = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ScramError(f"SCRAM {what} message: {part[:40]!r} is not an attribute=value")
        pairs.append((key, value))
    return pairs


def _sasl_name(value: str) -> str:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "="; any other "=" is an error."""
    if "=" in value.replace("=2C", "").replace("=3D", ""):
        raise ScramError("SCRAM client-first message: the user name has a bad '=' escape")
    return value.replace("=2C", ",").replace("=3D", "=")


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"SCRAM client-final message: {what} is not base64") from None


class ScramServerExchange:
    """One SCRAM exchange of ``mechanism``, server side (module docstring).

    :meth:`step` takes each client message and returns the server's answer; after the
    client-final message, :attr:`principal` is the user's principal if the proof was right,
    else :attr:`failed` is True. Holds the messages so far, the nonce and the user's entry
    (or a decoy's). Event-loop only; one per connection.
    """

    def __init__(self, credentials: CredentialFile,
                 derived_secret: Callable[[bytes, bytes], bytes],
                 server_nonce: Callable[[], str] | None = None,
                 mechanism: ScramMechanism = SCRAM_SHA_256) -> None:
        """``derived_secret(purpose, data)``: a keyed hash stable for the process
        (Authenticator.derived_secret), for decoy salts and keys; ``server_nonce``: the
        server's part of the nonce (random printable ASCII unless given: RFC 7677's example
        exchange gives its own)."""
        self._credentials = credentials
        self.mechanism = mechanism
        self._server_nonce = server_nonce or _random_nonce
        self._derived_secret = derived_secret
        self._step = _Step.CLIENT_FIRST
        self.user = ""
        self.principal: Principal | None = None
        self.failed = False
        #: The credential file's entry the exchange was checked against (None: a decoy).
        self.entry: ScramSecret | None = None
        #: The file holds the user, but no credential of this mechanism for it.
        self.lacks_credential = False
        self._secret: ScramSecret | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def done(self) -> bool:
        return self._step is _Step.DONE

    def step(self, message: bytes) -> bytes:
        """The server's answer to the client's next message.

        Raises:
            ScramError: the message breaks the protocol, or comes after the exchange ended.
        """
        if len(message) > MESSAGE_BYTES_MAX:
            raise ScramError(f"SCRAM message of {len(message)} bytes; at most "
                             f"{MESSAGE_BYTES_MAX}")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if self._step is _Step.CLIENT_FIRST:
            return self._client_first(text)
        if self._step is _Step.CLIENT_FINAL:
            return self._client_final(text)
        raise ScramError("SCRAM exchange already ended")

    def _client_first(self, text: str) -> bytes:
        cbind, _, rest = text.partition(",")
        authzid, sep, bare = rest.partition(",")
        if not sep:
            raise ScramError("SCRAM client-first message: expected 'n,,n=<user>,r=<nonce>'")
        if cbind == "p" or cbind.startswith("p="):
            raise ScramError("SCRAM channel binding is not supported (send 'n,,')")
        if cbind not in ("n", "y"):
            raise ScramError(f"SCRAM client-first message: bad gs2 header {cbind[:10]!r}")
        pairs = _attributes(bare, "client-first")
        if len(pairs) < 2 or pairs[0][0] != "n" or pairs[1][0] != "r":
            raise ScramError("SCRAM client-first message: expected n=<user>,r=<nonce>")
        user = _sasl_name(pairs[0][1])
        nonce = pairs[1][1]
        if not nonce or any(not 0x21 <= ord(c) <= 0x7e or c == "," for c in nonce):
            raise ScramError("SCRAM client-first message: the nonce is not printable ASCII")
        for key, value in pairs[2:]:
            if key == "tokenauth" and value.lower() == "true":
                raise ScramError("SCRAM with delegation tokens (tokenauth) is not supported")
        if authzid and (not authzid.startswith("a=") or _sasl_name(authzid[2:]) != user):
            raise ScramError("SCRAM client-first message: an authorization id other"
                             " than the user itself is not supported")
        try:
            check_user_name(user)
        except ValueError:
            # Not the name itself: an answer to a failed exchange names no user.
            raise ScramError(f"SCRAM client-first message: a user name has 1 to"
                             f" {USER_NAME_CHARS_MAX} characters, no ':', spaces or control"
                             " characters") from None
        self.user = user
        self.entry = self._credentials.scram_secret(user, self.mechanism)
        self.lacks_credential = self.entry is None and user in self._credentials.users
        self._secret = self.entry if self.entry is not None else self._decoy(user)
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce = nonce + self._server_nonce()
        secret = self._secret
        self._server_first = (f"r={self._nonce},s={base64.b64encode(secret.salt).decode()},"
                              f"i={secret.iterations}")
        self._step = _Step.CLIENT_FINAL
        return self._server_first.encode()

    def _decoy(self, user: str) -> ScramSecret:
        """What a user the file does not hold is challenged with: a stable salt, the file's
        password iteration count, and keys no proof matches (module docstring)."""
        name = user.encode()
        size = self.mechanism.key_bytes
        return ScramSecret(
            self._credentials.password_iterations,
            self._derived_secret(b"scram-salt", name)[:16],
            self._decoy_key(b"scram-stored-key", name, size),
            self._decoy_key(b"scram-server-key", name, size),
            self.mechanism,
        )

    def _decoy_key(self, purpose: bytes, name: bytes, size: int) -> bytes:
        """``size`` bytes of the derived secret (32 at a time: a SHA-512 key takes two)."""
        parts = []
        for block in range(-(-size // 32)):
            tagged = purpose if block == 0 else purpose + b"-" + str(block).encode()
            parts.append(self._derived_secret(tagged, name))
        return b"".join(parts)[:size]

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_attribute = text.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message: no proof (p=)")
        pairs = _attributes(without_proof, "client-final")
        if len(pairs) < 2 or pairs[0][0] != "c" or pairs[1][0] != "r":
            raise ScramError("SCRAM client-final message: expected c=<binding>,r=<nonce>")
        binding = _b64decode(pairs[0][1], "the channel binding (c=)")
        if binding != self._gs2_header.encode():
            raise ScramError("SCRAM client-final message: the channel binding does not"
                             " repeat the client-first gs2 header")
        if not hmac.compare_digest(pairs[1][1].encode(), self._nonce.encode()):
            raise ScramError("SCRAM client-final message: the nonce is not the server's")
        proof = _b64decode(proof_attribute, "the proof (p=)")
        secret = self._secret
        assert secret is not None
        self._step = _Step.DONE
        if len(proof) != len(secret.stored_key):
            self.failed = True
            return b""
        auth_message = ",".join((self._client_first_bare, self._server_first,
                                 without_proof)).encode()
        hash_name = self.mechanism.hash_name
        signature = hmac.digest(secret.stored_key, auth_message, hash_name)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        matched = hmac.compare_digest(hashlib.new(hash_name, client_key).digest(),
                                      secret.stored_key)
        if self.entry is None or not matched:
            self.failed = True
            return b""
        self.principal = Principal.user(self.user)
        server_signature = hmac.digest(secret.server_key, auth_message, hash_name)
        return b"v=" + base64.b64encode(server_signature)
