"""The client's routing core (client/routing.py): the decision after a failed request about a
partition (:func:`reroute`), one request's steps to its leader (:class:`LeaderRouter`), the
walks over the brokers (:class:`BrokerWalk`, :class:`NewTopicWait`) and the check after
UNKNOWN_TOPIC_OR_PARTITION (:class:`TopicCheck`), driven by hand: situations in, decisions out,
no I/O."""

from __future__ import annotations

import grpc
import pytest

from stratalog.client import errors
from stratalog.client.metadata_cache import MetadataCache
from stratalog.client.routing import (
    ATTEMPT_TIME_MIN_S,
    NEW_TOPIC_WAIT_MS,
    NOT_THERE,
    REROUTES_MAX,
    AskCluster,
    Attempt,
    Backoff,
    BrokerWalk,
    CheckTopic,
    Found,
    LeaderRouter,
    NewTopicWait,
    Raise,
    Refresh,
    Reroute,
    Routing,
    Send,
    TopicCheck,
    reroute,
)
from stratalog.client.types import BrokerAddress, ClusterMetadata, PartitionLeadership


def _cache_metadata() -> ClusterMetadata:
    return ClusterMetadata(
        node_id=1, controller_id=1, controller_epoch=1,
        brokers=(BrokerAddress(1, "db1:1"), BrokerAddress(2, "db2:1"), BrokerAddress(3, "db3:1")),
        topics={"t": (PartitionLeadership(0, 1, 4, (1, 2, 3), (1, 2, 3)),)},
    )


def _cache() -> MetadataCache:
    cache = MetadataCache()
    cache.update(_cache_metadata(), "db1:1", ["t"])
    return cache


def _not_leader(**hint: str) -> errors.NotLeaderOrFollowerError:
    return errors.NotLeaderOrFollowerError("not the leader", metadata=hint)


def _decide(cache: MetadataCache, error: errors.StratalogError, *, refused_by: str = "db1:1",
            cluster: bool = True, resendable: bool = False) -> Reroute:
    return reroute(cache, error, topic="t", partition=0, refused_by=refused_by,
                   cluster=cluster, resendable=resendable)


def test_a_hint_naming_another_node_goes_there_at_once() -> None:
    cache = _cache()
    error = _not_leader(leader_id="2", leader_epoch="5", leader_address="db2:1")
    assert _decide(cache, error) is Reroute.NOW
    assert cache.route("t", 0).address == "db2:1"


def test_a_hint_naming_the_refusing_node_itself_waits_for_a_refresh() -> None:
    cache = _cache()
    error = _not_leader(leader_id="1", leader_epoch="5", leader_address="db1:1")
    assert _decide(cache, error) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")


def test_no_hint_waits_for_a_refresh() -> None:
    cache = _cache()
    assert _decide(cache, _not_leader(leader_id="-1")) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")


@pytest.mark.parametrize("cls", [errors.LeaderNotAvailableError, errors.UnknownLeaderEpochError])
def test_other_routing_errors_wait_for_a_refresh(cls: type[errors.StratalogError]) -> None:
    cache = _cache()
    assert _decide(cache, cls("election pending")) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")


def test_a_gone_broker_in_a_cluster_resends_reads_only() -> None:
    gone = errors.BrokerUnavailableError("connection refused", code=grpc.StatusCode.UNAVAILABLE)
    cache = _cache()
    assert _decide(cache, gone, resendable=True) is Reroute.AFTER_BACKOFF
    assert cache.needs_refresh("t")
    cache = _cache()
    # A Produce whose answer was lost may have been appended: the Producer's to resend.
    assert _decide(cache, gone, resendable=False) is Reroute.RAISE
    assert cache.needs_refresh("t")  # but the next request asks for the leader first


def test_a_gone_broker_is_asked_for_metadata_last() -> None:
    gone = errors.BrokerUnavailableError("connection refused", code=grpc.StatusCode.UNAVAILABLE)
    cache = _cache()
    _decide(cache, gone, refused_by="db1:1", resendable=True)
    assert cache.is_unreachable("db1:1")
    assert cache.candidates([], first="db1:1") == ["db2:1", "db3:1", "db1:1"]


