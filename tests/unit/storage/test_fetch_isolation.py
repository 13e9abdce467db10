"""The cuts of whole batches at a bound (fetch_isolation.py), on real batches, and the records a
``max_records`` read takes (``take_records``: the cut, the reader's filter and the slicing in one
walk).

Through PartitionLog, test_partition_log_replication.py (the high watermark) and
test_partition_log_transactions.py (the LSO, aborted transactions) cover the cuts on a live log;
here the cut's own edges: bounds inside, between and past the batches. ``take_records`` is
checked against a plain reference (cut, then filter and slice batch by batch) on random logs, and
``PartitionLog.take_records`` against its ``fetch`` then the slicing on live ones, and
``PartitionLog.take_records_by_timestamp`` against its ``fetch_by_timestamp`` then the slicing.
"""

from __future__ import annotations

import random

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch

from stratalog.records.aborted_filter import AbortedTransactionFilter
from stratalog.records.batch import Compression, validate_batch
from stratalog.records.batch_walk import batches_below, iter_batch_headers
from stratalog.records.builder import build_batch
from stratalog.records.control import ControlRecordType, encode_control_key
from stratalog.records.errors import CorruptRecordError, InvalidRecordError
from stratalog.records.reader import decode_batch
from stratalog.records.slicing import slice_batch
from stratalog.server.rpc.translation import decode_records_into
from stratalog.server.storage.errors import StorageError
from stratalog.server.storage.fetch_isolation import (
    IsolationLevel,
    batches_before_bound,
    take_records,
)
from stratalog.server.storage.partition_log import PartitionLog
from stratalog.server.storage.segment import FetchedBatches
from stratalog.server.storage.txn_index import AbortedTxn
from stratalog.v1.broker_pb2 import FetchResponse

T0 = 1_700_000_000_000


def _batch(base_offset: int, count: int) -> bytes:
    return build_batch(
        [(T0 + i, None, b"v%d" % i, ()) for i in range(count)], base_offset=base_offset
    )


# Three batches: offsets 10..12, 13..14, 15..18.
BATCHES = [_batch(10, 3), _batch(13, 2), _batch(15, 4)]
FETCHED = FetchedBatches(b"".join(BATCHES), 19, 9)


@pytest.mark.parametrize(
    ("upper_bound", "kept", "next_offset", "records"),
    [
        (19, 3, 19, 9),  # at the end: everything
        (15, 2, 15, 5),  # at a batch boundary
        (14, 2, 15, 5),  # inside a batch: a batch starting below the bound is whole
        (11, 1, 13, 3),
    ],
)
def test_batches_starting_below_the_bound_are_kept_whole(
    upper_bound: int, kept: int, next_offset: int, records: int
) -> None:
    cut = batches_before_bound(FETCHED, 10, upper_bound)
    assert cut == FetchedBatches(b"".join(BATCHES[:kept]), next_offset, records)


@pytest.mark.parametrize("offset", [10, 12])
def test_nothing_below_the_bound_is_empty_at_the_offset_read(offset: int) -> None:
    assert batches_before_bound(FETCHED, offset, offset) == FetchedBatches(b"", offset, 0)
    assert batches_before_bound(FETCHED, offset, 5) == FetchedBatches(b"", offset, 0)


def test_the_isolation_levels_are_kafkas() -> None:
    assert [int(level) for level in IsolationLevel] == [0, 1]
    assert IsolationLevel.READ_COMMITTED.name == "READ_COMMITTED"


# ------------------------------------------------------------------------ take_records
# (Moved from tests/unit/server/test_translation.py with the slicing, which was the front end's.)


def _stored(first_offset: int, values: list[bytes | None], **builder: object) -> bytes:
    """A batch as a log stores it: base offset set (not covered by the CRC)."""
    batch = build_batch([(1_000 + i, None, v, ()) for i, v in enumerate(values)], **builder)
    return first_offset.to_bytes(8, "big", signed=True) + batch[8:]


def _marker(offset: int, producer_id: int, control_type: ControlRecordType) -> bytes:
    batch = build_batch([(1_000, encode_control_key(control_type), b"\x00" * 6, ())],
                        is_control=True, producer_id=producer_id, producer_epoch=0,
                        is_transactional=True)
    return offset.to_bytes(8, "big", signed=True) + batch[8:]


