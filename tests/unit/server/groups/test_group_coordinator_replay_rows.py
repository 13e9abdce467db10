"""GroupCoordinator.replay_offset_commits (a load's fast path: a batch's offset commits as
rows) against replay() of each record: the same committed and pending offsets, open
transactions and groups after any sequence of plain and transactional batches of commits and
tombstones, transaction markers and group deletions (the last commit of a key wins, a
tombstone deletes, a transactional commit waits for its marker; a commit makes a simple group)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.groups import (
    CommittedOffset,
    GroupCoordinator,
    GroupMetadataTombstone,
    OffsetCommitRecord,
    OffsetCommitTombstone,
)

GROUPS = ("g", "h", "i")
PARTITIONS = (("t", 0), ("t", 1), ("u", 0))
PRODUCERS = (-1, -1, 1, 2)  # plain batches twice as likely

rows = st.lists(st.tuples(st.sampled_from(GROUPS), st.sampled_from(PARTITIONS), st.booleans()),
                min_size=1, max_size=6)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), st.sampled_from(PRODUCERS), rows),
        st.tuples(st.just("marker"), st.sampled_from((1, 2)), st.booleans()),
        st.tuples(st.just("delete"), st.sampled_from(GROUPS)),
    ),
    max_size=25,
)


def state(coordinator: GroupCoordinator) -> tuple[object, ...]:
    coordinator.offsets.check()
    store = coordinator.offsets
    return store.committed, store.pending, store.open_transactions, sorted(coordinator.groups)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_rows_replay_as_records_do(script: list[tuple]) -> None:
    by_record = GroupCoordinator(loading=True)
    by_rows = GroupCoordinator(loading=True)
    record_offset = 0
    for step in script:
        if step[0] == "marker":
            by_record.replay_end_transaction(step[1], step[2])
            by_rows.replay_end_transaction(step[1], step[2])
            record_offset += 1
        elif step[0] == "delete":
            by_record.replay(record_offset, GroupMetadataTombstone(step[1]))
            by_rows.replay(record_offset, GroupMetadataTombstone(step[1]))
            record_offset += 1
        else:
            _, producer_id, batch = step
            batch_rows = []
            for group_id, (topic, partition), is_commit in batch:
                if is_commit:
                    record = OffsetCommitRecord(group_id, topic, partition, record_offset * 10,
                                                -1, "m", 5)
                    by_record.replay(record_offset, record, producer_id)
                    batch_rows.append((group_id, (topic, partition), CommittedOffset(
                        record_offset * 10, -1, "m", 5, -1, record_offset)))
                else:
                    by_record.replay(record_offset,
                                     OffsetCommitTombstone(group_id, topic, partition),
                                     producer_id)
                    batch_rows.append((group_id, (topic, partition), None))
                record_offset += 1
            by_rows.replay_offset_commits(batch_rows, producer_id)
        assert state(by_rows) == state(by_record)