def test_a_single_server_gone_is_only_raised() -> None:
    cache = MetadataCache()
    gone = errors.BrokerUnavailableError("connection refused", code=grpc.StatusCode.UNAVAILABLE)
    assert _decide(cache, gone, cluster=False, resendable=True) is Reroute.RAISE
    assert cache.updates == 0


@pytest.mark.parametrize("error", [
    errors.NotEnoughReplicasError("isr 1 < 2"),
    errors.OffsetOutOfRangeError("offset 9"),
    errors.FencedLeaderEpochError("epoch 3 < 4"),
])
def test_other_errors_are_the_callers(error: errors.StratalogError) -> None:
    cache = _cache()
    assert _decide(cache, error, resendable=True) is Reroute.RAISE
    assert not cache.needs_refresh("t")


# --- LeaderRouter: one request's steps, driven by hand (no I/O) -------------------------------
#
# Each situation is a script: what the router says, and what the test (playing the client's I/O
# loop) reports back. ``_drive`` checks each step and applies each report; the clock is a number.

_HINT_2 = dict(leader_id="2", leader_epoch="5", leader_address="db2:1")
_GONE = errors.BrokerUnavailableError("Socket closed", code=grpc.StatusCode.UNAVAILABLE)
_NO_CONNECTION = errors.BrokerUnavailableError(
    "failed to connect to all addresses", code=grpc.StatusCode.UNAVAILABLE, unsent=True)
_UNKNOWN = errors.UnknownTopicOrPartitionError("unknown topic 't'")
_OUT_OF_RANGE = errors.OffsetOutOfRangeError("offset 9")


def _routing(*, cluster: bool, filled: bool = True) -> Routing:
    targets = ["db1:1", "db3:1"] if cluster else ["db1:1"]
    return Routing(targets, _cache() if filled else MetadataCache(), retry_backoff_s=0.1)


def _router(routing: Routing, *, resendable: bool = False,
            timeout_s: float | None = 10.0) -> LeaderRouter:
    return LeaderRouter(routing, "t", 0, resendable=resendable, timeout_s=timeout_s, now=0.0)


def _drive(router: LeaderRouter, script: list[tuple[object, tuple]], now: float = 0.0) -> None:
    """``script``: (the step expected, the report: ("send_failed", error),
    ("connect_failed", error), ("refreshed",), ("refresh_failed", error),
    ("topic_checked", bool), ("wait", seconds) or () for none)."""
    for number, (expected, report) in enumerate(script):
        step = router.next_step(now)
        assert step == expected, f"step {number}: {step} != {expected}"
        if report and report[0] == "wait":
            now += report[1]
        elif report:
            getattr(router, report[0])(*report[1:])


def test_one_target_goes_to_it_unconnected_and_raises_its_own_errors() -> None:
    """A single server answers for itself: its error is the caller's, the cache untouched, and
    no Metadata call is made (no Refresh)."""
    routing = _routing(cluster=False, filled=False)
    router = _router(routing, resendable=True)
    _drive(router, [
        (Send("db1:1", connect=False), ("send_failed", _GONE)),
        (Raise(_GONE), ()),
    ])
    assert not routing.route_by_metadata and routing.cache.updates == 0


def test_one_target_follows_a_hint_at_once_and_routes_by_metadata_from_then_on() -> None:
    routing = _routing(cluster=False)
    router = _router(routing)
    _drive(router, [
        (Send("db1:1", connect=False), ("send_failed", _not_leader(**_HINT_2))),
        (Send("db2:1", connect=True), ()),
    ])
    assert routing.route_by_metadata
    assert _router(routing).next_step(0.0) == Send("db2:1", connect=True)


def test_a_cluster_refreshes_an_unknown_topic_first() -> None:
    routing = _routing(cluster=True, filled=False)
    _drive(_router(routing), [
        (Refresh(), ("refreshed",)),
        (Send("db1:1", connect=True), ()),  # nothing known after it: home answers for itself
    ])