def _txn(offset: int, producer_id: int, values: list[bytes]) -> bytes:
    return _stored(offset, values, producer_id=producer_id, producer_epoch=0, base_sequence=0,
                   is_transactional=True)


def _kafka_read(data: bytes) -> list[tuple[int, bytes | None]]:
    """Every record of ``data`` as aiokafka's reader reads it, CRCs checked."""
    out = []
    position = 0
    while position < len(data):
        header = validate_batch(data, position)
        batch = AioBatch(data[position:header.end_position])
        assert batch.validate_crc()
        out.extend((record.offset, record.value) for record in batch)
        position = header.end_position
    return out


def test_take_records_cuts_the_first_and_last_batch_and_keeps_those_between() -> None:
    middle = _stored(3, [b"d", b"e"])
    data = _stored(0, [b"a", b"b", b"c"]) + middle + _stored(5, [b"f", b"g", b"h"])
    sliced = take_records(data, 1, 5, 1 << 20)
    assert _kafka_read(sliced.data) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    assert middle in sliced.data  # whole batches between are the stored bytes
    assert sliced[:3] == (sliced.data, 6, 5)
    # Through the end of a batch: next_offset after it; nothing to take: the offset stays.
    assert take_records(data, 6, 10, 1 << 20)[1:3] == (8, 2)
    assert take_records(b"", 4, 1, 1 << 20)[:3] == (b"", 4, 0)


def test_take_records_takes_one_record_past_max_bytes_then_stops() -> None:
    data = _stored(0, [b"x" * 100] * 5) + _stored(5, [b"y" * 100] * 5)
    sliced = take_records(data, 2, 100, 0)
    assert _kafka_read(sliced.data) == [(2, b"x" * 100)]
    assert sliced.next_offset == 3
    sliced = take_records(data, 2, 100, 250)  # the first record, then what fits
    assert [offset for offset, _ in _kafka_read(sliced.data)] == [2, 3]


def _txn_end(data: bytes) -> int:
    """The end of the first batch of ``data``."""
    return validate_batch(data).end_position


def test_take_records_read_committed_leaves_out_aborted_and_control_batches() -> None:
    data = (
        _txn(0, 7, [b"aborted-1", b"aborted-2"])     # 0-1: 7's aborted transaction
        + _txn(2, 8, [b"committed"])                # 2: 8's, committed
        + _stored(3, [b"plain"])                    # 3
        + _marker(4, 8, ControlRecordType.COMMIT)   # 4
        + _marker(5, 7, ControlRecordType.ABORT)    # 5: ends 7's aborted transaction
        + _txn(6, 7, [b"later", b"later-2"])        # 6-7: 7 again, a new transaction
    )
    aborted = [AbortedTxn(7, 0, 5, 6)]
    committed = take_records(data, 1, 3, 1 << 20, aborted)
    assert _kafka_read(committed.data) == [(2, b"committed"), (3, b"plain"), (6, b"later")]
    assert committed.next_offset == 7
    # READ_UNCOMMITTED: the aborted records too, never a marker.
    uncommitted = take_records(data, 1, 4, 1 << 20)
    assert [offset for offset, _ in _kafka_read(uncommitted.data)] == [1, 2, 3, 6]
    # Markers and aborted records before the first kept one are passed over.
    assert _kafka_read(take_records(data, 4, 1, 1 << 20, aborted).data) == [(6, b"later")]
    only_skipped = data[:_txn_end(data)]
    assert take_records(only_skipped, 0, 1, 1 << 20, aborted)[:3] == (b"", 2, 0)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD])
def test_take_records_of_a_compressed_batch_are_plain(codec: Compression) -> None:
    data = _stored(10, [b"v%d" % i for i in range(50)], compression=codec)
    sliced = take_records(data, 30, 2, 1 << 20)
    assert _kafka_read(sliced.data) == [(30, b"v20"), (31, b"v21")]
    assert validate_batch(sliced.data).compression == Compression.NONE
    # All of it: the stored batch, still compressed.
    assert take_records(data, 10, 50, 1 << 20).data == data


