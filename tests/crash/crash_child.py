"""The process the crash loop kills: appends through the embedded LogManager and reports each
acknowledged append on stdout, one line per append, written only after ``append`` returned.

Usage: python crash_child.py <log dir> <run id>

Lines: ``ready`` once the manager is open, then ``<topic> <first offset> <seq> <count>``. The
records of append ``seq`` have the values ``b"<run id>:<seq>:<i>"``, so the parent can check
every acknowledged record byte for byte. Between appends the child flushes, runs maintenance
(checkpoints, retention, delayed deletes) and moves a log start offset, so that kills land in
those too.
"""

from __future__ import annotations

import random
import sys
import time

from stratalog.records.builder import build_batch
from stratalog.server.storage.log_manager import LogManager

# Shared with the parent (test_crash_loop.py imports these).
DEFAULTS = {
    "log.segment.bytes": "4096",
    "log.index.interval.bytes": "256",
    "log.flush.offset.checkpoint.interval.ms": "20",
    "log.flush.start.offset.checkpoint.interval.ms": "20",
    "log.retention.check.interval.ms": "20",
    "log.segment.delete.delay.ms": "10",
}
PLAIN_TOPIC = "plain"
PLAIN_CONFIGS = {"retention.ms": "-1"}
RETAINED_TOPIC = "retained"
RETAINED_CONFIGS = {"segment.bytes": "2048", "retention.bytes": "8192"}


def values(run_id: int, seq: int, count: int) -> list[bytes]:
    return [b"%d:%d:%d" % (run_id, seq, i) for i in range(count)]


def main() -> None:
    log_dir, run_id = sys.argv[1], int(sys.argv[2])
    rng = random.Random(run_id)
    manager = LogManager.open([log_dir], defaults=DEFAULTS)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    base_ms = time.time_ns() // 1_000_000
    seq = 0
    while True:
        topic = RETAINED_TOPIC if seq % 5 == 4 else PLAIN_TOPIC
        count = rng.randint(1, 3)
        batch = build_batch(
            [(base_ms + seq, None, value, ()) for value in values(run_id, seq, count)]
        )
        partition_log = manager.get_log(topic, 0)
        info = partition_log.append(batch)
        if seq % 7 == 0:
            partition_log.flush()
        out.write(f"{topic} {info.first_offset} {seq} {count}\n")
        out.flush()
        if seq % 25 == 0:
            manager.run_maintenance()
        if seq % 40 == 39:
            manager.delete_records(RETAINED_TOPIC, 0, -1)
        seq += 1


if __name__ == "__main__":
    main()