def test_no_hint_backs_off_refreshes_and_goes_to_the_new_leader() -> None:
    routing = _routing(cluster=True)
    router = _router(routing)

    def election() -> None:
        routing.cache.update(ClusterMetadata(
            node_id=1, controller_id=1, controller_epoch=1,
            brokers=(BrokerAddress(1, "db1:1"), BrokerAddress(3, "db3:1")),
            topics={"t": (PartitionLeadership(0, 3, 5, (1, 3), (1, 3)),)},
        ), "db1:1", ["t"])

    _drive(router, [
        (Send("db1:1", connect=True), ("send_failed", _not_leader(leader_id="-1"))),
        (Backoff(0.1), ("wait", 0.1)),
        (Refresh(), ()),
    ])
    election()
    router.refreshed()
    assert router.next_step(0.1) == Send("db3:1", connect=True)


@pytest.mark.parametrize(("resendable", "failure", "then"), [
    # A read that may have been answered and lost goes again; a Produce does not...
    (True, ("send_failed", _GONE), Backoff(0.1)),
    (False, ("send_failed", _GONE), Raise(_GONE)),
    # ...unless it was provably never sent: no connection, or gRPC found none for the call.
    (False, ("connect_failed", _GONE), Backoff(0.1)),
    (False, ("send_failed", _NO_CONNECTION), Backoff(0.1)),
    # A server's routing error: nothing was done, a Produce goes again too.
    (False, ("send_failed", errors.LeaderNotAvailableError("election")), Backoff(0.1)),
    # An answer that is the caller's.
    (True, ("send_failed", _OUT_OF_RANGE), Raise(_OUT_OF_RANGE)),
])
def test_a_failed_attempt_in_a_cluster(resendable: bool, failure: tuple, then: object) -> None:
    routing = _routing(cluster=True)
    _drive(_router(routing, resendable=resendable), [
        (Send("db1:1", connect=True), failure),
        (then, ()),
    ])
    if failure[1] in (_GONE, _NO_CONNECTION):
        assert routing.cache.is_unreachable("db1:1") and routing.cache.needs_refresh("t")


def test_an_unknown_topic_goes_again_only_if_a_refresh_names_its_leader() -> None:
    routing = _routing(cluster=True)
    _drive(_router(routing), [
        (Send("db1:1", connect=True), ("send_failed", _UNKNOWN)),
        (CheckTopic(), ("topic_checked", True)),
        (Backoff(0.1), ("wait", 0.1)),
        (Send("db1:1", connect=True), ("send_failed", _UNKNOWN)),
        (CheckTopic(), ("topic_checked", False)),
        (Raise(_UNKNOWN), ()),
    ])


def test_no_leader_until_the_deadline_raises_leader_not_available() -> None:
    routing = _routing(cluster=True)
    routing.cache.update(ClusterMetadata(
        node_id=1, controller_id=1, controller_epoch=1,
        brokers=(BrokerAddress(1, "db1:1"), BrokerAddress(3, "db3:1")),
        topics={"t": (PartitionLeadership(0, -1, 5, (1, 3), (1, 3)),)},
    ), "db1:1", ["t"])
    router = _router(routing, timeout_s=0.25)
    now = 0.0
    steps = []
    for _ in range(10):
        step = router.next_step(now)
        steps.append(step)
        if isinstance(step, Refresh):
            router.refreshed()  # the election is still pending
        elif isinstance(step, Backoff):
            now += step.delay_s
        else:
            break
    assert steps[:4] == [Backoff(0.1), Refresh(), Backoff(0.1), Refresh()]
    assert steps[4] == Backoff(pytest.approx(0.05))  # the backoff is cut at the deadline
    assert isinstance(steps[-1], Raise)
    assert isinstance(steps[-1].error, errors.LeaderNotAvailableError)


def test_a_refresh_cut_by_the_deadline_raises_the_error_that_made_it() -> None:
    timeout = errors.RequestTimeoutError("no metadata", code=grpc.StatusCode.DEADLINE_EXCEEDED)
    routing = _routing(cluster=True)
    not_leader = _not_leader(leader_id="-1")
    _drive(_router(routing), [
        (Send("db1:1", connect=True), ("send_failed", not_leader)),
        (Backoff(0.1), ("wait", 0.1)),
        (Refresh(), ("refresh_failed", timeout)),
        (Raise(not_leader), ()),
    ])
    assert not_leader.__cause__ is timeout
    # Without an error before it, the timeout is the news.
    routing = _routing(cluster=True, filled=False)
    _drive(_router(routing), [(Refresh(), ("refresh_failed", timeout)), (Raise(timeout), ())])


