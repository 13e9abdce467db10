"""The Authenticator (its cache and shared checks), the metadata it reads, peer addresses and
the certificate principal; the settings that configure them."""

from __future__ import annotations

import asyncio
import base64
import ssl
from concurrent.futures import ThreadPoolExecutor

import pytest

from stratalog.server.security import authentication, tls
from stratalog.server.security.authentication import Authenticator, peer_host
from stratalog.server.security.credentials import ITERATIONS_MIN, CredentialFile
from stratalog.server.security.errors import (
    AuthenticationFailedError,
    AuthenticationThrottledError,
)
from stratalog.server.security.principal import CallIdentity, Principal
from stratalog.server.settings import Settings, SettingsError, load_settings


class CountingExecutor(ThreadPoolExecutor):
    """A thread pool that counts what it was given: one submission is one PBKDF2."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, *args, **kwargs):  # type: ignore[override]
        self.submitted += 1
        return super().submit(*args, **kwargs)


def basic(user: str, password: str) -> list[tuple[str, str]]:
    return [("authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())]


@pytest.fixture
def executor():
    pool = CountingExecutor()
    yield pool
    pool.shutdown()


def make(executor, cache_entries_max: int = 100, **users: str) -> Authenticator:
    store = CredentialFile()
    for name, password in users.items():
        store = store.with_user(name, password, ITERATIONS_MIN)
    return Authenticator(store, anonymous_allowed=False, executor=executor,
                         cache_entries_max=cache_entries_max)


async def test_a_verified_credential_is_cached(executor) -> None:
    authenticator = make(executor, alice="pw")
    first = await authenticator.authenticate(basic("alice", "pw"))
    assert first is not None and first.principal == Principal.user("alice")
    again = await authenticator.authenticate(basic("alice", "pw"))
    assert again == first and executor.submitted == 1
    with pytest.raises(AuthenticationFailedError, match="unknown user or token") as raised:
        await authenticator.authenticate(basic("alice", "wrong"))
    assert raised.value.failure == "wrong_credentials"
    with pytest.raises(AuthenticationFailedError):
        await authenticator.authenticate(basic("alice", "wrong"))
    assert executor.submitted == 3  # failures are checked every time, never cached
    assert authenticator.cached_entries == 1


async def test_concurrent_checks_of_one_credential_share_one_hash(executor) -> None:
    authenticator = make(executor, alice="pw")
    results = await asyncio.gather(
        *(authenticator.authenticate(basic("alice", "pw")) for _ in range(20)))
    assert {r.principal for r in results if r} == {Principal.user("alice")}
    assert executor.submitted == 1


async def test_the_cache_is_bounded_and_emptied_by_a_reload(executor) -> None:
    authenticator = make(executor, 2, a="1", b="2", c="3")
    for name, password in (("a", "1"), ("b", "2"), ("c", "3")):
        await authenticator.authenticate(basic(name, password))
    assert authenticator.cached_entries == 2
    await authenticator.authenticate(basic("a", "1"))  # evicted first: checked again
    assert executor.submitted == 4
    authenticator.replace_credentials(CredentialFile())
    assert authenticator.cached_entries == 0
    with pytest.raises(AuthenticationFailedError):
        await authenticator.authenticate(basic("b", "2"))


@pytest.mark.parametrize("metadata", [
    [("authorization", "Basic abc"), ("authorization", "Basic abc")],
    [("authorization", "Negotiate xyz")],
    [("authorization", "Bearer ")],
    [("authorization", b"Bearer bytes")],
])
async def test_malformed_metadata_is_refused(executor, metadata) -> None:
    with pytest.raises(AuthenticationFailedError) as raised:
        await make(executor, alice="pw").authenticate(metadata)
    assert raised.value.failure == "malformed_credentials"
    assert executor.submitted == 0


async def test_credentials_to_a_server_without_a_credential_file_are_not_accepted(
    executor,
) -> None:
    authenticator = Authenticator(None, anonymous_allowed=True, executor=executor,
                                  cache_entries_max=10)
    with pytest.raises(AuthenticationFailedError, match="accepts no passwords") as raised:
        await authenticator.authenticate(basic("alice", "pw"))
    assert raised.value.failure == "credentials_not_accepted"


async def test_no_metadata_is_no_credentials(executor) -> None:
    assert await make(executor).authenticate([("x-other", "1")]) is None
    assert await make(executor).authenticate(None) is None


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:10.0.0.5:41234", "10.0.0.5"),
    ("ipv6:[::1]:41234", "::1"),
    ("unix:/tmp/sock", "unix:/tmp/sock"),
    ("", ""),
])
def test_peer_host(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_certificate_principal() -> None:
    context = {"transport_security_type": [b"ssl"], "x509_subject": [b"CN=client-1,O=example"]}
    assert tls.certificate_principal(context) == Principal.user("CN=client-1,O=example")
    assert tls.certificate_principal({"transport_security_type": [b"ssl"]}) is None
    assert tls.certificate_principal({"x509_subject": [b"CN=x"]}) is None  # not TLS


def _handshake(server_context: ssl.SSLContext,
               client_context: ssl.SSLContext) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """An in-memory TLS handshake: its server's side and its client's."""
    server_in, server_out, client_in, client_out = (ssl.MemoryBIO() for _ in range(4))
    server = server_context.wrap_bio(server_in, server_out, server_side=True)
    client = client_context.wrap_bio(client_in, client_out, server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(10):  # TLS 1.3 takes two flights; a few more rounds to be sure
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return server, client
    raise AssertionError("the handshake did not finish")


def test_peer_certificate_principal_is_the_subject_as_grpc_writes_it(pki, tmp_path) -> None:
    import shutil

    cert, key = tmp_path / "server.crt", tmp_path / "server.key"
    shutil.copy(pki.server[0], cert)
    shutil.copy(pki.server[1], key)
    server_tls = tls.ServerTls(tls.TlsFiles(str(cert), str(key), str(pki.ca), "required"))
    listener = server_tls.listener_context()
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.load_cert_chain(str(pki.client[0]), str(pki.client[1]))
    side, _ = _handshake(listener, client)
    assert tls.peer_certificate_principal(side) == Principal.user(pki.CLIENT_SUBJECT)
    assert tls.peer_certificate_principal(None) is None
    # A reload: the listener's context serves the new certificate from the next handshake.
    shutil.copy(pki.server2[0], cert)
    shutil.copy(pki.server2[1], key)
    server_tls.reload()
    _, client_side = _handshake(listener, client)
    assert client_side.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(
        pki.server2[0].read_text())


def test_modes_agree_with_the_settings() -> None:
    from stratalog.server import settings

    assert settings._CLIENT_AUTH_MODES == tls.CLIENT_AUTH_MODES
    assert settings._ANONYMOUS_MODES == authentication.ANONYMOUS_MODES


@pytest.mark.parametrize(("overrides", "message"), [
    ({"tls_client_auth": "requested"}, "'requested'"),
    ({"tls_cert_file": "c.pem"}, "go together"),
    ({"tls_ca_file": "ca.pem"}, "need TLS"),
    ({"tls_cert_file": "c", "tls_key_file": "k", "tls_client_auth": "required"}, "tls_ca_file"),
    ({"authentication_credentials_file": "c.json"}, "TLS is off"),
    ({"authentication_anonymous": "maybe"}, "authentication_anonymous"),
    ({"reflection_open": "perhaps"}, "true or false"),
    ({"kafka_sasl_mechanisms": "PLAIN,SCRAM-SHA-1"}, "'SCRAM-SHA-1' is not offered"),
    ({"kafka_sasl_mechanisms": "GSSAPI"}, "'GSSAPI' is not offered"),
])
def test_security_settings_refused(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(environ={}, overrides=overrides)


def test_anonymous_follows_the_authentication_configured() -> None:
    assert Settings().anonymous_allowed
    with_file = load_settings(environ={}, overrides={
        "authentication_credentials_file": "c.json", "authentication_plaintext_allowed": "yes"})
    assert with_file.authentication_plaintext_allowed is True
    assert not with_file.anonymous_allowed
    allowed = load_settings(environ={"STRATALOG_AUTHENTICATION_ANONYMOUS": "allowed"},
                            overrides={"tls_cert_file": "c", "tls_key_file": "k",
                                       "tls_ca_file": "ca", "tls_client_auth": "required"})
    assert allowed.anonymous_allowed and allowed.tls_enabled


# ---------------------------------------------------------------- under attack


def make_limited(executor, *, queue_max: int = 64, failures_max: int = 20) -> Authenticator:
    store = CredentialFile().with_user("alice", "pw", ITERATIONS_MIN)
    return Authenticator(store, anonymous_allowed=False, executor=executor,
                         cache_entries_max=100, threads=1, queue_max=queue_max,
                         failures_per_host_max=failures_max, failure_window_ms=60_000)


async def test_a_full_queue_refuses_new_credentials_at_once(executor) -> None:
    authenticator = make_limited(executor, queue_max=4, failures_max=1000)
    calls = [asyncio.ensure_future(authenticator.authenticate(basic("alice", f"w{i}"), f"h{i}"))
             for i in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(AuthenticationThrottledError, match="authentication_queue_max"):
        await authenticator.authenticate(basic("alice", "pw"), "10.0.0.9")
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(r, AuthenticationFailedError) for r in results)
    authenticator.queue.check()
    # Drained: the good password is checked now, and cached.
    assert (await authenticator.authenticate(basic("alice", "pw"), "10.0.0.9")).principal == (
        Principal.user("alice"))


async def test_a_host_with_too_many_failures_is_refused_without_a_check(executor) -> None:
    authenticator = make_limited(executor, failures_max=3)
    good = await authenticator.authenticate(basic("alice", "pw"), "10.0.0.1")  # cached
    for i in range(3):
        with pytest.raises(AuthenticationFailedError):
            await authenticator.authenticate(basic("alice", f"wrong{i}"), "10.0.0.1")
    submitted = executor.submitted
    with pytest.raises(AuthenticationThrottledError, match="authentication_failures_per_host"
                       ) as refused:
        await authenticator.authenticate(basic("alice", "wrong-again"), "10.0.0.1")
    assert refused.value.retry_after_ms > 0
    assert executor.submitted == submitted  # nothing was hashed for it
    # Its cached good credentials still pass; another host is not affected.
    assert await authenticator.authenticate(basic("alice", "pw"), "10.0.0.1") == good
    with pytest.raises(AuthenticationFailedError):
        await authenticator.authenticate(basic("alice", "other-wrong"), "10.0.0.2")
    authenticator.queue.check()


async def test_hosts_take_turns_and_cancelled_checks_are_dropped(executor) -> None:
    authenticator = make_limited(executor, failures_max=1000)
    order: list[str] = []
    flood = [asyncio.ensure_future(authenticator.authenticate(basic("alice", f"w{i}"),
                                                              "10.6.6.6"))
             for i in range(30)]
    await asyncio.sleep(0)
    good = asyncio.ensure_future(authenticator.authenticate(basic("alice", "pw"), "10.0.0.1"))
    good.add_done_callback(lambda _: order.append("good"))
    for call in flood:
        call.add_done_callback(lambda _: order.append("flood"))
    assert (await good).principal == Principal.user("alice")
    # The other host's check went second or so, not after the flood's 30.
    assert order.index("good") <= 2, order
    # The flood's callers go away: its checks not started are never hashed.
    submitted = executor.submitted
    for call in flood:
        call.cancel()
    await asyncio.gather(*flood, return_exceptions=True)
    # Part of what is tested: time in which a dropped check, wrongly started, would be hashed.
    await asyncio.sleep(0.2)
    assert executor.submitted - submitted <= 2
    assert authenticator.queue.dropped >= 25
    assert authenticator.queue.pending == 0
    authenticator.queue.check()


async def test_a_reload_invalidates_identities_of_removed_or_changed_entries(executor) -> None:
    store = (CredentialFile().with_user("alice", "pw", ITERATIONS_MIN)
             .with_user("bob", "pw", ITERATIONS_MIN))
    authenticator = Authenticator(store, anonymous_allowed=False, executor=executor,
                                  cache_entries_max=100)
    identities = {}
    for user in ("alice", "bob"):
        verified = await authenticator.authenticate(basic(user, "pw"), "10.0.0.1")
        identities[user] = CallIdentity(verified.principal, "10.0.0.1", "password",
                                        verified.credential)
    anonymous = CallIdentity(Principal.user("ANONYMOUS"), "10.0.0.1")
    assert all(authenticator.still_valid(i) for i in (*identities.values(), anonymous))
    # Alice removed; bob's password set again (a new salt: a new entry, even for the same one).
    authenticator.replace_credentials(store.without_user("alice").with_user(
        "bob", "pw", ITERATIONS_MIN))
    assert not authenticator.still_valid(identities["alice"])
    assert not authenticator.still_valid(identities["bob"])
    assert authenticator.still_valid(anonymous)
    authenticator.replace_credentials(None)
    assert not authenticator.still_valid(identities["alice"])


def test_a_reload_invalidates_a_scram_sha_512_identity_whose_credential_changed(executor) -> None:
    """A Kafka SCRAM-SHA-512 exchange's identity names the user's SHA-512 credential: valid
    while that credential is in the file, unchanged (a SHA-256-only entry is not it)."""
    store = CredentialFile().with_user("alice", "pw", ITERATIONS_MIN)
    authenticator = Authenticator(store, anonymous_allowed=False, executor=executor,
                                  cache_entries_max=100)
    identity = CallIdentity(Principal.user("alice"), "10.0.0.1", "password",
                            ("SCRAM-SHA-512", "alice", store.users_sha512["alice"]))
    assert authenticator.still_valid(identity)
    authenticator.replace_credentials(store.with_user("alice", "pw", ITERATIONS_MIN))
    assert not authenticator.still_valid(identity)
    sha_256_only = CredentialFile(store.users)  # as a file from before SHA-512 credentials
    authenticator.replace_credentials(sha_256_only)
    assert not authenticator.still_valid(identity)