def test_take_records_of_a_damaged_batch_is_a_storage_error() -> None:
    data = bytearray(_stored(0, [b"a", b"b"]) + _stored(2, [b"c", b"d"]))
    data[-2] ^= 0xFF
    with pytest.raises(StorageError, match=r"fetch position 77: .*CRC"):
        take_records(bytes(data), 2, 1, 1 << 20)


# ------------------------------------------------------------------------ take_records, a model

def _reference_take(data, offset, max_records, max_bytes, aborted, upper_bound):
    """What a max_records read takes, the plain way: cut the whole batches at the bound first,
    then go over what is left batch by batch (the reader's filter, then each batch's slice)."""
    kept = []
    for header in iter_batch_headers(data, partial_tail_ok=False):
        if upper_bound is not None and header.base_offset >= upper_bound:
            break
        kept.append(header)
    whole_bytes = kept[-1].end_position if kept else 0
    skips = None if aborted is None else AbortedTransactionFilter(
        (txn.producer_id, txn.first_offset) for txn in aborted).skips
    parts, taken, used, next_offset = [], 0, 0, offset
    for header in kept:
        if taken >= max_records or (taken and used >= max_bytes):
            break
        if header.is_control or (skips is not None and skips(header)):
            if header.is_control and skips is not None:
                skips(header, decode_batch(data, header.position)[1][0].key)
            next_offset = header.next_offset
            continue
        sliced = slice_batch(data, header, offset, max_records - taken, max(max_bytes - used, 0),
                             1 << 30)
        if sliced is None:
            next_offset = header.next_offset
            continue
        parts.append(sliced.data)
        taken += sliced.records_count
        used += len(sliced.data)
        next_offset = sliced.next_offset
    return b"".join(parts), next_offset, taken, whole_bytes


def _random_log(rng: random.Random) -> tuple[bytes, list[AbortedTxn]]:
    """Batches back to back as a log holds them: plain ones (some compressed), transactions of
    three producers ended by COMMIT or ABORT markers (or left open), compacted gaps between
    batches and inside them; and the aborted transactions, as the .txnindex would hold them."""
    out, aborted, open_txns = [], [], {}
    offset = rng.randrange(0, 50)
    for _ in range(rng.randrange(1, 25)):
        kind = rng.random()
        producer_id = rng.randrange(3)
        if kind < 0.25 and producer_id in open_txns:
            control = rng.choice([ControlRecordType.COMMIT, ControlRecordType.ABORT])
            batch = build_batch([(T0, encode_control_key(control), b"\0" * 6, ())],
                                is_control=True, is_transactional=True,
                                producer_id=producer_id, producer_epoch=0)
            first = open_txns.pop(producer_id)
            if control == ControlRecordType.ABORT:
                aborted.append(AbortedTxn(producer_id, first, offset, offset + 1))
        else:
            count = rng.randrange(1, 8)
            fields: dict[str, object] = {}
            if kind < 0.6:
                fields = dict(is_transactional=True, producer_id=producer_id, producer_epoch=0,
                              base_sequence=0)
                open_txns.setdefault(producer_id, offset)
            elif kind < 0.75:
                fields = dict(compression=rng.choice([Compression.GZIP, Compression.LZ4]))
            batch = build_batch([(T0 + i, b"k%d" % i, b"v" * rng.randrange(0, 120), ())
                                 for i in range(count)], **fields)
            batch = offset.to_bytes(8, "big", signed=True) + batch[8:]
            if count > 2 and rng.random() < 0.2:  # compacted: the first records gone
                sliced = slice_batch(batch, validate_batch(batch), offset + rng.randrange(1, count),
                                     count, 1 << 20, 1 << 30)
                batch = sliced.data
        batch = offset.to_bytes(8, "big", signed=True) + batch[8:]
        out.append(batch)
        offset = validate_batch(batch).next_offset + (rng.randrange(1, 4) if rng.random() < 0.2
                                                     else 0)
    return b"".join(out), aborted


def _overlapping(aborted, start, end):
    return [txn for txn in aborted if txn.first_offset < end and txn.last_offset >= start]


