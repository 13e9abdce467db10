"""The watch state machine (server/cluster/watches.py) against a real etcd, in this process:
created -> a re-read; events -> a wake per response; a compacted resume revision -> watched
again from now with a re-read; a stream broken by an etcd restart -> created again (with the
changes made meanwhile delivered); stop -> no task, no stream left; a burst of 1,000 changes
-> one more step of the woken poller, not 1,000; a resumed watch replays what it missed; over
TLS and with etcd's auth (a watch that comes back once the session authenticates again after
an etcd restart); an etcd member cut off from its quorum ends the stream (require-leader)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import aetcd

from stratalog.server.cluster.endpoints import Endpoint
from stratalog.server.cluster.etcd_client import EtcdSecurity, new_client
from stratalog.server.cluster.polling import Poller
from stratalog.server.cluster.session import EtcdSession
from stratalog.server.cluster.watches import BACKOFF_INITIAL_S, KeyWatch
from tests.integration.conftest import free_port

from .conftest import EtcdProcess, start_etcd_cluster

if TYPE_CHECKING:
    from tests.conftest import TestPki

# Longer than any test waits: a step that runs did so because the watch woke it.
LONG_INTERVAL_S = 3600.0
WAIT_S = 30.0


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait (10 ms steps) until ``condition`` holds; AssertionError naming ``what`` after
    :data:`WAIT_S` (it only turns a hang into a failure)."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


class Wakes:
    """Counts ``on_change`` calls."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


async def test_created_wakes_once_then_each_change_wakes(session: EtcdSession) -> None:
    wakes = Wakes()
    watch = KeyWatch(session, b"/t/brokers/", [wakes], "test-watch", prefix=True)
    watch.start()
    try:
        await asyncio.wait_for(watch.wait_watching(), WAIT_S)
        assert wakes.count == 1  # the re-read of what changed before the watch existed
        await session.client.put(b"/t/brokers/1", b"a")
        await until(lambda: wakes.count == 2, "a put inside the prefix woke")
        await session.client.put(b"/t/other", b"x")  # outside the prefix
        await session.client.delete(b"/t/brokers/1")
        await until(lambda: wakes.count == 3, "a delete woke")
        assert watch.change_count == 2 and watch.created_count == 1
    finally:
        await watch.stop()
    assert not watch.watching


async def test_a_compacted_resume_revision_is_watched_again_from_now(
        session: EtcdSession) -> None:
    client = session.client
    first = await client.put(b"/t/controller", b"1")
    for value in range(5):
        await client.put(b"/t/controller", str(value).encode())
    latest = await client.put(b"/t/controller", b"last")
    await client.compact(latest.header.revision)
    wakes = Wakes()
    watch = KeyWatch(session, b"/t/controller", [wakes], "test-watch")
    # Resume at a revision etcd compacted away: ErrCompacted, then a watch from now.
    watch.start(start_revision=first.header.revision)
    try:
        await until(lambda: watch.compacted_count == 1 and watch.watching,
                    "compaction seen and the watch created again")
        assert wakes.count == 1  # the re-read; nothing replayed
        assert watch.next_revision == latest.header.revision + 1
        await client.put(b"/t/controller", b"after")
        await until(lambda: wakes.count == 2, "a change after the re-watch woke")
        assert watch.broken_count == 0  # a compaction is not a break: no backoff
    finally:
        await watch.stop()


async def test_a_watch_broken_by_an_etcd_restart_is_created_again(
        session: EtcdSession, etcd: EtcdProcess) -> None:
    wakes = Wakes()
    watch = KeyWatch(session, b"/t/partitions/", [wakes], "test-watch", prefix=True)
    watch.start()
    try:
        await asyncio.wait_for(watch.wait_watching(), WAIT_S)
        await asyncio.to_thread(etcd.stop)
        await until(lambda: not watch.watching, "the stream broke")
        await asyncio.to_thread(etcd.start)
        await until(lambda: watch.created_count == 2, "the watch created again")
        before = wakes.count
        await session.client.put(b"/t/partitions/a/0", b"s")
        await until(lambda: wakes.count > before, "a change after the restart woke")
        assert watch.broken_count >= 1
    finally:
        await watch.stop()


async def test_a_resumed_watch_replays_what_changed_while_it_was_down(
        session: EtcdSession) -> None:
    first = KeyWatch(session, b"/t/topics/", [], "test-watch", prefix=True)
    first.start()
    await asyncio.wait_for(first.wait_watching(), WAIT_S)
    resume_at = first.next_revision
    await first.stop()
    # Written while no stream was open; a watch resumed where the first stopped (what a
    # re-created watch does after a break) gets it as an event, without a re-read.
    await session.client.put(b"/t/topics/during", b"t")
    wakes = Wakes()
    resumed = KeyWatch(session, b"/t/topics/", [wakes], "test-watch", prefix=True)
    resumed.start(start_revision=resume_at)
    try:
        await until(lambda: wakes.count == 1, "the change replayed")
        assert resumed.change_count == 1 and resumed.compacted_count == 0
    finally:
        await resumed.stop()