def test_a_refresh_nobody_answered_blames_the_last_address_and_backs_off() -> None:
    routing = _routing(cluster=True)
    _drive(_router(routing, resendable=True), [
        (Send("db1:1", connect=True), ("send_failed", _not_leader(leader_id="-1"))),
        (Backoff(0.1), ("wait", 0.1)),
        (Refresh(), ("refresh_failed", _GONE)),
        (Backoff(0.1), ()),
    ])
    assert routing.cache.is_unreachable("db1:1")


def test_a_passed_deadline_before_any_attempt_is_a_timeout() -> None:
    router = _router(_routing(cluster=True), timeout_s=0.0005)
    step = router.next_step(0.0)
    assert isinstance(step, Raise) and isinstance(step.error, errors.RequestTimeoutError)
    assert router.next_step(1.0) is step  # decided: stays decided


def test_hints_that_go_round_in_circles_stop_after_reroutes_max() -> None:
    routing = _routing(cluster=True)
    router = _router(routing, timeout_s=None)
    hints = [_HINT_2, dict(leader_id="1", leader_epoch="5", leader_address="db1:1")]
    for attempt in range(REROUTES_MAX + 1):
        step = router.next_step(0.0)
        assert isinstance(step, Send), attempt
        router.send_failed(_not_leader(**hints[attempt % 2]))
    step = router.next_step(0.0)
    assert isinstance(step, Raise) and isinstance(step.error, errors.NotLeaderOrFollowerError)


def test_each_attempt_gets_what_is_left_of_the_deadline() -> None:
    router = _router(_routing(cluster=True), timeout_s=2.0)
    assert router.timeout_s(0.5) == 1.5
    assert router.timeout_s(3.0) == ATTEMPT_TIME_MIN_S
    assert _router(_routing(cluster=True), timeout_s=None).timeout_s(3.0) is None


def test_reports_out_of_turn_are_programmer_errors() -> None:
    router = _router(_routing(cluster=True))
    with pytest.raises(AssertionError):
        router.refreshed()  # no Refresh was asked for


# --- BrokerWalk: a request any broker answers, asked of each in turn --------------------------


def test_the_walk_asks_home_first_and_the_unreachable_last() -> None:
    routing = _routing(cluster=True)
    routing.cache.mark_unreachable("db1:1")
    walk = BrokerWalk(routing, deadline=10.0)
    asked = []
    while (attempt := walk.next_attempt(1.0)) is not None:
        asked.append(attempt)
    assert asked == [Attempt("db2:1", 9.0), Attempt("db3:1", 9.0), Attempt("db1:1", 9.0)]


def test_a_broker_that_does_not_answer_is_asked_last_and_its_error_kept() -> None:
    routing = _routing(cluster=True)
    walk = BrokerWalk(routing, deadline=None)
    first = walk.next_attempt(0.0)
    assert first == Attempt("db1:1", None)
    walk.unanswered(first.address, _GONE)
    assert routing.cache.is_unreachable("db1:1")
    second = walk.next_attempt(0.0)
    assert second is not None and second.address == "db2:1"
    walk.unanswered(second.address, _NO_CONNECTION)
    assert (walk.first_error, walk.last_error) == (_GONE, _NO_CONNECTION)
    # The next request asks them last.
    assert routing.candidates()[-2:] == ["db1:1", "db2:1"]


def test_the_walk_stops_at_the_deadline() -> None:
    walk = BrokerWalk(_routing(cluster=True), deadline=1.0)
    assert walk.next_attempt(0.5) == Attempt("db1:1", 0.5)
    assert walk.next_attempt(1.0) is None
    assert walk.first_error is None  # none failed: the caller raises walk.timed_out(...)
    assert isinstance(walk.timed_out("no answer"), errors.RequestTimeoutError)


