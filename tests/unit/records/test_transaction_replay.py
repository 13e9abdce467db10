"""records.transaction_replay: open on data, close on marker; the LSO and aborted transactions."""

from __future__ import annotations

import random

from stratalog.records.transaction_replay import CompletedTxn, TransactionReplay


def test_the_module_docstrings_example():
    replay = TransactionReplay()
    assert replay.begin(7, 10)
    assert replay.first_unstable_offset() == 10
    assert replay.begin(8, 12)
    assert not replay.begin(7, 13)  # 7's transaction goes on
    assert replay.ongoing == {10: 7, 12: 8}
    aborted = replay.end(7, 15, is_abort=True)
    assert aborted == CompletedTxn(7, 10, 15, True)
    assert replay.last_stable_offset_for(aborted) == 12  # 8's is still open
    assert replay.first_unstable_offset() == 12
    committed = replay.end(8, 16, is_abort=False)
    assert committed == CompletedTxn(8, 12, 16, False)
    assert replay.last_stable_offset_for(committed) == 17  # none open: the marker's offset + 1
    assert replay.first_unstable_offset() is None
    assert replay.last_stable_offset(17) == 17


def test_a_marker_without_an_open_transaction_ends_nothing():
    replay = TransactionReplay()
    assert replay.end(7, 3, is_abort=True) is None
    assert replay.first_offset(7) is None
    replay.begin(7, 4)
    assert replay.first_offset(7) == 4
    assert replay.last_stable_offset(9) == 4


def test_against_a_plain_model_over_random_batches():
    # The rules, written out over a list of transactions, for random interleavings.
    rng = random.Random(26)
    for _ in range(200):
        replay = TransactionReplay()
        open_first: dict[int, int] = {}
        for offset in range(rng.randint(0, 40)):
            producer = rng.randint(1, 4)
            if rng.random() < 0.3:
                is_abort = rng.random() < 0.5
                first = open_first.pop(producer, None)
                others = list(open_first.values())
                expected = None if first is None else CompletedTxn(producer, first, offset, is_abort)
                got = replay.end(producer, offset, is_abort)
                assert got == expected
                if got is not None:
                    assert replay.last_stable_offset_for(got) == min(others, default=offset + 1)
            elif rng.random() < 0.7:
                opened = producer not in open_first
                open_first.setdefault(producer, offset)
                assert replay.begin(producer, offset) == opened
            assert replay.first_unstable_offset() == min(open_first.values(), default=None)
            assert replay.last_stable_offset(offset + 1) == min(
                open_first.values(), default=offset + 1
            )
            assert replay.ongoing == {o: p for p, o in open_first.items()}