@pytest.mark.parametrize("seed", range(400))
def test_take_records_is_the_cut_then_the_slicing(seed: int) -> None:
    rng = random.Random(seed)
    data, aborted = _random_log(rng)
    headers = list(iter_batch_headers(data))
    first, last = headers[0].base_offset, headers[-1].next_offset
    # A read at offset starts with the batch holding it (or the next one, over a gap).
    offset = rng.randrange(first, last)
    start = next(h for h in headers if h.next_offset > offset)
    read = data[start.position:]
    upper_bound = rng.choice([None, last, rng.randrange(offset, last + 1),
                              rng.choice(headers).base_offset])
    max_records = rng.choice([1, 1, 2, 5, 100])
    max_bytes = rng.choice([0, 50, 300, 1 << 20])
    committed = rng.random() < 0.5
    cut_next = (max((h.next_offset for h in headers[headers.index(start):]
                     if upper_bound is None or h.base_offset < upper_bound), default=offset))
    expected = _reference_take(
        read, offset, max_records, max_bytes,
        _overlapping(aborted, offset, cut_next) if committed else None, upper_bound)
    # The one walk gets the aborted transactions of the read before its cut (as
    # PartitionLog.take_records collects them).
    enough = rng.choice([None, 1, 500, 5000])
    got = take_records(read, offset, max_records, max_bytes,
                       _overlapping(aborted, offset, last) if committed else None, upper_bound,
                       enough)
    assert (got.data, got.next_offset, got.records_count) == expected[:3]
    whole_bytes = expected[3]
    if enough is None:
        assert got.whole_bytes == whole_bytes
    else:  # counted as far as enough: whether it is reached, and exact below it
        assert min(got.whole_bytes, enough) == min(whole_bytes, enough)
        assert got.whole_bytes <= whole_bytes
    # The positions are where the batches of the answer start.
    assert list(got.positions) == [h.position for h in iter_batch_headers(got.data)]


# ------------------------------------------------------------------------ the cut, a model

def _reference_below(data, upper_offset, offset):
    """The cut the plain way: the header walk (iter_batch_headers) up to the first batch at or
    above the bound, then a copy of the bytes before it."""
    position, next_offset, records = 0, offset, 0
    for header in iter_batch_headers(data):
        if header.base_offset >= upper_offset:
            break
        position, next_offset = header.end_position, header.next_offset
        records += header.records_count
    return data[:position], next_offset, records


def _damaged(rng: random.Random, data: bytes) -> bytes:
    """``data`` as it is, or with one header broken (a size field below 14, a batch below the
    61-byte header, a magic byte, a size running past the end) or a partial tail."""
    headers = list(iter_batch_headers(data))
    victim = rng.choice(headers)
    at = victim.position
    damage = rng.choice(["none", "none", "tiny", "small", "magic", "long", "tail"])
    broken = bytearray(data)
    if damage == "tiny":
        broken[at + 8 : at + 12] = rng.randrange(0, 14).to_bytes(4, "big")
    elif damage == "small":
        broken[at + 8 : at + 12] = rng.randrange(14, 49).to_bytes(4, "big")
    elif damage == "magic":
        broken[at + 16] = rng.choice([0, 1, 3])
    elif damage == "long":
        broken[at + 8 : at + 12] = (len(data) - at).to_bytes(4, "big")
    elif damage == "tail":
        return data[: at + rng.randrange(0, victim.size_bytes)]
    return bytes(broken)


