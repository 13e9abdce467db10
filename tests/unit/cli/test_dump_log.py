"""`stratalog dump-log`: Kafka's DumpLogSegments output, index verification, exit codes."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from stratalog.cli.dump_log import DumpOptions, dump_files
from stratalog.cli.main import main
from stratalog.records import BatchBuilder, Compression, build_batch
from stratalog.records.batch import set_base_offset
from stratalog.records.control import ControlRecordType, EndTransactionMarker
from stratalog.records.crc import crc32c
from stratalog.server.storage import PartitionLog

# docs/kafka-behaviours.md#records: two records, ts 1700000000000 and ...005, CRC 0xd1f723ec.
TWO_RECORDS = bytes.fromhex(
    "00000000000000000000004a0000000002d1f723ec0000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000216000000010a68656c6c6f0018000a02026b0a746865726500"
)


def dump(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["dump-log", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_reference_example_is_printed_exactly_as_kafka_does(tmp_path, capsys):
    # docs/kafka-behaviours.md#dump-log gives Kafka's own output for this batch.
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(TWO_RECORDS)
    code, out, err = dump(capsys, "--print-data-log", str(log))
    assert code == 0, err
    assert out.splitlines() == [
        f"Dumping {log}",
        "Log starting offset: 0",
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000005 size: 86 "
        "magic: 2 compresscodec: none crc: 3522634732 isvalid: true",
        "| offset: 0 CreateTime: 1700000000000 keySize: -1 valueSize: 5 sequence: -1 "
        "headerKeys: [] payload: hello",
        "| offset: 1 CreateTime: 1700000000005 keySize: 1 valueSize: 5 sequence: -1 "
        "headerKeys: [] key: k payload: there",
    ]


def test_kafka_written_fixtures_dump_with_valid_crcs(kafka_written_dir, capsys):
    files = sorted(kafka_written_dir.glob("*.log"))
    code, out, err = dump(capsys, "--deep-iteration", *map(str, files))
    assert code == 0, err
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert len(batch_lines) == 4
    assert all(line.endswith("isvalid: true") for line in batch_lines)
    assert "lastOffset: 3 count: 3" in batch_lines[1]
    assert "CreateTime: 1726045957397 size: 240" in batch_lines[1]
    assert "Log starting offset: 1" in out  # metadata-b-00000000000000000001.log
    assert sum(line.startswith("| offset:") for line in out.splitlines()) == 7


def test_trailing_garbage_is_reported_and_batches_before_it_print(tmp_path, capsys):
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(TWO_RECORDS + b"\x00\x01\x02" * 10)
    code, out, _ = dump(capsys, str(log))
    assert code == 0
    assert "baseOffset: 0 lastOffset: 1" in out
    assert out.splitlines()[-1] == f"Found 30 invalid bytes at the end of {log.name}"


def test_crc_mismatch_prints_isvalid_false(tmp_path, capsys):
    corrupt = bytearray(TWO_RECORDS)
    corrupt[-2] ^= 0x55
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(bytes(corrupt))
    code, out, _ = dump(capsys, str(log))
    assert code == 0
    assert out.splitlines()[2].endswith("isvalid: false")


def test_a_size_below_the_minimum_is_reported_not_a_traceback(tmp_path, capsys):
    bad = bytearray(TWO_RECORDS)
    bad[8:12] = (5).to_bytes(4, "big")
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(TWO_RECORDS + bytes(bad))
    code, out, err = dump(capsys, str(log))
    assert code == 1
    assert "record size 5" in err
    assert "Found 86 invalid bytes" in out


def _log_with_batches(directory: Path, base_offset: int, batches: list[bytes]) -> Path:
    data = bytearray()
    offset = base_offset
    for batch in batches:
        start = len(data)
        data += batch
        set_base_offset(data, start, offset)
        offset += struct.unpack_from(">i", batch, 23)[0] + 1
    log = directory / f"{base_offset:020d}.log"
    log.write_bytes(bytes(data))
    return log


def test_index_entries_are_verified_against_the_log(tmp_path, capsys):
    batches = [build_batch([(1000 + i, None, b"v%d" % i, ())]) for i in range(3)]
    log = _log_with_batches(tmp_path, 100, batches)
    positions = [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    index = log.with_suffix(".index")
    # Entry 1 is right (offset 101 at its batch), entry 2 claims offset 105 for batch 102.
    index.write_bytes(struct.pack(">iiii", 1, positions[1], 5, positions[2]))
    code, out, err = dump(capsys, str(index))
    assert code == 1
    assert f"offset: 101 position: {positions[1]}" in out
    assert f"offset: 105 position: {positions[2]}" in out
    assert f"Mismatches in :{index.absolute()}" in err
    assert "  Index offset: 105, log offset: 102" in err

    code, out, err = dump(capsys, "--verify-index-only", str(index))
    assert code == 1
    assert "offset: 101" not in out
    assert "Index offset: 105, log offset: 102" in err


def test_zero_padding_of_a_preallocated_index_ends_the_dump(tmp_path, capsys):
    batches = [build_batch([(1000 + i, None, b"v", ())]) for i in range(2)]
    log = _log_with_batches(tmp_path, 0, batches)
    index = log.with_suffix(".index")
    index.write_bytes(struct.pack(">ii", 1, len(batches[0])) + bytes(8 * 100))
    code, out, _ = dump(capsys, str(index))
    assert code == 0
    assert [line for line in out.splitlines() if line.startswith("offset:")] == [
        f"offset: 1 position: {len(batches[0])}"
    ]


def test_empty_index_and_sanity_check(tmp_path, capsys):
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(b"")
    code, out, _ = dump(capsys, str(index))
    assert (code, out.splitlines()[-1]) == (0, f"{index} is empty.")
    index.write_bytes(struct.pack(">ii", 3, 0) + b"\x00\x00\x00")  # 11 bytes
    code, out, _ = dump(capsys, "--index-sanity-check", str(index))
    assert code == 1
    assert "not a multiple of 8" in out
    index.write_bytes(struct.pack(">ii", 3, 0))
    code, out, _ = dump(capsys, "--index-sanity-check", str(index))
    assert (code, out.splitlines()[-1]) == (0, f"{index} passed sanity check.")


def test_sanity_check_rejects_a_last_offset_below_the_base_offset(tmp_path, capsys):
    # Kafka OffsetIndex.sanityCheck (docs/kafka-behaviours.md#sanity-checks): lastOffset <
    # baseOffset is corrupt; lastOffset == baseOffset is legal.
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(struct.pack(">iiii", 3, 0, -2, 69))
    code, out, _ = dump(capsys, "--index-sanity-check", str(index))
    assert code == 1
    assert "last offset 98 is below the base offset 100" in out
    index.write_bytes(struct.pack(">ii", 0, 0))
    code, out, _ = dump(capsys, "--index-sanity-check", str(index))
    assert (code, out.splitlines()[-1]) == (0, f"{index} passed sanity check.")


def test_time_index_is_verified(tmp_path, capsys):
    batches = [build_batch([(ts, None, b"v", ())]) for ts in (1000, 3000, 2000)]
    log = _log_with_batches(tmp_path, 0, batches)
    time_index = log.with_suffix(".timeindex")
    # Right: (1000, 0) and (3000, 1); wrong: (2500, 2) — batch 2's max is 2000 and 2500 < 3000.
    time_index.write_bytes(struct.pack(">qiqiqi", 1000, 0, 3000, 1, 2500, 2))
    code, out, err = dump(capsys, str(time_index))
    assert code == 1
    assert "timestamp: 3000 offset: 1" in out
    assert "Found timestamp mismatch in :" in err
    assert "  Index timestamp: 2500, log timestamp: 2000" in err
    assert "Found out of order timestamp in :" in err
    assert "  Index timestamp: 2500, Previously indexed timestamp: 3000" in err


def test_compressed_and_control_batches_deep_iteration(tmp_path, capsys):
    builder = BatchBuilder(compression=Compression.ZSTD)
    builder.append(5, b"key", b"value", (("h1", b"x"), ("h2", None)))
    compressed = builder.build()
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 100)
    control = BatchBuilder(is_control=True, is_transactional=True, producer_id=7,
                           producer_epoch=0)
    control.append(6, marker.encode_key(), marker.encode_value())
    log = _log_with_batches(tmp_path, 0, [compressed, control.build()])
    code, out, err = dump(capsys, "--print-data-log", str(log))
    assert code == 0, err
    lines = out.splitlines()
    assert "compresscodec: zstd" in lines[2]
    assert lines[3] == (
        "| offset: 0 CreateTime: 5 keySize: 3 valueSize: 5 sequence: -1 headerKeys: [h1,h2] "
        "key: key payload: value"
    )
    assert "isTransactional: true isControl: true" in lines[4]
    assert lines[5].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 100")


def test_unknown_files_missing_files_and_no_arguments(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    code, _, err = dump(capsys, str(other), str(tmp_path / "00000000000000000000.log"))
    assert code == 1
    assert f"Ignoring unknown file {other}" in err
    assert "No such file" in err
    assert dump(capsys)[0] == 2


def test_the_command_runs_as_a_program_and_accepts_kafkas_files_flag(kafka_written_dir, tmp_path):
    # The real entry point, as a user types it; `--files a,b` as kafka-dump-log.sh takes it.
    copy = tmp_path / "00000000000000000001.log"
    shutil.copy(kafka_written_dir / "metadata-b-00000000000000000001.log", copy)
    result = subprocess.run(
        [sys.executable, "-m", "stratalog.cli", "dump-log", "--files", f"{copy},{copy}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(f"Dumping {copy}") == 2


@pytest.mark.parametrize("flag", ["--max-bytes", "--max-message-size"])
def test_negative_limits_are_usage_errors(flag, tmp_path, capsys):
    assert dump(capsys, flag, "-1", str(tmp_path / "00000000000000000000.log"))[0] == 2


def test_transaction_index_entries_are_printed_as_stored(tmp_path, capsys):
    # Kafka's example in docs/kafka-behaviours.md#transaction-index, then an entry whose version
    # Kafka's reader would refuse (a dump shows it), then 20 bytes short of an entry (ignored, as by
    # every reader).
    txn_index = tmp_path / "00000000000000000000.txnindex"
    txn_index.write_bytes(
        bytes.fromhex("000000000000000f01c50000000000000089000000000000012b00000000000000c8")
        + struct.pack(">hqqqq", 1, -1, 2, 3, -4) + bytes(20)
    )
    code, out, err = dump(capsys, str(txn_index))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {txn_index}",
        "version: 0 producerId: 983493 firstOffset: 137 lastOffset: 299 lastStableOffset: 200",
        "version: 1 producerId: -1 firstOffset: 2 lastOffset: 3 lastStableOffset: -4",
    ]


SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")  # docs/kafka-behaviours.md#producer-snapshots, 46 bytes


def snapshot_bytes(*entries: tuple, version: int = 1, crc: int | None = None) -> bytes:
    """A ``.snapshot`` laid out from docs/kafka-behaviours.md#producer-snapshots (int16 version,
    uint32 CRC-32C of bytes [6, end), int32 count, entries)."""
    body = struct.pack(">i", len(entries)) + b"".join(SNAPSHOT_ENTRY.pack(*e) for e in entries)
    return struct.pack(">hI", version, crc32c(body) if crc is None else crc) + body


def test_producer_snapshots_are_printed_as_kafkas_dump_prints_them(tmp_path, capsys):
    # DumpLogSegments.dumpProducerIdSnapshot: currentTxnFirstOffset is an OptionalLong;
    # firstSequence is BatchMetadata.firstSeq (decrementSequence, so Int32.MAX for a last
    # sequence of -1); a producer without batch metadata (last offset -1) ends its line after
    # "lastTimestamp: <t> ", trailing space included.
    snapshot = tmp_path / "00000000000000000100.snapshot"
    snapshot.write_bytes(snapshot_bytes(
        (7, 1, 41, 99, 2, 1700000000000, 5, 90),
        (8, 0, -1, 100, 0, 1700000000001, -1, -1),
        (9, 2, -1, -1, 0, 1700000000002, 3, -1),
        (10, 0, 1, 2147483650, 3, 1700000000003, -1, -1),  # a batch that wrapped
    ))
    code, out, err = dump(capsys, str(snapshot))
    assert (code, err) == (0, "")
    assert out == (
        f"Dumping {snapshot}\n"
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: 5 currentTxnFirstOffset: "
        "OptionalLong[90] lastTimestamp: 1700000000000 firstSequence: 39 lastSequence: 41 "
        "lastOffset: 99 offsetDelta: 2 timestamp: 1700000000000\n"
        "producerId: 8 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000000001 firstSequence: 2147483647 "
        "lastSequence: -1 lastOffset: 100 offsetDelta: 0 timestamp: 1700000000001\n"
        "producerId: 9 producerEpoch: 2 coordinatorEpoch: 3 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000000002 \n"
        "producerId: 10 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000000003 firstSequence: 2147483646 "
        "lastSequence: 1 lastOffset: 2147483650 offsetDelta: 3 timestamp: 1700000000003\n"
    )


def test_damaged_producer_snapshots_report_kafkas_errors(tmp_path, capsys):
    # ProducerStateManager.readSnapshot's messages: schema problems after "Snapshot failed
    # schema validation: " (Kafka's own reason for a short buffer is a null message; ours
    # says what is short), then the CRC. Nothing else is printed for such a file.
    entry = (7, 1, 41, 99, 2, 0, 5, 90)
    good = snapshot_bytes(entry)
    files = {
        "00000000000000000100.snapshot": snapshot_bytes(entry, crc=12345),
        "00000000000000000200.snapshot": b"\x00\x01\x00",
        "00000000000000000300.snapshot": good[:6] + struct.pack(">i", 3) + good[10:],
        "00000000000000000400.snapshot": snapshot_bytes(entry, version=2),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    paths = [str(tmp_path / name) for name in files]
    code, out, err = dump(capsys, *paths)
    assert code == 1
    assert out.splitlines() == [f"Dumping {path}" for path in paths]
    assert err.splitlines() == [
        "Snapshot is corrupt (CRC is no longer valid). Stored crc: 12345. Computed crc: "
        f"{crc32c(good[6:])}",
        "Snapshot failed schema validation: producer snapshot is truncated (3 bytes)",
        "Snapshot failed schema validation: producer snapshot declares 3 entries but holds 56 "
        "bytes",
        "Snapshot failed schema validation: Snapshot contained an unknown file version 2",
    ]


def test_snapshots_written_by_the_engine(tmp_path, capsys):
    # Several producers, a transaction open, one fenced by a marker (no batch of its epoch),
    # and the empty snapshot of a log whose producers all expired: whole output compared.
    t0 = 1_700_000_000_000
    now = [t0]
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory, time_ms=lambda: now[0])

    def batch(pid, seq, count=1, *, txn=False, ts=t0):
        return build_batch([(ts, None, b"v", ())] * count, producer_id=pid, producer_epoch=0,
                           base_sequence=seq, is_transactional=txn)

    log.append(batch(1, 0, 3))  # 0-2
    log.append(batch(1, 3, 2, ts=t0 + 1))  # 3-4
    log.append(batch(2, 0, 1, txn=True))  # 5
    now[0] = t0 + 10
    log.write_txn_marker(2, 0, coordinator_epoch=3, commit=True)  # 6
    log.append(batch(3, 0, 2, txn=True, ts=t0 + 20))  # 7-8: left open
    log.append(batch(4, 0, 1, txn=True))  # 9
    now[0] = t0 + 30
    log.write_txn_marker(4, 1, coordinator_epoch=0, commit=False)  # 10: fenced, epoch 1
    log.roll()
    log.write_txn_marker(3, 0, coordinator_epoch=0, commit=True)  # 11
    now[0] = t0 + 10 * 86_400_000
    log.remove_expired_producers()
    log.close()
    with_producers = directory / "00000000000000000011.snapshot"
    empty = directory / "00000000000000000012.snapshot"
    code, out, err = dump(capsys, str(with_producers), str(empty))
    assert (code, err) == (0, "")
    assert out == (
        f"Dumping {with_producers}\n"
        "producerId: 1 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {t0 + 1} firstSequence: 3 lastSequence: 4 "
        f"lastOffset: 4 offsetDelta: 1 timestamp: {t0 + 1}\n"
        "producerId: 2 producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {t0 + 10} firstSequence: 0 lastSequence: 0 "
        f"lastOffset: 5 offsetDelta: 0 timestamp: {t0 + 10}\n"
        "producerId: 3 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        f"OptionalLong[7] lastTimestamp: {t0 + 20} firstSequence: 0 lastSequence: 1 "
        f"lastOffset: 8 offsetDelta: 1 timestamp: {t0 + 20}\n"
        "producerId: 4 producerEpoch: 1 coordinatorEpoch: 0 currentTxnFirstOffset: "
        f"OptionalLong.empty lastTimestamp: {t0 + 30} \n"
        f"Dumping {empty}\n"
    )


def test_the_empty_snapshot_of_a_roll_without_producers(tmp_path, capsys):
    # Every roll writes a snapshot, as Kafka's UnifiedLog.roll: for a log without producers
    # it has no entry, and DumpLogSegments prints nothing after its "Dumping" line.
    directory = tmp_path / "t-0"
    log = PartitionLog.open(directory)
    log.append(build_batch([(1_700_000_000_000, None, b"v", ())]))
    log.roll()
    snapshot = directory / "00000000000000000001.snapshot"
    assert len(snapshot.read_bytes()) == 10  # version, CRC, entry count 0
    code, out, err = dump(capsys, str(snapshot))
    log.close()
    assert (code, out, err) == (0, f"Dumping {snapshot}\n", "")


def test_file_names_print_as_java_prints_them(tmp_path, capsys, monkeypatch):
    # Kafka prints `new File(arg)`: repeated slashes collapsed, a trailing slash dropped, "./"
    # kept (pathlib would drop it).
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "00000000000000000000.snapshot").write_bytes(snapshot_bytes())
    monkeypatch.chdir(tmp_path)
    code, out, _ = dump(capsys, ".//d//00000000000000000000.snapshot", "./d/x.txt/")
    assert code == 0
    assert out.splitlines() == [
        "Dumping ./d/00000000000000000000.snapshot", "Dumping ./d/x.txt"
    ]


def test_index_files_of_renamed_copies_take_the_offset_after_the_prefix(tmp_path, capsys):
    # Kafka's name rule first; the trailing digits of a prefixed copy's stem as a fallback.
    index = tmp_path / "copy-of-00000000000000000010.index"
    index.write_bytes(struct.pack(">ii", 3, 0))
    code, out, _ = dump(capsys, "--index-sanity-check", str(index))
    assert (code, out.splitlines()[-1]) == (0, f"{index} passed sanity check.")
    index.write_bytes(struct.pack(">ii", -11, 0))
    code, out, _ = dump(capsys, "--index-sanity-check", str(index))
    assert code == 1
    assert "its last offset -1 is below the base offset 10" in out


@pytest.mark.parametrize("name", ["nosuch.log", "nosuch.index", "00000000000000000000.log"])
def test_a_missing_file_is_no_such_file_not_a_bad_name(tmp_path, capsys, name):
    # Issue 25: `dump-log data/nosuch.log` complained that the name holds no base offset.
    code, out, err = dump(capsys, str(tmp_path / name))
    assert (code, out) == (1, f"Dumping {tmp_path / name}\n")
    assert err == f"{tmp_path / name}: No such file or directory\n"


def test_a_closed_pipe_ends_the_dump_without_blaming_the_file(tmp_path):
    # Issue 25: `dump-log ... | head` printed "<file>: Broken pipe" and exited 1.
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(TWO_RECORDS)

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    err = io.StringIO()
    with pytest.raises(BrokenPipeError):
        dump_files([log], DumpOptions(deep_iteration=True), out=ClosedPipe(), err=err)
    assert err.getvalue() == ""
