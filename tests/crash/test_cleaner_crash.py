"""Crash points of a cleaning's segment replacement (Kafka LocalLog.replaceSegments,
docs/kafka-behaviours.md#segment-replacement; LogLoader.removeTempFilesAndCollectSwapFiles and
LogLoader.load, docs/kafka-behaviours.md#log-loading).

A cleaning writes ``.cleaned`` files, renames them ``.swap``, renames the old segments
``.deleted`` and the ``.swap`` files into place (PartitionLog.replace_segments). Whatever the
moment a crash stops that, the log reopened (recovery passes 1 to 3) must hold exactly the
records of before the cleaning or exactly those of after it.

Two tests: every prefix of the replacement's file renames (each single ``os.replace`` is a
crash point: recorded during a real cleaning, replayed on a copy of the directory taken just
before the first rename, plus ``.cleaned`` files cut short as a crash while writing them
leaves them); and a child process killed with SIGKILL at each named step of the replacement.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.storage import PartitionLog
from stratalog.server.storage.cleaner import Cleaner, cleanable_range
from stratalog.server.storage.offset_map import OffsetMap

T0 = 1_700_000_000_000
# segment.bytes holds the whole log: the cleaning is one group, one replacement. (A cleaning
# of several groups replaces each in turn: a crash between two leaves the first group cleaned
# and the next not, each group before or after; test_a_crash_between_groups covers it.)
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "1048576", "file.delete.delay.ms": "0"}


def build(directory: Path, config: dict[str, str] = CONFIG, roll_every: int = 20) -> None:
    """A compacted log of segments of ``roll_every`` records, with many overwritten keys and
    a tombstone."""
    log = PartitionLog.open(directory, config, time_ms=lambda: T0)
    for i in range(120):
        key = b"k%d" % (i % 9)
        log.append(build_batch([(T0 + i, key, None if i == 100 else b"v%d" % i, ())]))
        if i % roll_every == roll_every - 1:
            log.roll()
    log.close()


def reopen(directory: Path, config: dict[str, str] = CONFIG) -> PartitionLog:
    """As after a crash: an unclean open recovering every segment."""
    return PartitionLog.open(directory, config, time_ms=lambda: T0, had_clean_shutdown=False,
                             recovery_point=0)


def read_all(directory: Path, config: dict[str, str] = CONFIG
             ) -> list[tuple[int, int, bytes | None, bytes | None]]:
    log = reopen(directory, config)
    try:
        found = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:
            fetched = log.fetch(offset, 1 << 20)
            for _, batch_records in iter_batches(fetched.data):
                found.extend((r.offset, r.timestamp, r.key, r.value) for r in batch_records
                             if r.offset >= offset)
            if fetched.next_offset == offset:
                break
            offset = fetched.next_offset
        return found
    finally:
        log.close()


def clean_once(directory: Path, step_hook=None, config: dict[str, str] = CONFIG) -> None:
    log = PartitionLog.open(directory, config, time_ms=lambda: T0)
    cleanable = cleanable_range(log, None, T0)
    cleaner = Cleaner(OffsetMap(1 << 14), step_hook=step_hook)
    cleaner.clean(log, cleanable.first_dirty_offset, cleanable.first_uncleanable_offset)
    log.close()


@pytest.fixture
def reference(tmp_path: Path) -> tuple[Path, list, list]:
    original = tmp_path / "original" / "t-0"
    build(original)
    before = read_all(original)
    cleaned = tmp_path / "cleaned" / "t-0"
    shutil.copytree(original, cleaned)
    clean_once(cleaned)
    after = read_all(cleaned)
    assert before != after and len(after) < len(before)
    return original, before, after


def test_every_rename_prefix_recovers_to_before_or_after(
    tmp_path: Path, reference, monkeypatch: pytest.MonkeyPatch
) -> None:
    original, before, after = reference
    work = tmp_path / "work" / "t-0"
    shutil.copytree(original, work)
    snapshot = tmp_path / "at-swap" / "t-0"
    renames: list[tuple[str, str]] = []
    real_replace = os.replace

    def recording_replace(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)  # an index file never created raises here
        names = (os.path.basename(src), os.path.basename(dst))
        if snapshot.exists() and any(n.endswith((".cleaned", ".swap", ".deleted"))
                                     for n in names):
            renames.append(names)

    def hook(step: str) -> None:
        if step == "swap" and not snapshot.exists():
            shutil.copytree(work, snapshot)  # the .cleaned files, written and flushed

    monkeypatch.setattr(os, "replace", recording_replace)
    clean_once(work, hook)
    monkeypatch.setattr(os, "replace", real_replace)
    assert read_all(work) == after
    swap_steps = [r for r in renames if r[1].endswith(".swap")]
    assert swap_steps and any(r[1].endswith(".deleted") for r in renames)
    outcomes = []
    for prefix in range(len(renames) + 1):
        crashed = tmp_path / f"crash-{prefix}" / "t-0"
        shutil.copytree(snapshot, crashed)
        for src, dst in renames[:prefix]:
            real_replace(crashed / src, crashed / dst)
        found = read_all(crashed)
        assert found in (before, after), f"a crash after {prefix} renames mixed the records"
        outcomes.append(found == after)
        assert not [n for n in os.listdir(crashed) if n.endswith((".cleaned", ".swap"))]
    # Before the first .swap is complete: rolled back; from the last .swap rename on: done.
    assert outcomes[0] is False and outcomes[-1] is True
    assert outcomes == sorted(outcomes)  # never back to "before" once "after"


def test_a_crash_while_writing_cleaned_files_rolls_back(tmp_path: Path, reference) -> None:
    original, before, _ = reference
    work = tmp_path / "work" / "t-0"
    shutil.copytree(original, work)
    snapshot = tmp_path / "at-swap" / "t-0"

    def hook(step: str) -> None:
        if step == "swap" and not snapshot.exists():
            shutil.copytree(work, snapshot)

    clean_once(work, hook)
    cleaned = sorted(n for n in os.listdir(snapshot) if n.endswith(".log.cleaned"))
    assert cleaned
    for cut in (0, 61, 200):
        crashed = tmp_path / f"cut-{cut}" / "t-0"
        shutil.copytree(snapshot, crashed)
        for name in cleaned:
            with open(crashed / name, "r+b") as file:
                file.truncate(min(cut, os.path.getsize(crashed / name)))
        assert read_all(crashed) == before


CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[3])
    from test_cleaner_crash import clean_once
    from pathlib import Path
    target = int(sys.argv[2])
    calls = []
    def hook(step):
        calls.append(step)
        if len(calls) == target:
            print("at " + step, flush=True)
            time.sleep(600)
    clean_once(Path(sys.argv[1]), hook)
    print("done", flush=True)
""")


