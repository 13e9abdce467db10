"""server.append_placement: where a Produce's encoding and append are tried, by size and by
whether reads are being served."""

from __future__ import annotations

from stratalog.records import Compression, build_batch
from stratalog.server.append_placement import AppendPlacement, holds_compressed_batches
from stratalog.server.settings import Settings


class Clock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_appends_by_size_and_by_reads_served() -> None:
    clock = Clock()
    placement = AppendPlacement(
        Settings(append_in_executor_min_bytes=1000, append_inline_max_bytes=100_000),
        clock=clock,
    )
    # No read served yet: under the maximum everything is tried inline.
    assert not placement.reads_recent
    assert [placement.tries_append_inline(n) for n in (0, 999, 1000, 99_999)] == [True] * 4
    assert not placement.tries_append_inline(100_000)  # at or above the maximum: the pool
    # A read was just served: from the minimum up, the pool, so that reads do not wait.
    placement.read_served()
    assert placement.reads_recent
    assert placement.tries_append_inline(999)
    assert not placement.tries_append_inline(1000)
    assert not placement.tries_append_inline(99_999)
    # Reads stopped READS_RECENT_S ago: back on the loop.
    clock.now_s += AppendPlacement.READS_RECENT_S
    assert not placement.reads_recent
    assert placement.tries_append_inline(99_999)


def test_the_settings_turn_either_path_off() -> None:
    always_pool = AppendPlacement(Settings(append_inline_max_bytes=0), clock=Clock())
    assert always_pool.tries_append_inline(10)  # under append_in_executor_min_bytes
    assert not always_pool.tries_append_inline(1 << 20)
    always_inline = AppendPlacement(Settings(append_in_executor_min_bytes=4 << 20),
                                    clock=Clock())
    always_inline.read_served()
    assert always_inline.tries_append_inline(3 << 20)


def test_records_form_produce_is_encoded_in_the_pool_from_many_records_or_bytes() -> None:
    settings = Settings()
    placement = AppendPlacement(settings)
    many = AppendPlacement.ENCODE_IN_EXECUTOR_MIN_RECORDS
    assert placement.encodes_inline(many - 1, 1000)
    assert not placement.encodes_inline(many, 1000)
    # Few records, but large ones: compressing them is the cost.
    assert placement.encodes_inline(10, settings.append_inline_max_bytes - 1)
    assert not placement.encodes_inline(10, settings.append_inline_max_bytes)


def test_compressed_client_batches_always_go_to_the_pool() -> None:
    # Their size says nothing of their cost: validation decompresses them.
    placement = AppendPlacement(Settings(), clock=Clock())
    assert not placement.reads_recent
    assert placement.tries_append_inline(100)
    assert not placement.tries_append_inline(100, compressed=True)


def test_holds_compressed_batches_reads_every_header() -> None:
    plain = build_batch([(0, None, b"v", ())])
    zstd = build_batch([(0, None, b"v", ())], compression=Compression.ZSTD)
    assert not holds_compressed_batches(plain)
    assert not holds_compressed_batches(plain * 3)
    assert holds_compressed_batches(zstd)
    # A compressed batch behind uncompressed ones is found.
    assert holds_compressed_batches(memoryview(plain * 2 + zstd))
    # Bytes that are not batches: validation refuses them before decompressing anything.
    assert not holds_compressed_batches(b"")
    assert not holds_compressed_batches(b"\xff" * 100)
