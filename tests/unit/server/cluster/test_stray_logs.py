"""server/cluster/stray_logs.py's rule: only recorded topics held here are ever stray, and only
when the cluster does not have them or assigns none of their partitions here."""

from __future__ import annotations

from stratalog.server.cluster.stray_logs import stray_topics


def test_deleted_and_moved_away_topics_are_stray_with_their_reason() -> None:
    stray = stray_topics({"gone", "moved", "kept"}, {"gone", "moved", "kept", "local"},
                         {"moved": False, "kept": True, "other": True})
    assert set(stray) == {"gone", "moved"}
    assert "not in the cluster any more" in stray["gone"]
    assert "none of its partitions is assigned" in stray["moved"]


def test_unrecorded_or_not_held_topics_are_never_stray() -> None:
    # "local": held, never recorded (a single server's topic); "dropped": recorded, not held.
    assert stray_topics({"dropped"}, {"local"}, {}) == {}
    assert stray_topics(set(), {"local", "t"}, {"t": False}) == {}