def test_sigkill_at_each_step_of_the_replacement(tmp_path: Path, reference) -> None:
    original, before, after = reference
    seen_steps = []
    step = 1
    while True:
        work = tmp_path / f"kill-{step}" / "t-0"
        shutil.copytree(original, work)
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(work), str(step), str(Path(__file__).parent)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        line = child.stdout.readline().decode().strip()
        if line == "done":
            child.wait(timeout=60)
            assert read_all(work) == after
            break
        assert line.startswith("at "), child.stderr.read().decode()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
        seen_steps.append(line[3:])
        found = read_all(work)
        expected = before if line == "at swap" else after
        assert found == expected, f"SIGKILL {line}"
        step += 1
    assert seen_steps[0] == "swap" and seen_steps[-1] == "rename"
    assert any(s.startswith("delete ") for s in seen_steps)


def test_a_crash_between_groups_keeps_each_group_before_or_after(tmp_path: Path) -> None:
    config = dict(CONFIG, **{"segment.bytes": "1500"})  # groups of two segments
    original = tmp_path / "original" / "t-0"
    build(original, config, roll_every=10)
    before = read_all(original, config)
    steps: list[str] = []
    work = tmp_path / "count" / "t-0"
    shutil.copytree(original, work)
    clean_once(work, steps.append, config)
    after = read_all(work, config)
    assert steps.count("swap") > 1
    latest = {key: value for _, _, key, value in before}
    # The groups' first base offsets: each "swap" is followed by its old segments' deletes.
    group_starts = []
    for step in steps:
        if step == "swap":
            group_starts.append(None)
        elif step.startswith("delete "):
            base = int(step.split()[1])
            group_starts[-1] = base if group_starts[-1] is None else min(group_starts[-1], base)
    assert len(group_starts) > 1 and steps.count("rename") == len(group_starts)
    assert any(steps.count(f"delete {b}") for b in range(1, 120))  # groups of 2+ segments
    for index, step in enumerate(steps):
        crashed = tmp_path / f"crash-{index}" / "t-0"
        shutil.copytree(original, crashed)

        def hook(name: str, stop_at: int = index) -> None:
            if hook.calls == stop_at:
                raise KeyboardInterrupt  # the "crash": nothing after it runs
            hook.calls += 1
        hook.calls = 0
        with pytest.raises(KeyboardInterrupt):
            clean_once(crashed, hook, config)
        found = read_all(crashed, config)
        assert {key: value for _, _, key, value in found} == latest
        # Groups are replaced in offset order: some prefix of the log is cleaned (as after
        # the whole cleaning), the rest as before, the cut at a group boundary. No mix.
        cuts = [*group_starts, 1 << 62]
        assert any(
            found == [r for r in after if r[0] < cut] + [r for r in before if r[0] >= cut]
            for cut in cuts
        ), f"a crash at step {index} ({step}) left a mix of cleaned and uncleaned records"