async def test_a_burst_of_1000_changes_is_one_more_step(session: EtcdSession) -> None:
    steps = 0
    release = asyncio.Event()

    async def step() -> None:
        nonlocal steps
        steps += 1
        if steps == 2:
            await release.wait()  # the step the first wake ran: held while the burst happens

    poller = Poller(step, LONG_INTERVAL_S, "test-poller", "step not made")
    watch = KeyWatch(session, b"/t/acls/", [poller.wake], "test-watch", prefix=True)
    poller.start()
    await until(lambda: steps == 1, "the poller's first step")
    watch.start()
    try:
        await until(lambda: steps == 2, "the watch's creation woke the poller")
        client = session.client
        last = None
        for n in range(1000):
            last = await client.put(f"/t/acls/{n % 50}".encode(), str(n).encode())
        assert last is not None
        await until(lambda: watch.next_revision > last.header.revision,
                    "every change reached the watch")
        assert watch.change_count >= 1
        release.set()
        await until(lambda: steps == 3, "one step after the burst")
        await asyncio.sleep(0)  # (a second wake would have been set already: none is)
        assert steps == 3
    finally:
        await watch.stop()
        await poller.stop()


async def test_stop_ends_the_task_and_the_stream(session: EtcdSession) -> None:
    watch = KeyWatch(session, b"/t/brokers/", [], "test-watch", prefix=True)
    await watch.stop()  # before start: nothing to do
    watch.start()
    await asyncio.wait_for(watch.wait_watching(), WAIT_S)
    names = {task.get_name() for task in asyncio.all_tasks()}
    assert "test-watch" in names
    await asyncio.wait_for(watch.stop(), WAIT_S)
    assert "test-watch" not in {task.get_name() for task in asyncio.all_tasks()}
    assert not watch.watching


async def test_over_tls_with_a_client_certificate(etcd_tls: EtcdProcess,
                                                  pki: TestPki) -> None:
    security = await asyncio.to_thread(
        EtcdSecurity.load, etcd_tls.url, ca_file=str(pki.ca), cert_file=str(pki.client[0]),
        key_file=str(pki.client[1]))
    session = await EtcdSession.open([Endpoint("127.0.0.1", etcd_tls.client_port)], 3_000,
                                     security)
    wakes = Wakes()
    watch = KeyWatch(session, b"/t/brokers/", [wakes], "test-watch", prefix=True)
    watch.start()
    try:
        await asyncio.wait_for(watch.wait_watching(), WAIT_S)
        await session.client.put(b"/t/brokers/1", b"a")
        await until(lambda: wakes.count == 2, "a change woke, over TLS")
    finally:
        await watch.stop()
        await session.close()


async def test_with_etcd_auth_the_watch_comes_back_after_an_etcd_restart(
        etcd: EtcdProcess, tmp_path: Path) -> None:
    # etcd's auth tokens die with etcd: the watch's stream is refused until the session
    # authenticates again (after a renewal, session.py), then created on its new client.
    etcd.enable_auth("watcher", "secret", prefix="/t")
    password = tmp_path / "password"
    password.write_text("secret\n")
    security = await asyncio.to_thread(EtcdSecurity.load, etcd.url, username="watcher",
                                       password_file=str(password))
    session = await EtcdSession.open([Endpoint("127.0.0.1", etcd.client_port)], 3_000,
                                     security, access_check_key=b"/t/check")
    session.start()
    wakes = Wakes()
    watch = KeyWatch(session, b"/t/topics/", [wakes], "test-watch", prefix=True)
    watch.start()
    try:
        await asyncio.wait_for(watch.wait_watching(), WAIT_S)
        await asyncio.to_thread(etcd.stop)
        await until(lambda: not watch.watching, "the stream broke")
        await asyncio.to_thread(etcd.start)
        await until(lambda: watch.watching, "the watch created again with a new token")
        before = wakes.count
        written = False

        async def put() -> None:
            nonlocal written
            with contextlib.suppress(aetcd.ClientError):
                await session.client.put(b"/t/topics/after", b"t")
                written = True

        while not written:  # the session's client may still hold the old token
            await put()
            if not written:
                await asyncio.sleep(0.1)
        await until(lambda: wakes.count > before, "a change after the restart woke")
    finally:
        await watch.stop()
        await session.close()


async def test_a_member_cut_off_from_its_quorum_ends_the_stream(tmp_path: Path) -> None:
    members = await asyncio.to_thread(start_etcd_cluster, tmp_path / "etcd-cluster", 3)
    try:
        session = await EtcdSession.open([Endpoint("127.0.0.1", members[0].client_port)],
                                         3_000)
        watch = KeyWatch(session, b"/t/controller", [], "test-watch")
        watch.start()
        try:
            await asyncio.wait_for(watch.wait_watching(), WAIT_S)
            for member in members[1:]:
                await asyncio.to_thread(member.stop)
            # Without the require-leader flag etcd would keep the stream open, silent.
            await until(lambda: watch.broken_count >= 1 and not watch.watching,
                        "the member without a leader ended the stream")
        finally:
            await watch.stop()
            await session.close()
    finally:
        for member in members:
            await asyncio.to_thread(member.stop)


async def test_a_watch_that_cannot_be_created_backs_off() -> None:
    # Nothing listens on the endpoint: every attempt fails at once, and each waits its
    # backoff (at least half of 50 ms, 100 ms, 200 ms, ... : the jitter) before the next.
    endpoint = Endpoint("127.0.0.1", free_port())
    session = EtcdSession(new_client(endpoint, EtcdSecurity(), 2.0), endpoint, 3)
    watch = KeyWatch(session, b"/t/brokers/", [], "test-watch", prefix=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    watch.start()
    try:
        await until(lambda: watch.broken_count >= 6, "six attempts")
        elapsed = loop.time() - started
    finally:
        await watch.stop()
        await session.client.close()
    least_s = sum(BACKOFF_INITIAL_S * 2 ** n * 0.5 for n in range(5))  # five waits between six
    assert elapsed >= least_s, (elapsed, least_s)
    assert watch.created_count == 0 and watch.change_count == 0
