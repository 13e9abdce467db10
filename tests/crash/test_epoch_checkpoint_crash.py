"""SIGKILL during leader-epoch-checkpoint rewrites: the file is always the old or the new one.

A child rewrites the checkpoint through the cache in a loop (epoch_checkpoint_child.py) and is
killed at random moments, many times. After each kill the file must parse and hold exactly the
entries of the last step the child acknowledged, or of the next one (the write in progress
when it died reached its rename), never a torn or mixed file. Process kills keep the page cache:
this checks the temp-file-and-rename protocol, not power loss (``durable.py`` argues that).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stratalog.server.storage.checkpoints import LeaderEpochCheckpointFile
from stratalog.server.storage.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT_FILE

sys.path.insert(0, str(Path(__file__).parent))
from epoch_checkpoint_child import entries_at

CHILD = Path(__file__).parent / "epoch_checkpoint_child.py"
KILLS = int(os.environ.get("STRATALOG_EPOCH_CRASH_KILLS", "25"))
READY_TIMEOUT_S = 60


def run_child(directory: Path, first_step: int, rng: random.Random) -> int | None:
    """Start the child at ``first_step``, kill it at a random moment; the last step it
    acknowledged (None: none)."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), str(first_step)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    acked: list[int] = []
    ready = threading.Event()

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line == "ready\n":
                ready.set()
            elif line.endswith("\n"):  # a line cut by the kill was never acknowledged
                acked.append(int(line))

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    if not ready.wait(READY_TIMEOUT_S):
        process.kill()
        process.wait()
        pytest.fail(f"the child never became ready: {process.stderr.read()}")  # type: ignore[union-attr]
    time.sleep(rng.uniform(0.0, 0.15))
    if process.poll() is not None:
        pytest.fail(f"the child died by itself: {process.stderr.read()}")  # type: ignore[union-attr]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    reader.join()
    return acked[-1] if acked else None


@pytest.mark.slow
def test_a_killed_checkpoint_write_leaves_the_old_or_the_new_file(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("STRATALOG_CRASH_SEED", "17")))
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    step = 0
    previous: int | None = None  # the step the file held before this child started
    for _ in range(KILLS):
        last = run_child(tmp_path, step, rng)
        found = checkpoint.read()  # raises CorruptCheckpointError on a torn file
        if last is None:
            # Killed before its first acknowledgement: the file it found, or its first step.
            candidates = {previous: entries_at(previous) if previous is not None else [],
                          step: entries_at(step)}
        else:
            candidates = {last: entries_at(last), last + 1: entries_at(last + 1)}
        matches = [k for k, entries in candidates.items() if entries == found]
        assert matches, (
            f"after a kill (last acknowledged step {last}) the checkpoint holds "
            f"{len(found)} entries matching none of steps {sorted(k for k in candidates if k is not None)}"
        )
        held = matches[0]
        previous = held
        step = (held if held is not None else step) + 1
    # Leftover temporary files are harmless (the next write truncates them); nothing else.
    names = {p.name for p in tmp_path.iterdir()}
    assert names <= {LEADER_EPOCH_CHECKPOINT_FILE, LEADER_EPOCH_CHECKPOINT_FILE + ".tmp"}
