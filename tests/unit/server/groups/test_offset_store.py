"""OffsetStore against a plain model over random replays of commits, tombstones and markers:
what is committed, and what is pending, after any sequence (Kafka's OffsetMetadataManager
replay rules)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stratalog.server.groups import OffsetCommitRecord, OffsetStore

GROUPS = ("g", "h")
PARTITIONS = (("t", 0), ("t", 1))
PRODUCERS = (-1, -1, 1, 2)  # plain commits twice as likely

operations = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(PARTITIONS),
                  st.sampled_from(PRODUCERS)),
        st.tuples(st.just("tombstone"), st.sampled_from(GROUPS), st.sampled_from(PARTITIONS)),
        st.tuples(st.just("marker"), st.sampled_from((1, 2)), st.booleans()),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_offset_store_matches_a_plain_model(ops):
    store = OffsetStore()
    committed: dict[tuple[str, tuple[str, int]], tuple[int, int]] = {}  # -> (offset, record)
    pending: dict[int, dict[tuple[str, tuple[str, int]], tuple[int, int]]] = {}
    for record_offset, op in enumerate(ops):
        if op[0] == "commit":
            _, group, (topic, partition), producer = op
            store.replay_commit(record_offset, producer, OffsetCommitRecord(
                group, topic, partition, record_offset * 10, -1, "", 0))
            value = (record_offset * 10, record_offset)
            if producer < 0:
                committed[(group, (topic, partition))] = value
            else:
                pending.setdefault(producer, {})[(group, (topic, partition))] = value
        elif op[0] == "tombstone":
            _, group, (topic, partition) = op
            store.replay_tombstone(group, topic, partition)
            committed.pop((group, (topic, partition)), None)
            for by_key in pending.values():
                by_key.pop((group, (topic, partition)), None)
        else:
            _, producer, commit = op
            store.replay_end_transaction(producer, commit)
            for key, value in pending.pop(producer, {}).items():
                if commit and (key not in committed or value[1] > committed[key][1]):
                    committed[key] = value
        store.check()
        for group in GROUPS:
            for topic, partition in PARTITIONS:
                got = store.get(group, topic, partition)
                want = committed.get((group, (topic, partition)))
                assert (got and (got.offset, got.record_offset)) == (want or None)
                assert store.has_pending(group, topic, partition) == any(
                    (group, (topic, partition)) in by_key for by_key in pending.values()
                )
