"""Authentication: who is calling, decided once per call in a gRPC server interceptor.

A call proves who it is in one of three ways, tried in this order:

1. **Credentials in the call's metadata** (gRPC call credentials), checked against the
   credential file (credentials.py)::

       authorization: Basic base64(<user>:<password>)   -> User:<user>,  authenticated_by "password"
       authorization: Bearer <token id>.<secret>        -> the token's principal,          "token"

   Wrong credentials, an unknown scheme, or credentials sent to a server without a credential
   file are refused: UNAUTHENTICATED + AUTHENTICATION_FAILED, whatever the method.
2. **A client certificate** verified by the TLS handshake (``tls_client_auth = "required"``):
   ``User:<subject>``, authenticated_by "tls" (tls.py).
3. **Nothing**: ``User:ANONYMOUS``, authenticated_by "none", if anonymous access is allowed;
   refused otherwise. ``authentication_anonymous = "auto"`` allows it exactly when no
   authentication is configured (no credential file, no client certificates required).

Open methods: ``grpc.health.v1.Health`` is never checked (load balancers and orchestrators
probe it without credentials); server reflection is checked unless ``reflection_open``;
``WhoAmI`` answers a caller without credentials as ``User:ANONYMOUS`` even when anonymous
access is refused, so a client can see why it is refused (wrong credentials are refused there
too).

The outcome is published in :data:`~stratalog.server.security.principal.current_identity`
while the method's handler runs (see :func:`stratalog.server.rpc.handlers.wrap_handler`), where the
authorizer, the quotas and ``WhoAmI`` read it. Metadata is checked in the gRPC front end's
interceptor (:class:`stratalog.server.rpc.authentication.AuthenticationInterceptor`, over
:meth:`Authenticator.lookup` and :meth:`Authenticator.verify`),
before the request is even deserialized: a refused call costs no parsing of its body. The
certificate and the client's address are known only to the handler's ``ServicerContext``, so
the rest happens in the wrapped handler, before the servicer's method.

Cost: a password check is one PBKDF2 of the file's largest iteration count (100,000 by
default: tens of milliseconds; every check of a file costs the same, credentials.py), far too
slow per call. Checks run on a thread pool of their own (``authentication_threads``), never on
the event loop nor the storage pool, and a good result is cached under a keyed hash of the
presented secret (HMAC-SHA-256 with a key drawn at start, never written anywhere): the next call
with the same credentials costs one HMAC (~2 µs) and a dictionary lookup. The cache holds at most
``authentication_cache_entries_max`` entries (least recently used dropped first) and is emptied
when the credential file is reloaded, so a removed user or a changed password takes effect on
SIGHUP. Failures are not cached (a flood of wrong passwords cannot evict good entries);
concurrent checks of the same new credentials share one PBKDF2. docs/performance.md has the
figures.

Under attack (:class:`_CheckQueue`): a flood of wrong passwords must not lock everyone else out
for the minutes its PBKDF2s take on one thread. So

1. the checks waiting or running are at most ``authentication_queue_max``; one more is refused
   at once (RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED, retriable, with ``retry_after_ms``);
2. each client host has at most ``authentication_failures_per_host_max`` checks waiting,
   running or failed within the last ``authentication_failure_window_ms``: past that its next
   new credentials are refused the same way, without a check, until its failures age out
   (credentials already in the cache still pass: a host's good clients keep working);
3. the pool takes the hosts' checks in turn (round robin), so a host with a queue of checks
   delays another host's check by at most one check per thread, not by its whole queue;
4. a check whose every caller went away (cancelled, past its deadline) before it started is
   dropped, not computed.

Kafka delays the answer to a failed authentication (``connection.failed.authentication.delay.ms``)
and limits connection rates per IP (KIP-612); gRPC shows a server no connections, so the limits
here are per check and per host. The host is the call's peer address, known only in the call's
handler: an uncached credential is checked there, with the request's body kept as bytes and
parsed only once the check passed (a refused call costs no parsing of its body).

Concurrency: event-loop only, except the checks, which run in the pool on an immutable
:class:`~stratalog.server.security.credentials.CredentialFile`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from stratalog.server.client_text import loggable

from .credentials import SCRAM_MECHANISMS, CredentialFile
from .errors import AuthenticationFailedError, AuthenticationThrottledError
from .principal import CallIdentity, Principal

__all__ = [
    "ANONYMOUS_MODES",
    "WHO_AM_I",
    "Authenticator",
    "PendingCheck",
    "VerifiedCredential",
    "peer_host",
]

logger = logging.getLogger(__name__)

#: Values of ``authentication_anonymous``.
ANONYMOUS_MODES = ("auto", "allowed", "refused")

_AUTHORIZATION = "authorization"
#: The method that answers a caller without credentials even when anonymous access is refused.
WHO_AM_I = "/stratalog.v1.Broker/WhoAmI"

_MALFORMED = "malformed_credentials"
#: The settings :class:`_CheckQueue` enforces.
QUEUE_LIMIT = "authentication_queue_max"
HOST_LIMIT = "authentication_failures_per_host_max"
# Hosts whose recent failures are remembered at most (the least recently failed forgotten
# first): a bound on what many hosts failing once each can make the server hold.
_FAILURE_HOSTS_MAX = 10_000
# One message for every wrong credential: it must not tell a client which user names exist.
_WRONG = "authentication failed: unknown user or token, or wrong password"


@dataclass(frozen=True, slots=True)
class VerifiedCredential:
    principal: Principal
    authenticated_by: str
    #: (mechanism: "password", "token" or a SCRAM mechanism's name; user or token id; the
    #: file's entry it was verified against).
    credential: tuple[str, str, object] | None = None


def peer_host(peer: str | None) -> str:
    """The client's address from ``ServicerContext.peer()``: ``"ipv4:10.0.0.5:41234"`` ->
    ``"10.0.0.5"``, ``"ipv6:[::1]:41234"`` -> ``"::1"``; anything else as it is."""
    if not peer:
        return ""
    kind, _, address = peer.partition(":")
    if kind == "ipv4":
        return address.rpartition(":")[0]
    if kind == "ipv6":
        host = address.rpartition(":")[0]
        return host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return peer


def _parse_authorization(value: str) -> tuple[str, str, str]:
    """``(mechanism, name, secret)`` from an ``authorization`` value; ``name`` is the user
    for Basic, empty for Bearer.

    Raises:
        AuthenticationFailedError: not ``Basic`` nor ``Bearer``, or not well formed.
    """
    scheme, _, credential = value.strip().partition(" ")
    credential = credential.strip()
    scheme = scheme.lower()
    if scheme == "bearer" and credential:
        return "token", "", credential
    if scheme == "basic" and credential:
        try:
            decoded = base64.b64decode(credential, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise AuthenticationFailedError(
                "authentication failed: Basic credentials are not base64 of UTF-8 user:password",
                failure=_MALFORMED,
            ) from None
        user, sep, password = decoded.partition(":")
        if not sep or not user:
            raise AuthenticationFailedError(
                "authentication failed: Basic credentials are not user:password",
                failure=_MALFORMED,
            )
        return "password", user, password
    raise AuthenticationFailedError(
        "authentication failed: the authorization metadata must be 'Basic <base64 user:password>'"
        " or 'Bearer <token>'",
        failure=_MALFORMED,
    )


@dataclass(slots=True)
class PendingCheck:
    """Credentials not in the cache: what to check, and under which cache key."""

    key: bytes
    mechanism: str
    name: str
    secret: str
    credentials: CredentialFile


def _credential_entry(pending: PendingCheck) -> tuple[str, str, object] | None:
    """The entry of ``pending``'s file that its credentials were verified against."""
    credentials = pending.credentials
    if pending.mechanism == "password":
        return ("password", pending.name, credentials.users.get(pending.name))
    token_id = pending.secret.partition(".")[0]
    return ("token", token_id, credentials.tokens.get(token_id))