@pytest.mark.parametrize("seed", range(300))
def test_the_cut_is_the_header_walk_then_a_copy(seed: int) -> None:
    """batches_below (one lean walk, a view of what it keeps) against the header walk and a
    copy, on random logs with bounds everywhere and damage anywhere: the same bytes, next
    offset and records, or the same error."""
    rng = random.Random(seed)
    data, _ = _random_log(rng)
    headers = list(iter_batch_headers(data))
    start = rng.choice(headers)
    read = _damaged(rng, data[start.position:])
    offset = rng.randrange(start.base_offset, start.next_offset)
    upper_offset = rng.choice([
        offset, headers[-1].next_offset, 10**9, rng.choice(headers).base_offset,
        rng.choice(headers).base_offset + 1, rng.randrange(0, headers[-1].next_offset + 2),
    ])
    try:
        expected = _reference_below(read, upper_offset, offset)
    except (CorruptRecordError, InvalidRecordError) as exc:
        with pytest.raises(type(exc)) as caught:
            batches_below(read, upper_offset, offset)
        assert str(caught.value) == str(exc)
        return
    kept, next_offset, records = batches_below(read, upper_offset, offset)
    assert (bytes(kept), next_offset, records) == expected
    # Not a copy: all of the read, or a view of it.
    assert kept is read or not kept or kept.obj is read
    through = batches_before_bound(FetchedBatches(read, start.next_offset, 0), offset,
                                   upper_offset)
    if not expected[0] or offset >= upper_offset:
        assert through == FetchedBatches(b"", offset, 0)
    else:
        assert (bytes(through.data), *through[1:]) == (expected[0], *expected[1:], ())


