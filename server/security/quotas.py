"""Byte-rate quotas per principal: Kafka's ClientQuotaManager, with mute-on-throttle for Produce.

Each principal may have a produce quota (``producer_byte_rate``: bytes of Produce requests per
second) and a fetch quota (``consumer_byte_rate``: bytes of fetch answers and Subscribe messages
per second): the server defaults ``quota_producer_byte_rate`` and ``quota_consumer_byte_rate``,
or the principal's own in the settings file::

    [quotas."User:alice"]
    producer_byte_rate = 1048576
    consumer_byte_rate = 0          # 0 = no quota

**Measuring** (Kafka's ``Rate`` over a ``SampledStat``): the bytes of each call are added to
the current sample of the principal's :class:`Rate`; a sample lasts ``quota_window_size_ms``
and ``quota_window_num`` of them are kept (11 × 1 s by default). The rate is the sum of the
samples over the time they span, counted as at least ``(quota_window_num - 1)`` windows, so a
new principal is not throttled by its first burst.

**Throttle time**: when a call takes the rate O above the quota T, the time that brings it back
to T if nothing more came, over the window W the rate was measured on, is::

    throttle = (O - T) / T × W                         (Kafka's ClientQuotaManager.throttleTime)

capped at the span the rate is measured over (``quota_window_num × quota_window_size_ms``:
bytes older than that no longer count), and sent in the answer's ``throttle_time_ms``.

**Produce: held back before it is served** (:class:`ProduceAdmission`; Kafka since KIP-219
answers at once and then stops reading the throttled connection, ``SocketServer.scala``'s
muting, and bounds the bytes of requests read but not yet handled,
``queued.max.request.bytes`` in ``RequestChannel.scala``). A Produce of a principal with a
produce quota waits, *before* the servicer sees it, in its principal's queue (first come,
first served) until the principal's rate is back at its quota; then its bytes are recorded and
it is served, and its answer goes at once with the throttle time it earned. So a client with
1,000 requests in flight gets the quota, not 1,000 requests' worth served and then delayed;
and a principal cannot escape its queue with more connections (Kafka mutes per connection).
While its requests wait they hold their buffers: each *client* (its principal, or its host for
an anonymous call, as server/client_limits.py counts clients) may have at most
``quota_produce_bytes_in_flight_max`` bytes of Produce requests waiting or being served; one
more is refused at once, RESOURCE_EXHAUSTED + RESOURCE_LIMIT_EXCEEDED (retriable: the backlog
drains at the quota's rate). A request larger than the limit is admitted when its client has
nothing else in flight, so every request that fits ``max_request_bytes`` can be served.
Worst case held for throttled Produce requests: one client, ``max(quota_produce_bytes_in_
flight_max, max_request_bytes)``; all of them, that times the clients with a produce quota
sending at once (docs/server.md, "What a client can make the server hold").

**Fetch and Subscribe: answers delayed** (as Kafka did before KIP-219): the size of an answer
is known only once it is read, so the answer's task sleeps the throttle time it earned, holding
no lock and not the event loop. A fetch never asks for more than the span's worth of the
quota (Kafka's ``getMaxValueInQuotaWindow``), so what a delayed answer holds is bounded by the
quota, per call in flight. A failed call's bytes count, but its error is not delayed.

Sensors of principals that sent nothing for a whole span hold nothing and are dropped, so the
memory follows the principals active in the last span.

Reloading (SIGHUP) replaces the quotas; the measured rates stay, unless the window changed.

Concurrency: event-loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import QuotaBacklogExceededError

if TYPE_CHECKING:
    pass

__all__ = ["ProduceAdmission", "QuotaConfig", "QuotaManager", "Rate"]

logger = logging.getLogger(__name__)

_PRODUCE = "producer_byte_rate"
_FETCH = "consumer_byte_rate"
# Sensors are swept for idle ones when there are more than this many, and then at twice the
# number left: the sweep's cost is spread over as many calls as it keeps sensors.
_SWEEP_MIN = 1024
#: The setting that bounds a throttled client's Produce backlog.
IN_FLIGHT_LIMIT = "quota_produce_bytes_in_flight_max"
#: The longest retry hint a refused Produce carries (a backlog drained at a tiny quota).
RETRY_AFTER_MS_MAX = 60_000


class Rate:
    """A rate over sliding samples (Kafka's ``Rate`` over a ``SampledStat``).

    Holds up to ``samples_max`` samples of ``[start_ms, total]``, the current one's index, the
    sum of the samples and the oldest start. Invariants (:meth:`check`): at most
    ``samples_max`` samples in ring order; ``_total`` is the sum of the samples' totals and ``_oldest_ms`` the
    smallest start (both kept as samples change, so a measure costs no pass over the samples
    unless one has expired). Not thread-safe.
    """

    __slots__ = ("_current", "_oldest_ms", "_samples", "_samples_max", "_total", "_window_ms")

    def __init__(self, window_ms: int, samples_max: int) -> None:
        assert window_ms >= 1 and samples_max >= 2
        self._window_ms = window_ms
        self._samples_max = samples_max
        self._samples: list[list[float]] = []
        self._current = 0
        self._total = 0.0
        self._oldest_ms = 0.0

    def record(self, value: float, now_ms: float) -> None:
        """Add ``value`` at ``now_ms``: to the current sample, or a new one if it is over."""
        samples = self._samples
        if not samples:
            samples.append([now_ms, 0.0])
            self._current = 0
            self._oldest_ms = now_ms
        sample = samples[self._current]
        if now_ms - sample[0] >= self._window_ms:
            self._current = (self._current + 1) % self._samples_max
            if self._current >= len(samples):
                sample = [now_ms, 0.0]
                samples.append(sample)
            else:
                sample = samples[self._current]
                self._total -= sample[1]
                sample[0], sample[1] = now_ms, 0.0
            self._oldest_ms = min(s[0] for s in samples)
        sample[1] += value
        self._total += value

    def _purge(self, now_ms: float) -> None:
        # Samples older than the whole span no longer count (SampledStat.purgeObsoleteSamples).
        expire_ms = self._samples_max * self._window_ms
        if not self._samples or now_ms - self._oldest_ms < expire_ms:
            return
        for sample in self._samples:
            if now_ms - sample[0] >= expire_ms:
                self._total -= sample[1]
                sample[0], sample[1] = now_ms, 0.0
        self._oldest_ms = min(s[0] for s in self._samples)

    def window_ms(self, now_ms: float) -> float:
        """The time the rate is measured over: since the oldest sample began, and at least
        ``samples_max - 1`` windows (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest_ms if self._samples else 0.0
        full_windows = int(elapsed // self._window_ms)
        if full_windows < self._samples_max - 1:
            elapsed += (self._samples_max - 1 - full_windows) * self._window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """Units per second at ``now_ms``."""
        window_ms = self.window_ms(now_ms)  # first: it drops the expired samples
        return self._total * 1000.0 / window_ms

    def check(self) -> None:
        """Assert the invariants (tests call it after every change)."""
        samples = self._samples
        assert len(samples) <= self._samples_max
        assert abs(self._total - sum(s[1] for s in samples)) < 1e-6, "running total drifted"
        if samples:
            assert self._oldest_ms == min(s[0] for s in samples), "oldest start drifted"
            assert 0 <= self._current < len(samples)

    def idle(self, now_ms: float) -> bool:
        """Whether nothing was recorded in the whole span (the rate is 0 and stays so)."""
        expire_ms = self._samples_max * self._window_ms
        return all(not s[1] or now_ms - s[0] >= expire_ms for s in self._samples)


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """The quotas: defaults, per-principal overrides (``{"User:alice": {"producer_byte_rate":
    1048576}}``), both in bytes per second (0 = none), and the measuring window."""

    producer_byte_rate: int = 0
    consumer_byte_rate: int = 0
    overrides: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    window_num: int = 11
    window_size_ms: int = 1000

    @classmethod
    def of_settings(cls, settings: Any) -> QuotaConfig:
        """The quotas of the server's :class:`~stratalog.server.settings.Settings`."""
        return cls(
            settings.quota_producer_byte_rate,
            settings.quota_consumer_byte_rate,
            settings.quota_overrides,
            settings.quota_window_num,
            settings.quota_window_size_ms,
        )

    def quota(self, kind: str, principal: str) -> int:
        """Bytes per second ``principal`` may move of ``kind``; 0 = no quota."""
        own = self.overrides.get(principal)
        if own is not None and kind in own:
            return own[kind]
        return self.producer_byte_rate if kind == _PRODUCE else self.consumer_byte_rate

    @property
    def enabled(self) -> bool:
        """Whether any principal has any quota."""
        return bool(self.producer_byte_rate or self.consumer_byte_rate or any(
            rate for quotas in self.overrides.values() for rate in quotas.values()
        ))

    @property
    def span_ms(self) -> int:
        """The time the rates are measured over: every sample."""
        return self.window_num * self.window_size_ms


def _monotonic_ms() -> float:
    return time.monotonic() * 1000.0


class QuotaManager:
    """Every principal's measured byte rates and the throttle times they earn.

    Holds the :class:`QuotaConfig` and one :class:`Rate` per (kind, principal) that has a
    quota and moved bytes in the last span. Event-loop only.
    """

    def __init__(
        self, config: QuotaConfig, clock_ms: Callable[[], float] = _monotonic_ms
    ) -> None:
        self._config = config
        self._clock_ms = clock_ms
        self._rates: dict[tuple[str, str], Rate] = {}
        self._sweep_at = _SWEEP_MIN
        self.enabled = config.enabled

    @property
    def config(self) -> QuotaConfig:
        return self._config

    @property
    def sensors(self) -> int:
        """How many principal rates are held."""
        return len(self._rates)

    def update(self, config: QuotaConfig) -> None:
        """Use ``config`` from now on (SIGHUP). Measured rates stay unless the window changed."""
        old = self._config
        if (old.window_num, old.window_size_ms) != (config.window_num, config.window_size_ms):
            self._rates.clear()
        self._config = config
        self.enabled = config.enabled

    def record_produce(self, principal: str, size_bytes: int) -> int:
        """Record a Produce of ``size_bytes``; the throttle time it earns, in ms."""
        return self._record(_PRODUCE, principal, size_bytes)

    def record_fetch(self, principal: str, size_bytes: int) -> int:
        """Record a fetch answer (or Subscribe message) of ``size_bytes``; its throttle ms."""
        return self._record(_FETCH, principal, size_bytes)

    def fetch_bytes_max(self, principal: str) -> int | None:
        """The most one fetch of ``principal`` should ask for (None: no quota): what the
        quota allows over ``window_num - 1`` windows (Kafka's ``getMaxValueInQuotaWindow``)."""
        config = self._config
        quota = config.quota(_FETCH, principal)
        if not quota:
            return None
        return max(1, quota * (config.window_num - 1) * config.window_size_ms // 1000)

    def produce_quota(self, principal: str) -> int:
        """The produce bytes per second ``principal`` may send; 0 = no quota."""
        return self._config.quota(_PRODUCE, principal)

    def produce_throttle_ms(self, principal: str) -> int:
        """How long ``principal``'s produce rate, as measured now, takes to come back to its
        quota if nothing more came (0: it is at or below it). Records nothing."""
        config = self._config
        quota = config.quota(_PRODUCE, principal)
        rate = self._rates.get((_PRODUCE, principal))
        if not quota or rate is None:
            return 0
        now_ms = self._clock_ms()
        return _throttle_ms(rate.measure(now_ms), quota, rate.window_ms(now_ms), config.span_ms)

    def _record(self, kind: str, principal: str, size_bytes: int) -> int:
        config = self._config
        quota = config.quota(kind, principal)
        if not quota:
            return 0
        now_ms = self._clock_ms()
        key = (kind, principal)
        rate = self._rates.get(key)
        if rate is None:
            if len(self._rates) >= self._sweep_at:
                self._sweep(now_ms)
            rate = self._rates[key] = Rate(config.window_size_ms, config.window_num)
        rate.record(size_bytes, now_ms)
        return _throttle_ms(rate.measure(now_ms), quota, rate.window_ms(now_ms), config.span_ms)

    def _sweep(self, now_ms: float) -> None:
        for key in [key for key, rate in self._rates.items() if rate.idle(now_ms)]:
            del self._rates[key]
        self._sweep_at = max(_SWEEP_MIN, 2 * len(self._rates))


def _throttle_ms(observed: float, quota: int, window_ms: float, span_ms: int) -> int:
    """Kafka's ``throttleTime``: (O - T) / T × W, in whole ms, at most the span; 0 at or
    below the quota."""
    if observed <= quota:
        return 0
    return int(min(round((observed - quota) / quota * window_ms), span_ms))


class _Queue:
    """One principal's throttled Produce requests: the lock they pass one at a time (FIFO, as
    asyncio.Lock wakes its waiters) and how many hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class ProduceAdmission:
    """Produce requests of principals with a produce quota, held before they are served (the
    module docstring's "Produce: held back before it is served").

    Holds, per principal with requests waiting or passing, its :class:`_Queue`; per client
    with Produce bytes admitted and not yet answered, those bytes. Invariants (:meth:`check`):
    no entry at 0 users or 0 bytes (the maps hold only clients and principals with requests
    in flight, so their size is bounded by the requests in flight). A client's bytes exceed
    ``bytes_in_flight_max`` only by a request admitted alone (:meth:`admit`).

    Concurrency: event-loop only; :meth:`admit` awaits, :meth:`release` does not.
    """

    def __init__(self, manager: QuotaManager, bytes_in_flight_max: int) -> None:
        assert bytes_in_flight_max >= 1
        self._manager = manager
        self.bytes_in_flight_max = bytes_in_flight_max
        self._queues: dict[str, _Queue] = {}
        self._in_flight: dict[str, int] = {}

    def in_flight_bytes(self, client: str) -> int:
        """The Produce bytes ``client`` has waiting or being served."""
        return self._in_flight.get(client, 0)

    async def admit(self, principal: str, client: str, size_bytes: int) -> int:
        """Wait until ``principal`` may send ``size_bytes`` more, record them, and return the
        throttle time (ms) they earn. The caller serves the request, then calls
        :meth:`release` (also when serving fails); if this raises, nothing is to release.

        Raises:
            QuotaBacklogExceededError: ``client`` already has ``bytes_in_flight_max`` bytes
                waiting or being served (at once, without waiting).
            asyncio.CancelledError: the call went away while waiting: its bytes are released
                and nothing was recorded.
        """
        held = self._in_flight.get(client, 0)
        if held and held + size_bytes > self.bytes_in_flight_max:
            quota = self._manager.produce_quota(principal)
            # When the backlog will have drained at the quota: what Kafka's throttle_time_ms
            # asks of a client (KIP-219: send nothing more before it), as a retry hint.
            retry_after_ms = max(1, min(RETRY_AFTER_MS_MAX, (held * 1000) // max(1, quota)))
            raise QuotaBacklogExceededError(
                f"{client} already has {held} bytes of Produce requests waiting for its produce"
                f" quota ({quota} bytes/s) or being served; {size_bytes} more would pass its"
                f" limit ({IN_FLIGHT_LIMIT}={self.bytes_in_flight_max}); retry in"
                f" {retry_after_ms} ms, when they will have drained",
                limit=IN_FLIGHT_LIMIT,
                retry_after_ms=retry_after_ms,
            )
        self._in_flight[client] = held + size_bytes
        queue = self._queues.get(principal)
        if queue is None:
            queue = self._queues[principal] = _Queue()
        queue.users += 1
        try:
            async with queue.lock:
                # One request of the principal at a time: each waits until the rate the ones
                # before it made is back at the quota, then counts its own bytes.
                while (delay_ms := self._manager.produce_throttle_ms(principal)) > 0:
                    await asyncio.sleep(delay_ms / 1000)
                return self._manager.record_produce(principal, size_bytes)
        except BaseException:
            self.release(client, size_bytes)
            raise
        finally:
            queue.users -= 1
            if not queue.users and self._queues.get(principal) is queue:
                del self._queues[principal]

    def release(self, client: str, size_bytes: int) -> None:
        """``client``'s request of ``size_bytes`` was answered (or failed)."""
        remaining = self._in_flight[client] - size_bytes
        assert remaining >= 0, (client, remaining)
        if remaining:
            self._in_flight[client] = remaining
        else:
            del self._in_flight[client]

    def check(self) -> None:
        """Assert the invariants (for tests)."""
        assert all(queue.users > 0 for queue in self._queues.values())
        assert all(held > 0 for held in self._in_flight.values())