def test_a_topic_no_broker_knows_is_forgotten() -> None:
    routing = _routing(cluster=True)
    walk = BrokerWalk(routing, deadline=None)
    assert not walk.topics_unknown(["t"])  # nobody said so yet
    walk.next_attempt(0.0)
    walk.unknown_topic(_UNKNOWN)
    assert walk.topics_unknown(["t"])
    assert not routing.cache.knows("t")


def test_refreshes_are_retry_backoff_apart_and_one_done_meanwhile_is_taken() -> None:
    routing = _routing(cluster=True, filled=False)
    assert routing.refresh_wait_s("t", asked_at=0.0, now=0.0) < 0  # never refreshed: at once
    routing.cache.update(_cache_metadata(), "db1:1", ["t"])
    routing.refresh_ended(1.0)
    # Asked before that refresh ended, and the topic is fresh now: take it.
    assert routing.refresh_wait_s("t", asked_at=0.5, now=1.0) is None
    # Asked after it, or the topic stale again: wait out the backoff from its end.
    assert routing.refresh_wait_s("t", asked_at=1.02, now=1.02) == pytest.approx(0.08)
    routing.cache.invalidate("t")
    assert routing.refresh_wait_s("t", asked_at=0.5, now=1.05) == pytest.approx(0.05)


# --- AskCluster: a client with one target learns whether it talks to a cluster ----------------


def _single_server_metadata() -> ClusterMetadata:
    return ClusterMetadata(node_id=1, controller_id=1, controller_epoch=1,
                           brokers=(BrokerAddress(1, "db1:1"),), topics={})


def test_a_metadata_answer_naming_other_brokers_makes_the_client_route_by_metadata() -> None:
    routing = _routing(cluster=False, filled=False)
    assert not routing.in_cluster()
    assert not routing.take_cluster(_single_server_metadata(), "db1:1")
    assert not routing.route_by_metadata and not routing.in_cluster()
    assert routing.take_cluster(_cache_metadata(), "db1:1")
    assert routing.route_by_metadata and routing.in_cluster()


# --- TopicCheck: after UNKNOWN_TOPIC_OR_PARTITION, is a leader known elsewhere? ---------------


def test_in_a_cluster_the_topic_is_refreshed_and_a_route_found_says_known() -> None:
    routing = _routing(cluster=True)
    check = TopicCheck(routing, "t", 0, deadline=10.0)
    assert check.next_step(1.0) == Refresh()
    assert routing.cache.needs_refresh("t")  # marked stale: the refresh asks again
    routing.cache.update(_cache_metadata(), "db2:1", ["t"])  # what the refresh brought
    check.refreshed()
    assert check.next_step(1.5) == Found(True)
    assert check.next_step(1.5) == Found(True)  # the answer stays


@pytest.mark.parametrize("outcome", ["refresh_failed", "no_route"])
def test_a_refresh_that_fails_or_names_no_leader_says_not_known(outcome: str) -> None:
    routing = _routing(cluster=True)
    check = TopicCheck(routing, "t", 0, deadline=None)
    assert check.next_step(0.0) == Refresh()
    if outcome == "refresh_failed":
        check.refresh_failed()
    else:
        routing.cache.forget("t")  # every broker said it does not know the topic
        check.refreshed()
    assert check.next_step(0.0) == Found(False)


@pytest.mark.parametrize(
    ("deadline", "answer", "steps"),
    [
        # A single server that does not have the topic: no refresh, not known.
        (10.0, "single", [AskCluster(9.0), Found(False)]),
        (None, "unanswered", [AskCluster(None), Found(False)]),
        # It names other brokers: a cluster after all, so the topic is refreshed.
        (10.0, "cluster", [AskCluster(9.0), Refresh(), Found(True)]),
    ],
)
def test_a_client_with_one_target_asks_whether_it_is_a_cluster_first(
    deadline: float | None, answer: str, steps: list[object]
) -> None:
    routing = _routing(cluster=False, filled=False)
    check = TopicCheck(routing, "t", 0, deadline=deadline)
    seen = []
    while True:
        step = check.next_step(1.0)
        seen.append(step)
        if isinstance(step, Found):
            break
        if isinstance(step, AskCluster):
            if answer == "unanswered":
                check.cluster_unanswered()
            else:
                metadata = _single_server_metadata() if answer == "single" else _cache_metadata()
                check.cluster_answered(metadata, "db1:1")
        else:
            routing.cache.update(_cache_metadata(), "db1:1", ["t"])
            check.refreshed()
    assert seen == steps
    assert routing.route_by_metadata is (answer == "cluster")


