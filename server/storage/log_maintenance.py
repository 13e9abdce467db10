"""The LogManager's background jobs: flush, retention, producer expiry, checkpoints, deletions.

Kafka's ``LogManager`` schedules its periodic tasks on a scheduler
(``core/src/main/scala/kafka/log/LogManager.scala``, ``startup``: ``kafka-log-retention``,
``kafka-log-flusher``, ``kafka-recovery-point-checkpoint``, ``kafka-log-start-offset-checkpoint``,
``kafka-delete-logs``; ``removeExpiredProducers`` in ``UnifiedLog``). Here one
:class:`LogMaintenance` keeps their schedule and runs every job that is due in one bounded pass,
:meth:`LogMaintenance.run` (``LogManager.run_maintenance``): a server calls it from its own
task, an embedded manager from the daemon thread :meth:`LogMaintenance.start_background`
starts. Each job has its own interval (``log_defaults.py``); the pass's limits (segments
deleted, directories removed) say ``more_work`` when they stopped a job early::

    flush.ms            flush the logs whose last flush is older than their flush.ms
    retention           every log.retention.check.interval.ms (sooner while a backlog remains)
    producer expiry     every producer.id.expiration.check.interval.ms
    .deleted segments   those whose file.delete.delay.ms passed (every pass)
    checkpoints         recovery points, log start offsets, high watermarks: each its interval
    -delete dirs        removed file.delete.delay.ms after the topic deletion, a few per pass
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import LogClosedError, StorageError
from .log_defaults import ServerLogSettings
from .log_dirs import (
    LogDirState,
    TopicPartition,
    log_start_offset_entries,
    write_high_watermark_checkpoint,
)

if TYPE_CHECKING:
    from .partition_log import PartitionLog

__all__ = ["DEFAULT_MAINTENANCE_INTERVAL_MS", "LogMaintenance", "MaintenanceReport"]

log = logging.getLogger(__name__)

# How often the embedded background thread runs a maintenance pass; each job keeps its own
# (longer) interval, so this is only the resolution of their schedules.
DEFAULT_MAINTENANCE_INTERVAL_MS = 1000


@dataclass
class MaintenanceReport:
    """What one :meth:`LogManager.run_maintenance` pass did (counts, for logs and metrics).

    ``more_work`` is True when a per-pass limit stopped a job early; ``errors`` holds one line
    per failure (a failing partition does not stop the pass for the others).
    """

    now_ms: int
    flushed_logs: int = 0
    retention_checked: bool = False
    segments_deleted: int = 0
    log_start_offsets_moved: int = 0
    files_deleted: int = 0  # segments whose .deleted files were removed
    recovery_point_checkpoints_written: int = 0
    log_start_offset_checkpoints_written: int = 0
    high_watermark_checkpoints_written: int = 0
    deleted_dirs_removed: int = 0
    producers_expired: int = 0  # producer ids forgotten after producer.id.expiration.ms
    more_work: bool = False
    errors: list[str] = field(default_factory=list)


class LogMaintenance:
    """The schedule of a LogManager's background jobs, the passes that run them, its thread.

    Holds: the next due time of each job, whether retention left a backlog, the ``-delete``
    directories waiting for removal, the pass lock and the embedded background thread. Reads
    the manager's logs through ``logs`` (its published dict, lock-free) and ``placed_logs``
    (each log with its log directory, taken under the manager's lock).

    Invariants: a job's next due time only moves forward; a ``-delete`` directory is in the
    pending list until it is removed (a failed removal puts it back, due now).

    Crash behaviour: every job is idempotent and re-run after a restart: a flush not done is
    a recovery, a checkpoint not written an older one (recovery starts earlier), a ``-delete``
    directory not removed is found again at open (``log_dirs.scan_log_dirs``).

    Concurrency: :meth:`run` passes never overlap (``lock``; the manager's close takes it too,
    so a pass never runs against closed logs); the deleted-directory list is guarded by the
    manager's lock (``manager_lock``); a failing partition is logged and reported, and the pass
    goes on. Blocking: file I/O, fsyncs.
    """

    def __init__(
        self,
        dirs: list[LogDirState],
        settings: ServerLogSettings,
        time_ms: Callable[[], int],
        manager_lock: threading.RLock,
        logs: Callable[[], Mapping[TopicPartition, PartitionLog]],
        placed_logs: Callable[[], list[tuple[TopicPartition, PartitionLog, Path]]],
        is_closed: Callable[[], bool],
    ) -> None:
        self._dirs = dirs
        self._settings = settings
        self._time_ms = time_ms
        self._lock = manager_lock
        self._logs = logs
        self._placed_logs = placed_logs
        self._is_closed = is_closed
        self._deleted_dirs: list[tuple[int, Path]] = []  # (due ms, directory)
        # Passes do not overlap; the manager's close waits for the one under way.
        self.lock = threading.Lock()
        self.background: threading.Thread | None = None
        self._stop_background = threading.Event()
        now_ms = time_ms()
        self._next_retention_ms = now_ms + settings.retention_check_interval_ms
        self._next_producer_expiration_ms = (
            now_ms + settings.producer_id_expiration_check_interval_ms
        )
        self._retention_backlog = False  # a bounded pass left deletable segments behind
        self._next_flush_check_ms = now_ms
        self._next_recovery_point_checkpoint_ms = (
            now_ms + settings.flush_offset_checkpoint_interval_ms
        )
        self._next_log_start_offset_checkpoint_ms = (
            now_ms + settings.flush_start_offset_checkpoint_interval_ms
        )
        self._next_high_watermark_checkpoint_ms = (
            now_ms + settings.replica_high_watermark_checkpoint_interval_ms
        )

    def schedule_dir_removal(self, due_ms: int, directory: Path) -> None:
        """Remove the ``-delete`` directory ``directory`` in the first pass at or after
        ``due_ms``. Under the manager's lock (or before the manager is shared)."""
        self._deleted_dirs.append((due_ms, directory))

    def run(self, now_ms: int | None = None) -> MaintenanceReport:
        """One bounded pass of every background job that is due at ``now_ms``.

        Jobs: ``flush.ms`` flushes (every log at most once), retention (every
        ``log.retention.check.interval.ms``), the two checkpoints (their intervals), removal
        of ``-delete`` directories whose delay passed (at most ``log.delete.dirs.per.pass.max``).
        A failing partition is logged and reported; the pass goes on. Passes do not overlap
        (a second caller waits). Safe to call from a worker thread while others append.
        """
        now = self._time_ms() if now_ms is None else now_ms
        report = MaintenanceReport(now_ms=now)
        with self.lock:
            if self._is_closed():
                return report
            logs = {tp: lg for tp, lg in self._logs().items() if not lg.is_offline}
            self._maybe_flush(logs, now, report)
            self._maybe_delete_old_segments(logs, now, report)
            self._maybe_expire_producers(logs, now, report)
            self._delete_pending_segments(logs, now, report)
            self.write_checkpoints(now, report, force=False)
            self._maybe_remove_deleted_dirs(now, report)
        return report

    def _maybe_delete_old_segments(
        self, logs: dict[TopicPartition, PartitionLog], now_ms: int, report: MaintenanceReport
    ) -> None:
        """Retention, every ``log.retention.check.interval.ms``, bounded per pass."""
        if now_ms < self._next_retention_ms and not self._retention_backlog:
            return
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + self._settings.retention_check_interval_ms
        report.retention_checked = True
        budget = self._settings.retention_segments_per_pass_max
        self._retention_backlog = False
        for topic_partition, partition_log in sorted(logs.items()):
            if budget <= 0:
                report.more_work = self._retention_backlog = True
                break
            start_before = partition_log.log_start_offset
            try:
                plan = partition_log.delete_old_segments(now_ms, max_segments=budget)
            except LogClosedError:
                continue
            except Exception as exc:
                log.exception("retention of %s-%d failed", *topic_partition)
                report.errors.append(f"retention {topic_partition[0]}-{topic_partition[1]}: {exc}")
                continue
            budget -= len(plan.segments)
            report.segments_deleted += len(plan.segments)
            if partition_log.log_start_offset != start_before:
                report.log_start_offsets_moved += 1
            if plan.limited:
                report.more_work = self._retention_backlog = True

    def _maybe_expire_producers(
        self, logs: dict[TopicPartition, PartitionLog], now_ms: int, report: MaintenanceReport
    ) -> None:
        """Forget producers idle for ``producer.id.expiration.ms``, every
        ``producer.id.expiration.check.interval.ms`` (Kafka's ``removeExpiredProducers`` job)."""
        if now_ms < self._next_producer_expiration_ms:
            return
        self._next_producer_expiration_ms = (
            now_ms + self._settings.producer_id_expiration_check_interval_ms
        )
        for topic_partition, partition_log in logs.items():
            try:
                report.producers_expired += len(partition_log.remove_expired_producers(now_ms))
            except Exception as exc:
                log.exception("expiring producers of %s-%d failed", *topic_partition)
                report.errors.append(f"expire {topic_partition[0]}-{topic_partition[1]}: {exc}")

    def _delete_pending_segments(
        self, logs: dict[TopicPartition, PartitionLog], now_ms: int, report: MaintenanceReport
    ) -> None:
        """Delete the ``.deleted`` segments whose ``file.delete.delay.ms`` has passed."""
        for topic_partition, partition_log in logs.items():
            if not partition_log.pending_deletes:
                continue
            try:
                report.files_deleted += partition_log.maybe_delete_pending(now_ms)
            except Exception as exc:
                log.exception("deleting old segments of %s-%d failed", *topic_partition)
                report.errors.append(f"delete {topic_partition[0]}-{topic_partition[1]}: {exc}")

    def _maybe_flush(
        self, logs: dict[TopicPartition, PartitionLog], now_ms: int, report: MaintenanceReport
    ) -> None:
        if now_ms < self._next_flush_check_ms:
            return
        self._next_flush_check_ms = now_ms + self._settings.flush_scheduler_interval_ms
        for topic_partition, partition_log in logs.items():
            flush_ms = partition_log.config.flush_ms
            if now_ms - partition_log.last_flush_ms < flush_ms:
                continue
            if partition_log.recovery_point >= partition_log.log_end_offset:
                continue
            try:
                partition_log.flush()
                report.flushed_logs += 1
            except LogClosedError:
                continue  # deleted or closed meanwhile
            except Exception as exc:
                log.exception("flush of %s-%d failed", *topic_partition)
                report.errors.append(f"flush {topic_partition[0]}-{topic_partition[1]}: {exc}")

    def write_checkpoints(
        self, now_ms: int, report: MaintenanceReport, *, force: bool
    ) -> set[Path]:
        """Write the checkpoints that are due (all with ``force``); returns the failed dirs."""
        write_recovery_points = force or now_ms >= self._next_recovery_point_checkpoint_ms
        write_log_start_offsets = force or now_ms >= self._next_log_start_offset_checkpoint_ms
        write_high_watermarks = force or now_ms >= self._next_high_watermark_checkpoint_ms
        if write_high_watermarks:
            self._next_high_watermark_checkpoint_ms = (
                now_ms + self._settings.replica_high_watermark_checkpoint_interval_ms
            )
        if write_recovery_points:
            self._next_recovery_point_checkpoint_ms = (
                now_ms + self._settings.flush_offset_checkpoint_interval_ms
            )
        if write_log_start_offsets:
            self._next_log_start_offset_checkpoint_ms = (
                now_ms + self._settings.flush_start_offset_checkpoint_interval_ms
            )
        failed: set[Path] = set()
        if not (write_recovery_points or write_log_start_offsets or write_high_watermarks):
            return failed
        snapshot = self._placed_logs()
        for state in self._dirs:
            if state.offline:  # nothing more is written there: the next start recovers it
                failed.add(state.path)
                continue
            in_dir = [(tp, lg) for tp, lg, directory in snapshot if directory == state.path]
            try:
                if write_recovery_points:
                    state.recovery_points.write({tp: lg.recovery_point for tp, lg in in_dir})
                    report.recovery_point_checkpoints_written += 1
                if write_log_start_offsets:
                    state.log_start_offsets.write(log_start_offset_entries(in_dir))
                    report.log_start_offset_checkpoints_written += 1
                if write_high_watermarks and write_high_watermark_checkpoint(state, in_dir):
                    report.high_watermark_checkpoints_written += 1
            except StorageError as exc:
                log.exception("writing the checkpoints of %s failed", state.path)
                report.errors.append(f"checkpoints of {state.path}: {exc}")
                failed.add(state.path)
        return failed

    def _maybe_remove_deleted_dirs(self, now_ms: int, report: MaintenanceReport) -> None:
        with self._lock:
            due = [item for item in self._deleted_dirs if item[0] <= now_ms]
            limit = self._settings.deleted_dirs_per_pass_max
            if len(due) > limit:
                report.more_work = True
                due = sorted(due)[:limit]
            for item in due:
                self._deleted_dirs.remove(item)
        for _, directory in due:
            try:
                shutil.rmtree(directory)
                report.deleted_dirs_removed += 1
            except FileNotFoundError:
                continue
            except OSError as exc:
                log.error("cannot remove deleted partition directory %s: %s", directory, exc)
                report.errors.append(f"remove {directory}: {exc}")
                with self._lock:  # try again next pass
                    self._deleted_dirs.append((now_ms, directory))

    @property
    def pending_deleted_dirs(self) -> list[Path]:
        """The ``-delete`` directories not removed yet."""
        with self._lock:
            return [directory for _, directory in sorted(self._deleted_dirs)]

    def start_background(self, interval_ms: int, run_pass: Callable[[], object]) -> None:
        """Call ``run_pass`` (the manager's ``run_maintenance``, which ends in :meth:`run`)
        every ``interval_ms`` in a daemon thread until :meth:`stop_background`. The manager
        checks the interval and that it is open, under its lock.

        Raises:
            StorageError: already started.
        """
        if self.background is not None:
            raise StorageError("the background maintenance thread is already running")
        self._stop_background.clear()
        thread = threading.Thread(
            target=self._background_loop,
            args=(interval_ms / 1000, run_pass),
            name="log-manager-maintenance",
            daemon=True,
        )
        self.background = thread
        thread.start()

    def _background_loop(self, interval_s: float, run_pass: Callable[[], object]) -> None:
        while not self._stop_background.wait(interval_s):
            try:
                run_pass()
            except Exception:  # the thread must outlive a bad pass
                log.exception("background maintenance pass failed")

    def stop_background(self) -> None:
        """Stop the background thread (if running) and wait for its pass to end."""
        thread = self.background
        if thread is None:
            return
        self._stop_background.set()
        thread.join()
        self.background = None
