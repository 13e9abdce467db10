"""The SIGKILL crash loop: a child appends through the embedded LogManager and reports every
acknowledged append; it is killed at random moments, many times. After each kill the log
directory is opened here (an unclean shutdown, so recovery runs) and checked:

* every acknowledged record is present and intact (values compared byte for byte), except
  those below the log start offset of the topic whose start the child moves;
* every batch from the log start to the log end has a valid CRC and offsets follow each other,
  and nothing is readable at or after the log end;
* an append continues at the log end offset.

The loop runs for ``STRATALOG_CRASH_SECONDS`` seconds (default 35; set more for a soak).
Process kills leave the page cache intact, so an acknowledged append must survive whether or
not it was flushed: this checks recovery's handling of torn writes, untrimmed preallocated
indexes, stale checkpoints and interrupted deletions, not power loss.
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

from stratalog.records.batch import validate_batch
from stratalog.records.builder import build_batch
from stratalog.records.reader import iter_batches
from stratalog.server.storage.log_manager import LogManager

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import (
    DEFAULTS,
    PLAIN_CONFIGS,
    PLAIN_TOPIC,
    RETAINED_CONFIGS,
    RETAINED_TOPIC,
    values,
)

CHILD = Path(__file__).parent / "crash_child.py"
BUDGET_S = float(os.environ.get("STRATALOG_CRASH_SECONDS", "35"))
READY_TIMEOUT_S = 60


def read_all(manager: LogManager, topic: str) -> dict[int, bytes | None]:
    """offset -> value of every record from the log start to the log end, checking batches."""
    partition_log = manager.get_log(topic, 0)
    start, end = partition_log.log_start_offset, partition_log.log_end_offset
    records: dict[int, bytes | None] = {}
    offset = start
    expected_next: int | None = None
    while offset < end:
        data = partition_log.read(offset, 1 << 20)
        assert data, f"{topic}: nothing readable at offset {offset} below the log end {end}"
        position = 0
        for batch in _split_batches(data):
            header = validate_batch(batch)  # size, magic and CRC
            if expected_next is not None:
                assert header.base_offset == expected_next, (
                    f"{topic}: batch at {header.base_offset} after one ending at {expected_next}"
                )
            expected_next = header.base_offset + header.last_offset_delta + 1
            position += len(batch)
        for _, batch_records in iter_batches(data):
            for record in batch_records:
                records[record.offset] = record.value
        offset = expected_next if expected_next is not None else end
    assert partition_log.read(end, 1 << 20) == b""
    return {o: v for o, v in records.items() if o >= start}


def _split_batches(data: bytes) -> list[bytes]:
    batches = []
    position = 0
    while position < len(data):
        size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
        batches.append(data[position : position + size])
        position += size
    return batches


def run_child(log_dir: Path, run_id: int, rng: random.Random) -> list[tuple[str, int, int, int]]:
    """Start the child, kill it at a random moment, return its acknowledged appends."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), str(log_dir), str(run_id)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line == "ready\n":
                ready.set()
            elif line.endswith("\n"):  # a line cut by the kill was never acknowledged
                lines.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    if not ready.wait(READY_TIMEOUT_S):
        process.kill()
        process.wait()
        pytest.fail(f"the child never became ready: {process.stderr.read()}")  # type: ignore[union-attr]
    time.sleep(rng.uniform(0.0, 0.4))
    if process.poll() is not None:
        pytest.fail(f"the child died by itself: {process.stderr.read()}")  # type: ignore[union-attr]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    reader.join()
    acked = []
    for line in lines:
        topic, first_offset, seq, count = line.split()
        acked.append((topic, int(first_offset), int(seq), int(count)))
    return acked


@pytest.mark.slow
def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    log_dir = tmp_path / "data"
    with LogManager.open([log_dir], defaults=DEFAULTS) as manager:
        manager.create_topic(PLAIN_TOPIC, 1, PLAIN_CONFIGS)
        manager.create_topic(RETAINED_TOPIC, 1, RETAINED_CONFIGS)
    rng = random.Random(int(os.environ.get("STRATALOG_CRASH_SEED", "1234")))
    expected: dict[str, dict[int, bytes]] = {PLAIN_TOPIC: {}, RETAINED_TOPIC: {}}
    deadline = time.monotonic() + BUDGET_S
    kills = 0
    acked_total = 0
    while time.monotonic() < deadline or kills < 3:
        run_id = kills + 1
        acked = run_child(log_dir, run_id, rng)
        kills += 1
        acked_total += len(acked)
        for topic, first_offset, seq, count in acked:
            for i, value in enumerate(values(run_id, seq, count)):
                expected[topic][first_offset + i] = value
        manager = LogManager.open([log_dir], defaults=DEFAULTS)
        try:
            assert manager.had_clean_shutdown == {log_dir.resolve(): False}
            assert manager.recovered_segments >= 1  # recovery ran (the active segments)
            for topic in (PLAIN_TOPIC, RETAINED_TOPIC):
                partition_log = manager.get_log(topic, 0)
                present = read_all(manager, topic)
                start = partition_log.log_start_offset
                if topic == PLAIN_TOPIC:
                    assert start == 0
                missing = {
                    offset: value
                    for offset, value in expected[topic].items()
                    if offset >= start and present.get(offset) != value
                }
                assert not missing, (
                    f"kill {kills}: {len(missing)} acknowledged records of {topic} lost or "
                    f"changed, e.g. {sorted(missing.items())[:3]}; log [{start}, "
                    f"{partition_log.log_end_offset})"
                )
                end = partition_log.log_end_offset
                info = partition_log.append(build_batch([(time.time_ns() // 1_000_000, None, b"parent", ())]))
                assert info.first_offset == end
                expected[topic][end] = b"parent"
        finally:
            manager.close()
    print(f"{kills} kills, {acked_total} acknowledged appends checked")
    assert acked_total > 0