def test_topic_check_reports_out_of_turn_are_programmer_errors() -> None:
    check = TopicCheck(_routing(cluster=True), "t", 0, deadline=None)
    with pytest.raises(AssertionError):
        check.refreshed()  # no Refresh was asked for
    check.next_step(0.0)
    with pytest.raises(AssertionError):
        check.cluster_unanswered()  # no AskCluster was asked for


# --- NewTopicWait: DescribeTopic of a topic one server did not know ---------------------------


def _walk_wait(wait: NewTopicWait, now: float) -> list[object]:
    """The steps until a Backoff or the end, each attempt answered with a NOT_THERE error."""
    steps = []
    while (step := wait.next_step(now)) is not None:
        steps.append(step)
        if isinstance(step, Backoff):
            break
    return steps


def test_the_servers_are_asked_in_rounds_a_backoff_apart_until_the_wait_ends() -> None:
    routing = _routing(cluster=True)
    wait = NewTopicWait(routing, timeout_s=None, now=0.0)
    assert wait.wait_until == NEW_TOPIC_WAIT_MS / 1000
    end = wait.wait_until
    assert _walk_wait(wait, 1.0) == [
        Attempt("db1:1", end - 1.0), Attempt("db2:1", end - 1.0), Attempt("db3:1", end - 1.0),
        Backoff(0.1),
    ]
    # A broker that stopped answering meanwhile is asked last in the next round.
    routing.cache.mark_unreachable("db1:1")
    assert [step.address for step in _walk_wait(wait, 2.0)[:-1]] == ["db2:1", "db3:1", "db1:1"]
    # The backoff is cut at the end of the wait, and then it is over.
    assert _walk_wait(wait, end - 0.05) == [
        Attempt("db2:1", pytest.approx(0.05)), Attempt("db3:1", pytest.approx(0.05)),
        Attempt("db1:1", pytest.approx(0.05)), Backoff(pytest.approx(0.05)),
    ]
    assert wait.next_step(end) is None
    assert wait.next_step(end) is None


def test_the_wait_ends_with_the_request_timeout_even_within_a_round() -> None:
    wait = NewTopicWait(_routing(cluster=True), timeout_s=1.0, now=0.0)
    assert wait.wait_until == 1.0
    assert wait.next_step(0.5) == Attempt("db1:1", 0.5)
    assert wait.next_step(1.0) is None  # no time left for db2:1


@pytest.mark.parametrize(
    ("answer", "first_attempt"),
    [("single", None), ("unanswered", None), ("cluster", Attempt("db1:1", 2.0))],
)
def test_a_client_with_one_target_waits_only_if_it_learns_it_is_a_cluster(
    answer: str, first_attempt: Attempt | None
) -> None:
    routing = _routing(cluster=False, filled=False)
    wait = NewTopicWait(routing, timeout_s=2.0, now=0.0)
    assert wait.next_step(0.0) == AskCluster(2.0)  # the request's timeout, not the wait's
    if answer == "unanswered":
        wait.cluster_unanswered()
    else:
        metadata = _single_server_metadata() if answer == "single" else _cache_metadata()
        wait.cluster_answered(metadata, "db1:1")
    assert wait.next_step(0.0) == first_attempt


def test_a_server_that_does_not_know_the_topic_or_does_not_answer_is_not_there() -> None:
    assert isinstance(_UNKNOWN, NOT_THERE)
    assert isinstance(_GONE, NOT_THERE) and isinstance(_NO_CONNECTION, NOT_THERE)
    assert not isinstance(_OUT_OF_RANGE, NOT_THERE)
