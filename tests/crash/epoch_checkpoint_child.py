"""Child of test_epoch_checkpoint_crash.py: rewrites a leader-epoch-checkpoint through the
leader epoch cache, over and over, until it is killed.

Usage: epoch_checkpoint_child.py <partition dir> <first step>

Step k leaves the cache holding :func:`entries_at` (k) and, once the write returned, prints
``k``; the parent kills it at a random moment and checks the file holds the entries of the
last step printed or of the one after it (in progress), whole.
"""

from __future__ import annotations

import sys
from pathlib import Path

from stratalog.server.storage.checkpoints import LeaderEpochCheckpointFile
from stratalog.server.storage.leader_epoch_cache import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    LeaderEpochCache,
)

# Enough entries that one file spans several pages (a torn write would show).
ENTRIES_MAX = 400


def entries_at(step: int) -> list[tuple[int, int]]:
    """The cache's entries after step ``step``: epochs 0..n-1 with offsets that encode the step,
    n cycling so that steps both grow and shrink the file."""
    count = 1 + (step * 37) % ENTRIES_MAX
    return [(epoch, epoch * 1_000_000_007 + step) for epoch in range(count)]


def main() -> None:
    directory = Path(sys.argv[1])
    step = int(sys.argv[2])
    checkpoint = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT_FILE)
    print("ready", flush=True)
    while True:
        # A whole history written at once (one rewrite of the file), as a follower's append
        # of several epochs does.
        LeaderEpochCache(checkpoint).assign_all(entries_at(step))
        print(step, flush=True)
        step += 1


if __name__ == "__main__":
    main()
