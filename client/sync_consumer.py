"""The blocking Consumer: the same Consumer (a group member too) for code without asyncio.

:class:`SyncConsumer` takes the arguments of :class:`~stratalog.client.consumer.Consumer` and
runs one on an event loop of its own, in one daemon thread it starts and stops, with its own
:class:`~stratalog.client.Client`. A group member must heartbeat and auto-commit while the
application is busy between two reads (Kafka's Java consumer has its heartbeat thread for the
same reason), so unlike :class:`~stratalog.client.SyncClient`, which blocks the caller inside
gRPC's synchronous calls and runs nothing in the background, this one needs a running loop;
the group logic, fetching and commits are the async Consumer's, not a second copy.

Each call hands a coroutine to that loop (``asyncio.run_coroutine_threadsafe``) and waits for
its result: iteration (``for record in consumer``) gets one record per hop, ``poll(timeout_s)``
one record or ``None`` after the timeout. A timed-out poll cancels its wait for the next
record; nothing is lost, since the Consumer keeps what it fetched and has not handed out
(a new iteration continues with it). Rebalance callbacks and ``on_offset_reset`` run on the
consumer's loop thread, not the caller's.

Thread-safety: one reading thread at a time (as the Consumer); ``commit``, ``committed``,
``assignment``, ``position`` and ``close`` may be called from any thread. Bounded: one thread,
one loop, one Client. Crash behaviour: the thread is a daemon, so a process that exits without
``close()`` neither commits nor leaves; its group removes it after ``session_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from .client import Client
from .consumer import Consumer, ConsumerClosedError
from .credentials import Credentials, TlsConfig
from .groups import GroupMetadata
from .types import ConsumerRecord, TopicPartition

__all__ = ["SyncConsumer"]

T = TypeVar("T")


class SyncConsumer:
    """A :class:`Consumer` behind blocking calls (module docstring).

    Args:
        target: the server's target, or bootstrap targets (a list, or comma-separated).
        topic, **kwargs: the Consumer's (``topics=``, ``pattern=``, ``group_id=`` and the
            rest; docs/client.md).
        timeout_s: the Client's default deadline per request.
        tls, auth: TLS and credentials of the Client.
    """

    def __init__(
        self, target: str | Sequence[str], topic: str | None = None, *,
        timeout_s: float | None = 30.0, tls: TlsConfig | None = None,
        auth: Credentials | None = None, **kwargs: Any,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="stratalog-consumer", daemon=True)
        self._thread.start()
        self._records: AsyncIterator[ConsumerRecord] | None = None
        self._closed = False
        try:
            self._client: Client = self._run(_make_client(target, timeout_s, tls, auth))
        except BaseException:
            self._stop_loop()
            raise
        try:
            self._consumer: Consumer = self._run(_make_consumer(self._client, topic, kwargs))
        except BaseException:
            self._run(self._client.close())
            self._stop_loop()
            raise

    # -- running on the loop ----------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> SyncConsumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Resolve the partitions (or join the group) and start fetching."""
        self._check_open()
        self._run(self._consumer.start())

    def close(self) -> None:
        """Close the Consumer (with a group: commit and leave), its Client and the thread.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._close())
        finally:
            self._stop_loop()

    async def _close(self) -> None:
        try:
            if self._records is not None:
                await self._records.aclose()  # type: ignore[attr-defined]
            await self._consumer.close()
        finally:
            await self._client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ConsumerClosedError("the SyncConsumer is closed")

    # -- reading -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records as the Consumer's ``async for`` gives them; ends where it ends (never, for
        a group member or with ``follow``, until ``close()`` from another thread)."""
        while True:
            record = self._next(None)
            if record is None:
                return
            yield record

    def poll(self, timeout_s: float) -> ConsumerRecord | None:
        """The next record, or None when none came within ``timeout_s`` or the reading ended.
        With a group, each poll counts for ``max_poll_interval_ms``."""
        return self._next(timeout_s)

    def _next(self, timeout_s: float | None) -> ConsumerRecord | None:
        self._check_open()
        return self._run(self._anext(timeout_s))

    async def _anext(self, timeout_s: float | None) -> ConsumerRecord | None:
        if self._records is None:
            self._records = aiter(self._consumer)
        try:
            return await asyncio.wait_for(anext(self._records), timeout_s)
        except StopAsyncIteration:
            self._records = None
            return None
        except TimeoutError:
            # The cancelled wait ended the generator; the Consumer keeps its records.
            self._records = None
            return None

    # -- positions and the group --------------------------------------------------------------

    @property
    def consumer(self) -> Consumer:
        """The async Consumer (its loop is this object's thread's: call it only there)."""
        return self._consumer

    def assignment(self) -> frozenset[TopicPartition]:
        return self._call_soon(self._consumer.assignment)

    def position(self, partition: int | TopicPartition) -> int:
        return self._call_soon(lambda: self._consumer.position(partition))

    def seek(self, partition: int | TopicPartition, offset: int) -> None:
        self._call_soon(lambda: self._consumer.seek(partition, offset))

    def group_metadata(self) -> GroupMetadata:
        return self._call_soon(self._consumer.group_metadata)

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None, *,
               timeout_s: float | None = 30.0) -> None:
        """See :meth:`Consumer.commit`: waits for the answer."""
        self._check_open()
        self._run(self._consumer.commit(offsets, timeout_s=timeout_s))

    def committed(self, partitions: Iterable[TopicPartition] | None = None, *,
                  timeout_s: float | None = 30.0) -> dict[TopicPartition, int | None]:
        """See :meth:`Consumer.committed`."""
        self._check_open()
        return self._run(self._consumer.committed(partitions, timeout_s=timeout_s))

    def _call_soon(self, call: Any) -> Any:
        """``call()`` on the loop thread (the Consumer is event-loop only)."""
        self._check_open()

        async def run() -> Any:
            return call()
        return self._run(run())


async def _make_client(target: str | Sequence[str], timeout_s: float | None,
                       tls: TlsConfig | None, auth: Credentials | None) -> Client:
    return Client(target, timeout_s=timeout_s, tls=tls, auth=auth)


async def _make_consumer(client: Client, topic: str | None, kwargs: dict[str, Any]) -> Consumer:
    return Consumer(client, topic, **kwargs)
