"""The pool threads' CPU priority (server/thread_priority.py): lowered for the thread that asks,
never for the others, and never at the price of a broken executor."""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from stratalog.server import thread_priority
from stratalog.server.thread_priority import NICE_MAX, lower_current_thread_priority

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="the nice value is per thread on Linux only; elsewhere nothing is changed",
)


def _own_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _pool_nice(increment: int) -> tuple[int, int]:
    """(the nice value a pool thread started with ``increment`` runs at, how many times its
    initializer applied it) from a one-thread executor, as the server builds its pool."""
    applied: list[bool] = []

    def initializer() -> None:
        applied.append(lower_current_thread_priority(increment))

    with ThreadPoolExecutor(max_workers=1, initializer=initializer) as pool:
        return pool.submit(_own_nice).result(timeout=10), applied.count(True)


@linux_only
def test_a_pool_thread_runs_lower_and_the_calling_thread_keeps_its_priority() -> None:
    before = _own_nice()
    nice, applied = _pool_nice(5)
    assert applied == 1
    assert nice == min(NICE_MAX, before + 5)
    # The thread that built the pool (the event loop's, in the server) is untouched.
    assert _own_nice() == before


@linux_only
def test_the_nice_value_stops_at_its_maximum() -> None:
    nice, _ = _pool_nice(NICE_MAX)
    assert nice == NICE_MAX


def test_zero_changes_nothing_and_a_negative_increment_is_refused() -> None:
    before = _own_nice()
    nice, applied = _pool_nice(0)
    assert (nice, applied) == (before, 0)
    with pytest.raises(ValueError, match="must be >= 0"):
        lower_current_thread_priority(-1)


@linux_only
def test_a_refusal_is_logged_once_and_leaves_the_executor_working(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*args: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    # A sandbox that forbids setpriority: the system call is what is replaced, not our code.
    monkeypatch.setattr(os, "setpriority", refuse)
    monkeypatch.setattr(thread_priority, "_refusal_logged", False)
    before = _own_nice()
    with caplog.at_level(logging.WARNING, logger=thread_priority.__name__):
        initializer = functools.partial(lower_current_thread_priority, 10)
        with ThreadPoolExecutor(max_workers=2, initializer=initializer) as pool:
            # Both threads start (their initializers ran) and still run work at the old priority.
            barrier = threading.Barrier(2, timeout=10)
            niced = [pool.submit(lambda: (barrier.wait(), _own_nice())[1]) for _ in range(2)]
            assert [future.result(timeout=10) for future in niced] == [before, before]
    refusals = [r for r in caplog.records if "could not lower" in r.getMessage()]
    assert len(refusals) == 1
