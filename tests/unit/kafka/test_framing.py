"""server/kafka/framing.py: a byte stream split anywhere gives back exactly the frames sent,
sizes out of bounds are refused before their bodies are buffered, and the reader never holds
more than one frame plus what arrived with it (Hypothesis)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.kafka.framing import (
    REQUEST_HEADER_BYTES_MIN,
    FrameError,
    FrameReader,
    frame_size_prefix,
)

REQUEST_BYTES_MAX = 512

frames = st.lists(st.binary(min_size=REQUEST_HEADER_BYTES_MIN, max_size=REQUEST_BYTES_MAX),
                  max_size=12)


def _drain(reader: FrameReader) -> list[bytes]:
    out = []
    while (frame := reader.next_frame()) is not None:
        out.append(frame)
    return out


def _check(reader: FrameReader) -> None:
    """What a drained reader may hold: less than the pending frame, or less than a prefix."""
    bound = reader.pending_size if reader.pending_size is not None else 4
    assert reader.buffered_bytes < bound, (reader.buffered_bytes, reader.pending_size)


@given(frames, st.lists(st.integers(min_value=1, max_value=700), max_size=40))
def test_any_split_gives_the_frames_back(bodies, chunk_sizes):
    stream = b"".join(frame_size_prefix(len(b)) + b for b in bodies)
    reader = FrameReader(REQUEST_BYTES_MAX)
    out: list[bytes] = []
    position = 0
    for size in [*chunk_sizes, len(stream)]:
        reader.feed(stream[position:position + size])
        position += size
        out.extend(_drain(reader))
        _check(reader)
    assert out == bodies
    assert reader.buffered_bytes == 0 and reader.pending_size is None


@pytest.mark.parametrize("size", [-(1 << 31), -1, 0, REQUEST_HEADER_BYTES_MIN - 1,
                                  REQUEST_BYTES_MAX + 1, (1 << 31) - 1])
def test_a_size_out_of_bounds_is_refused_from_its_prefix(size):
    reader = FrameReader(REQUEST_BYTES_MAX)
    reader.feed(struct.pack(">i", size))
    with pytest.raises(FrameError, match=str(size)):
        reader.next_frame()
    assert reader.pending_size is None


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=200), max_size=30))
def test_random_bytes_give_frames_or_a_frame_error_and_stay_bounded(chunks):
    reader = FrameReader(REQUEST_BYTES_MAX)
    for chunk in chunks:
        reader.feed(chunk)
        try:
            for frame in _drain(reader):
                assert REQUEST_HEADER_BYTES_MIN <= len(frame) <= REQUEST_BYTES_MAX
        except FrameError:
            return  # the connection closes: nothing more is read
        _check(reader)