def _live_log(tmp_path, rng: random.Random) -> PartitionLog:
    """A partition log of 40 random steps over several segments: plain batches, transactional
    ones of three producers, their COMMIT and ABORT markers (some left open), and a high
    watermark below the log end."""
    log = PartitionLog.open(tmp_path / "t-0", {"segment.bytes": rng.choice([700, 4000, 1 << 20])},
                            time_ms=lambda: T0)
    sequences = [0, 0, 0]
    open_txn = [False, False, False]
    for _ in range(40):
        producer_id = rng.randrange(3)
        if open_txn[producer_id] and rng.random() < 0.3:
            log.write_txn_marker(producer_id, 0, 0, commit=rng.random() < 0.5)
            open_txn[producer_id] = False
            continue
        count = rng.randrange(1, 6)
        records = [(T0, b"k", b"v" * rng.randrange(60), ())] * count
        if rng.random() < 0.6:
            log.append(build_batch(records, producer_id=producer_id, producer_epoch=0,
                                   base_sequence=sequences[producer_id], is_transactional=True))
            sequences[producer_id] += count
            open_txn[producer_id] = True
        else:
            log.append(build_batch(records))
    log.update_high_watermark(rng.randrange(log.log_end_offset // 2, log.log_end_offset + 1))
    return log


@pytest.mark.parametrize("seed", range(8))
def test_a_logs_bounded_fetch_is_its_whole_read_cut(tmp_path, seed: int) -> None:
    """On live logs (transactions over several segments, a high watermark below the log end):
    a fetch bounded by the high watermark or the LSO is the unbounded read cut by the header
    walk, and decodes (the RECORDS answer) to what those bytes, copied, decode to."""
    rng = random.Random(seed)
    log = _live_log(tmp_path, rng)
    try:
        end = log.log_end_offset
        for _ in range(60):
            offset = rng.randrange(0, end + 1)
            max_bytes = rng.choice([0, 100, 1000, 1 << 20])
            isolation = rng.choice(list(IsolationLevel))
            bound = rng.choice([None, log.high_watermark])
            committed = isolation == IsolationLevel.READ_COMMITTED
            upper = log.last_stable_offset if committed else bound
            if committed and bound is not None:
                upper = min(upper, bound)
            whole = log.fetch(offset, max_bytes)
            if upper is None or offset >= upper:
                expected = (b"", offset, 0) if upper is not None else tuple(whole[:3])
            else:
                expected = _reference_below(whole.data, upper, offset)
                if not expected[0]:
                    expected = (b"", offset, 0)
            got = log.fetch(offset, max_bytes, isolation_level=isolation, upper_bound=bound)
            case = (offset, max_bytes, isolation, bound, upper)
            assert (bytes(got.data), got.next_offset, got.records_count) == expected, case
            # The RECORDS answer: decoded from the view as from a copy, field for field.
            aborted = got.aborted_transactions if committed else None
            from_view, from_copy = FetchResponse(), FetchResponse()
            decode_records_into(from_view.records, got.data, offset, 1 << 20, aborted)
            decode_records_into(from_copy.records, bytes(got.data), offset, 1 << 20, aborted)
            assert from_view.SerializeToString() == from_copy.SerializeToString(), case
    finally:
        log.close()


# ------------------------------------------------------------------------ PartitionLog.take_records

@pytest.mark.parametrize("seed", range(12))
def test_a_logs_take_records_is_its_fetch_then_the_slicing(tmp_path, seed: int) -> None:
    """On live logs (transactions committed, aborted and open over several segments, a high
    watermark below the log end): the one walk gives what the fetch's whole batches, sliced
    without a cut, give, and counts the fetch's bytes."""
    rng = random.Random(seed)
    log = _live_log(tmp_path, rng)
    try:
        end = log.log_end_offset
        for _ in range(60):
            offset = rng.randrange(0, end + 1)
            max_records = rng.choice([1, 2, 7, 1000])
            max_bytes = rng.choice([0, 100, 1000, 1 << 20])
            isolation = rng.choice(list(IsolationLevel))
            bound = rng.choice([None, log.high_watermark])
            fetched = log.fetch(offset, max_bytes, isolation_level=isolation,
                                max_records=max_records, upper_bound=bound)
            committed = isolation == IsolationLevel.READ_COMMITTED
            expected = take_records(fetched.data, offset, max_records, max_bytes,
                                    fetched.aborted_transactions if committed else None)
            got = log.take_records(offset, max_bytes, max_records, isolation_level=isolation,
                                   upper_bound=bound)
            assert got[:4] == expected[:4], (offset, max_records, max_bytes, isolation, bound)
            assert got.whole_bytes == len(fetched.data)
    finally:
        log.close()


# ------------------------------------------------------- PartitionLog.take_records_by_timestamp

@pytest.mark.parametrize("seed", range(12))
def test_a_logs_take_records_by_timestamp_is_its_fetch_by_timestamp_then_the_slicing(
    tmp_path, seed: int
) -> None:
    """On live logs (transactions committed, aborted and open over several segments,
    timestamps rising with ties and steps back, with and without a high watermark below the
    log end): the one walk from the record found gives what fetch_by_timestamp's batches
    (cut at the high watermark or the LSO), sliced without a cut, give."""
    rng = random.Random(seed)
    log = PartitionLog.open(tmp_path / "t-0", {"segment.bytes": rng.choice([700, 4000, 1 << 20])},
                            time_ms=lambda: T0 + 10_000)
    sequences = [0, 0, 0]
    open_txn = [False, False, False]
    timestamp = T0
    try:
        for _ in range(40):
            producer_id = rng.randrange(3)
            if open_txn[producer_id] and rng.random() < 0.3:
                log.write_txn_marker(producer_id, 0, 0, commit=rng.random() < 0.5)
                open_txn[producer_id] = False
                continue
            count = rng.randrange(1, 6)
            records = []
            for _ in range(count):
                timestamp += rng.choice([0, 1, 5, -3])
                records.append((timestamp, b"k", b"v" * rng.randrange(60), ()))
            if rng.random() < 0.6:
                log.append(build_batch(records, producer_id=producer_id, producer_epoch=0,
                                       base_sequence=sequences[producer_id],
                                       is_transactional=True))
                sequences[producer_id] += count
                open_txn[producer_id] = True
            else:
                log.append(build_batch(records))
        end = log.log_end_offset
        if rng.random() < 0.7:
            log.update_high_watermark(rng.randrange(end // 2, end + 1))
        for _ in range(60):
            target = T0 + rng.randrange(-5, timestamp - T0 + 10)
            max_records = rng.choice([1, 2, 7, 1000])
            max_bytes = rng.choice([0, 100, 1000, 1 << 20])
            isolation = rng.choice(list(IsolationLevel))
            found, fetched = log.fetch_by_timestamp(target, max_bytes, isolation_level=isolation,
                                                    max_records=max_records)
            committed = isolation == IsolationLevel.READ_COMMITTED
            start = fetched.next_offset if found is None else found.offset
            expected = take_records(fetched.data, start, max_records, max_bytes,
                                    fetched.aborted_transactions if committed else None)
            got_found, got = log.take_records_by_timestamp(target, max_bytes, max_records,
                                                           isolation_level=isolation)
            case = (target, max_records, max_bytes, isolation, log.high_watermark)
            assert got_found == found, case
            assert got == expected, case
    finally:
        log.close()
