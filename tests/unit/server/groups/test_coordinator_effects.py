"""CoordinatorEffects: keyed timers (replace, cancel, order, the clock never going back) and
appends reported back by id."""

from __future__ import annotations

from stratalog.server.groups import GroupMetadataTombstone, UnknownServerError
from stratalog.server.groups.coordinator_effects import CoordinatorEffects


def _fire_all(effects: CoordinatorEffects) -> list[str]:
    fired: list[str] = []
    for _ in range(100):
        callback = effects.pop_due_timer()
        if callback is None:
            return fired
        fired.append(callback())
    raise AssertionError("timers kept firing")


def test_timers_fire_in_deadline_order_and_a_key_is_replaced_or_cancelled():
    effects = CoordinatorEffects(now_ms=1_000)
    effects.schedule(("a",), 30, lambda: "a")
    effects.schedule(("b",), 10, lambda: "b")
    effects.schedule(("c",), 20, lambda: "c")
    effects.schedule(("b",), 40, lambda: "b again")  # replaces b's deadline
    effects.cancel(("c",))
    assert effects.next_deadline_ms() == 1_030
    effects.begin(1_029)
    assert _fire_all(effects) == []
    effects.begin(1_040)
    assert _fire_all(effects) == ["a", "b again"]
    assert effects.next_deadline_ms() is None and not effects.has_timer(("a",))


def test_a_clock_stepping_back_neither_fires_early_nor_moves_deadlines_back():
    effects = CoordinatorEffects(now_ms=1_000)
    effects.begin(500)
    assert effects.now_ms == 1_000
    effects.advance_clock(700)  # a replay's clock: never back either
    assert effects.now_ms == 1_000
    effects.advance_clock(1_000)
    assert effects.now_ms == 1_000
    effects.schedule(("a",), 10, lambda: "a")
    assert effects.next_deadline_ms() == 1_010


def test_appends_are_reported_back_by_id_once():
    effects = CoordinatorEffects(now_ms=0)
    seen: list[object] = []
    effects.append((GroupMetadataTombstone("g"),), seen.append, seen.append)
    effects.append((GroupMetadataTombstone("h"),), seen.append, seen.append)
    out = effects.end()
    assert [a.append_id for a in out.appends] == [0, 1]
    effects.take_append(1).on_written(7)
    assert effects.take_append(1) is None
    effects.fail_all_appends(UnknownServerError("gone"))
    assert seen == [7, UnknownServerError("gone")]
    assert effects.take_append(0) is None
