"""What the server's security rests on, lost or changed under it (issue 24, finding 11).

* A missing ``acls.json``: a server that has run before refused to notice and started with no
  ACLs (with ``allow_everyone_if_no_acl_found = true``, every DENY vanished). Now it refuses to
  start, naming the directories, unless ``acl_file_create_if_missing``; a new server writes an
  empty file at once, so that its later absence means a loss.
* A Session opened by a user who is then removed from the credential file (and the server
  reloaded, SIGHUP) went on producing. Now its next request is refused UNAUTHENTICATED.
"""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import grpc.aio

from stratalog.records import build_batch
from stratalog.server.security.credentials import CredentialFile
from stratalog.v1 import broker_pb2, broker_pb2_grpc

from .conftest import CALL_TIMEOUT_S, until

ACL_SERVER = ("--authorizer", "acl")


def _start_fails(data: Path, *flags: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "stratalog.server", "--listen", "127.0.0.1:0", "--metrics-port",
         "-1", "--log-dirs", str(data), *flags],
        capture_output=True, timeout=120,
    )


def test_a_missing_acl_file_stops_a_server_that_ran_before(start_server, tmp_path: Path):
    data = tmp_path / "data"
    server = start_server(data, *ACL_SERVER)
    assert (data / "acls.json").exists()  # a new server writes an empty file at once
    assert server.stop() == 0
    assert start_server(data, *ACL_SERVER).stop() == 0  # and finds it again

    (data / "acls.json").unlink()  # lost (or its directory not mounted)
    result = _start_fails(data, *ACL_SERVER, "--allow-everyone-if-no-acl-found", "true")
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "no log directory holds its ACL file acls.json" in stderr, stderr
    assert str(data) in stderr and "acl_file_create_if_missing" in stderr
    assert not (data / "acls.json").exists()

    # Told to: it starts with no ACLs, and writes the file.
    server = start_server(data, *ACL_SERVER, "--acl-file-create-if-missing", "true")
    assert (data / "acls.json").exists()
    assert "starting with no ACLs" in server.log_text()
    assert server.stop() == 0


def test_the_authorizer_turned_on_later_finds_the_file_a_server_without_it_wrote(
        start_server, tmp_path: Path):
    """A server that ran without the authorizer wrote an empty acls.json, so turning the
    authorizer on is no "lost file" (issue 25's security walk-through tripped on it)."""
    data = tmp_path / "data"
    assert start_server(data).stop() == 0
    assert (data / "acls.json").read_bytes()  # an empty set, written by the server
    server = start_server(data, *ACL_SERVER)
    assert "starting with no ACLs" not in server.log_text()
    assert server.stop() == 0


def _basic(user: str, password: str) -> tuple[tuple[str, str]]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return (("authorization", f"Basic {token}"),)


def _produce(request_id: int) -> broker_pb2.SessionRequest:
    batch = build_batch([(1_700_000_000_000, None, b"value", ())])
    return broker_pb2.SessionRequest(
        id=request_id, produce=broker_pb2.ProduceRequest(topic="kept", record_batches=batch))


async def test_a_session_of_a_removed_user_is_refused_from_its_next_request(
    start_server, tmp_path: Path,
) -> None:
    credentials = tmp_path / "credentials.json"
    store = CredentialFile().with_user("alice", "pw", 4096).with_user("bob", "pw", 4096)
    store.save(credentials)
    server = start_server(None, "--authentication-credentials-file", str(credentials),
                          "--authentication-plaintext-allowed", "true")
    async with grpc.aio.insecure_channel(server.target) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(broker_pb2.CreateTopicRequest(name="kept", partitions=1),
                               metadata=_basic("bob", "pw"), timeout=CALL_TIMEOUT_S)
        alice = stub.Session(metadata=_basic("alice", "pw"), timeout=CALL_TIMEOUT_S)
        bob = stub.Session(metadata=_basic("bob", "pw"), timeout=CALL_TIMEOUT_S)
        for session in (alice, bob):
            await session.write(_produce(1))
            answer = await session.read()
            assert answer.WhichOneof("response") == "produce", answer

        store.without_user("alice").save(credentials)
        server.process.send_signal(signal.SIGHUP)
        await until(lambda: "reloaded the credential file" in server.log_text(),
                    "the credential file reloaded", timeout_s=30)

        await alice.write(_produce(2))
        refused = await alice.read()
        assert refused.WhichOneof("response") == "error", refused
        assert refused.error.code == grpc.StatusCode.UNAUTHENTICATED.value[0]
        assert refused.error.reason == broker_pb2.AUTHENTICATION_FAILED
        assert "no longer valid" in refused.error.message
        # Bob's session, whose entry did not change, goes on.
        await bob.write(_produce(2))
        answer = await bob.read()
        assert answer.WhichOneof("response") == "produce", answer
        for session in (alice, bob):
            await session.done_writing()
        latest = await stub.ListOffsets(broker_pb2.ListOffsetsRequest(topic="kept",
                                                                      timestamp=-1),
                                        metadata=_basic("bob", "pw"), timeout=CALL_TIMEOUT_S)
    # Alice's second record never reached the log: 3 records, not 4.
    assert latest.offset == 3
    assert server.stop() == 0