class _Check:
    """One check, queued or running: its inputs, the host that asked first, the callers
    waiting for it and the future they wait on (its result: the verified principal, or None
    for wrong credentials). Event-loop only."""

    __slots__ = ("future", "generation", "host", "pending", "started", "waiters")

    def __init__(self, pending: PendingCheck, host: str, generation: int,
                 future: asyncio.Future[VerifiedCredential | None]) -> None:
        self.pending = pending
        self.host = host
        self.generation = generation
        self.future = future
        self.waiters = 0
        self.started = False


class _CheckQueue:
    """The checks waiting for the pool, by host, taken in turn; the checks running; each
    host's recent failures (the module docstring's "Under attack").

    Invariants (:meth:`check`): ``_pending`` counts the checks queued or running, at most
    ``queue_max``, and ``_pending_by_host`` splits it by host with no entry at 0; every
    queued check is in its host's deque, and every host in ``_turns`` has a non-empty deque;
    a host's failure times are within the window and at most ``failures_max``.

    Concurrency: event-loop only; the checks run in ``executor``.
    """

    def __init__(self, executor: Executor, threads: int, queue_max: int, failures_max: int,
                 failure_window_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        assert threads >= 1 and queue_max >= 1 and failures_max >= 1 and failure_window_ms >= 1
        self._executor = executor
        self._threads = threads
        self.queue_max = queue_max
        self.failures_max = failures_max
        self._window_s = failure_window_ms / 1000
        self._clock = clock
        self._turns: OrderedDict[str, deque[_Check]] = OrderedDict()  # hosts, in turn order
        self._pending = 0
        self._pending_by_host: dict[str, int] = {}
        self._running = 0
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self.dropped = 0  # checks dropped unstarted: every caller went away

    @property
    def pending(self) -> int:
        return self._pending

    def admit(self, host: str) -> None:
        """Whether a new check for ``host`` may be queued.

        Raises:
            AuthenticationThrottledError: the queue is full, or ``host`` has its limit of
                checks waiting, running or failed in the window.
        """
        if self._pending >= self.queue_max:
            raise AuthenticationThrottledError(
                f"authentication busy: {self._pending} credential checks are waiting or"
                f" running, the limit ({QUEUE_LIMIT}={self.queue_max}); retry shortly",
                limit=QUEUE_LIMIT, retry_after_ms=1000,
            )
        failures = self._recent_failures(host)
        used = len(failures) + self._pending_by_host.get(host, 0)
        if used >= self.failures_max:
            retry_after_s = (failures[0] + self._window_s - self._clock()) if failures else 1.0
            raise AuthenticationThrottledError(
                f"authentication refused for now: this host has {len(failures)} failed and"
                f" {used - len(failures)} pending credential checks, the limit ({HOST_LIMIT}="
                f"{self.failures_max} per {round(self._window_s * 1000)} ms); retry later",
                limit=HOST_LIMIT, retry_after_ms=max(1, round(retry_after_s * 1000)),
            )

    def submit(self, check: _Check) -> None:
        """Queue ``check`` (after :meth:`admit`) and start what the pool can take."""
        self._pending += 1
        self._pending_by_host[check.host] = self._pending_by_host.get(check.host, 0) + 1
        queue = self._turns.get(check.host)
        if queue is None:
            queue = self._turns[check.host] = deque()
        queue.append(check)
        self._pump()

    def drop(self, check: _Check) -> None:
        """``check``'s callers all went away: if it has not started, it never will."""
        if check.started or check.future.done():
            return
        check.future.cancel()
        self.dropped += 1
        self._finished(check)
        self._pump()

    def _pump(self) -> None:
        while self._running < self._threads and self._turns:
            host, queue = self._turns.popitem(last=False)
            check = queue.popleft()
            if queue:
                self._turns[host] = queue  # its next check waits for the other hosts' turns
            if check.future.done():
                continue  # dropped while queued: counted out already
            pending = check.pending
            verify = (pending.credentials.verify_password if pending.mechanism == "password"
                      else pending.credentials.verify_token)
            args = (pending.name, pending.secret) if pending.mechanism == "password" else (
                pending.secret,)
            try:
                work = asyncio.get_running_loop().run_in_executor(self._executor, verify, *args)
            except RuntimeError as exc:  # the pool is shut down: the server is stopping
                self._finished(check)
                check.future.set_exception(exc)
                continue
            check.started = True
            self._running += 1
            work.add_done_callback(lambda done, check=check: self._ran(check, done))

    def _ran(self, check: _Check, work: asyncio.Future[Principal | None]) -> None:
        self._running -= 1
        self._finished(check)
        pending = check.pending
        if work.cancelled():
            check.future.cancel()
        elif work.exception() is not None:
            check.future.set_exception(work.exception())  # type: ignore[arg-type]
        else:
            principal = work.result()
            if principal is None:
                # Logged once per check (callers sharing it are not), at most
                # failures_per_host_max a window per host.
                logger.info("authentication failed from %s: %s %s", loggable(check.host),
                            pending.mechanism, loggable(pending.name or "(token)"))
                self.fail(check.host)
                check.future.set_result(None)
            else:
                check.future.set_result(VerifiedCredential(principal, pending.mechanism,
                                                  _credential_entry(pending)))
        self._pump()

    def _finished(self, check: _Check) -> None:
        self._pending -= 1
        remaining = self._pending_by_host[check.host] - 1
        if remaining:
            self._pending_by_host[check.host] = remaining
        else:
            del self._pending_by_host[check.host]

    def fail(self, host: str) -> None:
        """Count one failure of ``host`` (a wrong credential)."""
        failures = self._recent_failures(host)
        failures.append(self._clock())
        while len(failures) > self.failures_max:
            failures.popleft()
        self._failures[host] = failures
        self._failures.move_to_end(host)
        while len(self._failures) > _FAILURE_HOSTS_MAX:
            self._failures.popitem(last=False)

    def _recent_failures(self, host: str) -> deque[float]:
        failures = self._failures.get(host)
        if failures is None:
            return deque()
        horizon = self._clock() - self._window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[host]
        return failures

    def check(self) -> None:
        """Assert the invariants (for tests)."""
        assert 0 <= self._pending <= self.queue_max, self._pending
        assert sum(self._pending_by_host.values()) == self._pending
        assert all(count > 0 for count in self._pending_by_host.values())
        assert all(queue for queue in self._turns.values())
        assert all(len(f) <= self.failures_max for f in self._failures.values())


class Authenticator:
    """Checks presented credentials against the credential file, with the cache and the
    check queue described in the module docstring.

    Holds the current :class:`CredentialFile` (None: no passwords or tokens accepted), the
    anonymous policy, the cache, the checks in flight by cache key and the
    :class:`_CheckQueue`. Event-loop only (checks run in ``executor``).
    """

    def __init__(
        self,
        credentials: CredentialFile | None,
        *,
        anonymous_allowed: bool,
        executor: Executor,
        cache_entries_max: int,
        threads: int = 1,
        queue_max: int = 64,
        failures_per_host_max: int = 20,
        failure_window_ms: int = 60_000,
    ) -> None:
        assert cache_entries_max >= 0
        self.anonymous_allowed = anonymous_allowed
        self._credentials = credentials
        self._cache_entries_max = cache_entries_max
        self._cache: OrderedDict[bytes, VerifiedCredential] = OrderedDict()
        self._checking: dict[bytes, _Check] = {}
        self.queue = _CheckQueue(executor, threads, queue_max, failures_per_host_max,
                                 failure_window_ms)
        # Drawn per process: a cache key says nothing about the secret outside this process.
        self._cache_key = secrets.token_bytes(32)
        self._generation = 0

    @property
    def cached_entries(self) -> int:
        return len(self._cache)

    @property
    def credentials(self) -> CredentialFile | None:
        """The credential file in force (None: no passwords or tokens accepted)."""
        return self._credentials

    def still_valid(self, identity: CallIdentity) -> bool:
        """Whether the credentials ``identity`` was verified with are still in the file in
        force, unchanged: False once its user or token was removed, or its password
        replaced, by a reload. True for identities not from the file (anonymous, mTLS).
        O(1)."""
        if identity.credential is None:
            return True
        credentials = self._credentials
        if credentials is None:
            return False
        mechanism, name, entry = identity.credential
        current: object
        if mechanism == "token":
            current = credentials.tokens.get(name)
        elif mechanism in SCRAM_MECHANISMS:  # a SCRAM exchange's credential (Kafka's SASL)
            current = credentials.scram_secret(name, SCRAM_MECHANISMS[mechanism])
        else:  # "password": the user's password credential
            current = credentials.users.get(name)
        return current is not None and current == entry

    def replace_credentials(self, credentials: CredentialFile | None) -> None:
        """Use ``credentials`` from now on (a SIGHUP reload); forget every cached check."""
        self._credentials = credentials
        self._cache.clear()
        self._checking.clear()
        self._generation += 1

    async def authenticate(
        self, metadata: Sequence[tuple[str, Any]] | None, host: str = ""
    ) -> VerifiedCredential | None:
        """The principal of the call's credentials; None if it carries none.

        Raises:
            AuthenticationFailedError: wrong, malformed or unexpected credentials.
            AuthenticationThrottledError: the check queue is full, or ``host`` has too many
                recent failures (retriable).
        """
        found = self.lookup(metadata)
        if found is None or isinstance(found, VerifiedCredential):
            return found
        return await self.verify(found, host)

    def lookup(self, metadata: Sequence[tuple[str, Any]] | None) -> VerifiedCredential | PendingCheck | None:
        """Without waiting: None if the call carries no credentials, the principal if its
        credentials are cached, else what :meth:`verify` must check.

        Raises:
            AuthenticationFailedError: malformed credentials, or credentials sent to a server
                without a credential file.
        """
        value = None
        for key, item in metadata or ():
            if key == _AUTHORIZATION:
                if value is not None:
                    raise AuthenticationFailedError(
                        "authentication failed: more than one authorization metadata entry",
                        failure=_MALFORMED,
                    )
                value = item
        if value is None:
            return None
        if not isinstance(value, str):
            raise AuthenticationFailedError("authentication failed: authorization is not text",
                                            failure=_MALFORMED)
        mechanism, name, secret = _parse_authorization(value)
        return self._lookup(mechanism, name, secret)

    def _lookup(self, mechanism: str, name: str, secret: str) -> VerifiedCredential | PendingCheck:
        credentials = self._credentials
        if credentials is None:
            raise AuthenticationFailedError(
                "authentication failed: this server accepts no passwords or tokens"
                " (it has no credential file); connect without credentials",
                failure="credentials_not_accepted",
            )
        # hmac.new, not the one-shot hmac.digest: that one releases the GIL on every call, and
        # with pool threads waiting for it the loop then waits up to gil_switch_interval_us
        # to get it back (~130 µs a call measured with three busy threads, against ~1 µs).
        key = hmac.new(self._cache_key, f"{mechanism}\0{name}\0{secret}".encode(),
                       hashlib.sha256).digest()
        verified = self._cache.get(key)
        if verified is not None:
            self._cache.move_to_end(key)
            return verified
        return PendingCheck(key, mechanism, name, secret, credentials)

    async def check_password(self, user: str, password: str, host: str) -> VerifiedCredential:
        """``User:<user>`` if ``password`` is the user's: from the cache, else checked in the
        pool through the check queue, as a gRPC call's Basic credentials are (the Kafka
        listener's SASL/PLAIN).

        Raises:
            AuthenticationFailedError: wrong credentials, or no credential file.
            AuthenticationThrottledError: see :meth:`authenticate`.
        """
        found = self._lookup("password", user, password)
        if isinstance(found, VerifiedCredential):
            return found
        return await self.verify(found, host)

    def admit_exchange(self, host: str) -> None:
        """Whether ``host`` may begin a challenge-response exchange (SCRAM, which checks no
        password here: the client hashes it): refused past the host's recent failures, as a
        new credential check would be.

        Raises:
            AuthenticationThrottledError: ``host`` has its limit of recent failures.
        """
        self.queue.admit(host)

    def exchange_failed(self, host: str, mechanism: str, name: str) -> AuthenticationFailedError:
        """Count a failed challenge-response exchange of ``host`` against its failures (the
        same limit as failed password checks), log it, and return the error to answer: the
        same words whatever was wrong, naming no user."""
        logger.info("authentication failed from %s: %s %s", loggable(host), mechanism,
                    loggable(name or "(no user)"))
        self.queue.fail(host)
        return AuthenticationFailedError(_WRONG, failure="wrong_credentials")

    def derived_secret(self, purpose: bytes, data: bytes) -> bytes:
        """HMAC-SHA-256 of ``data`` under this process's random key, for ``purpose``: stable
        for the process's life, unpredictable outside it (a SCRAM decoy's salt for a user the
        file does not hold, the same at every attempt, as RFC 5802 section 9 advises)."""
        return hmac.new(self._cache_key, purpose + b"\0" + data, hashlib.sha256).digest()

    async def verify(self, pending: PendingCheck, host: str) -> VerifiedCredential:
        """Check ``pending`` for a call from ``host`` (sharing a check of the same
        credentials under way), and cache the principal if they are right.

        Raises:
            AuthenticationFailedError: wrong credentials.
            AuthenticationThrottledError: see :meth:`authenticate`.
        """
        check = self._checking.get(pending.key)
        if check is None:
            self.queue.admit(host)
            future: asyncio.Future[VerifiedCredential | None] = (
                asyncio.get_running_loop().create_future())
            check = _Check(pending, host, self._generation, future)
            self._checking[pending.key] = check
            future.add_done_callback(lambda done, check=check: self._checked(check))
            self.queue.submit(check)
        check.waiters += 1
        try:
            # Shielded: a caller that goes away does not cancel the check that other callers
            # with the same credentials wait for; the last one to go drops it.
            verified = await asyncio.shield(check.future)
        except asyncio.CancelledError:
            check.waiters -= 1
            if not check.waiters:
                self.queue.drop(check)
            raise
        check.waiters -= 1
        if verified is None:
            raise AuthenticationFailedError(_WRONG, failure="wrong_credentials")
        return verified

    def _checked(self, check: _Check) -> None:
        key = check.pending.key
        if self._checking.get(key) is check:
            del self._checking[key]
        future = check.future
        if future.cancelled() or future.exception() is not None:
            return
        verified = future.result()
        # A check that began before a reload used the old file: not remembered.
        if (verified is None or check.generation != self._generation
                or self._cache_entries_max == 0):
            return
        self._cache[key] = verified
        while len(self._cache) > self._cache_entries_max:
            self._cache.popitem(last=False)
