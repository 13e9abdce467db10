"""The sticky assignment: as balanced as the subscriptions allow, moving as few partitions as it can.

The algorithm under the ``cooperative-sticky`` assignor (Kafka's AbstractStickyAssignor,
``clients/src/main/java/org/apache/kafka/clients/consumer/internals/AbstractStickyAssignor.java``;
our own code, the same rules). Two goals, in this order:

1. **Balance**: with identical subscriptions, member counts differ by at most one; otherwise no
   partition could move from a member to a subscriber of its topic holding two or more fewer.
2. **Stickiness**: a member keeps the partitions it owned wherever balance allows, so a
   rebalance moves only what it must (a member joining a balanced group of ``N`` takes about
   ``P / (N + 1)`` partitions, all of them from the others' surplus).

It runs in two passes, each named after what it guarantees, under one rule for ties:

1. :func:`valid_ownership` -- *each partition has at most one previous owner*: a member's
   claims (``owned_partitions``) count only for existing partitions of topics it still
   subscribes to; of several members claiming one partition, the one with the highest
   generation keeps it, and if several claim it at that generation, none does (two members
   cannot both have owned it in one generation; one of them is confused, and neither is
   trusted).
2. *Everything is assigned, balanced*: with identical subscriptions, :func:`_constrained`
   computes the quotas directly (``P // N`` each, one more for ``P % N`` members; members that
   owned most keep the extra slots, and each keeps its lowest-numbered partitions up to its
   quota); otherwise :func:`_general` keeps every valid claim, deals the rest out by fewest
   assigned, partitions with fewest possible owners first, and then moves partitions from a
   member to a subscriber holding two or more fewer until no such move is left.

*Ties go back to the previous owner*: wherever two members are equally good for a partition,
the one that owned it wins; then the lower member id. The result depends on the input only,
never on the order members are listed in.

Runtime: ``O((P + N) log N)`` for identical subscriptions; the general balancing makes at most
``P * P / 2`` moves (each lowers the sum of squared member counts by at least 2), each found in
``O(N * N + P)``, and in practice a few.

Pure function of its input; safe from any task or thread.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping, Sequence

from stratalog.client.types import TopicPartition

from .assignor import Member, all_partitions, members_by_id

__all__ = ["sticky_assignment", "valid_ownership"]

logger = logging.getLogger(__name__)


def sticky_assignment(
    partitions_per_topic: Mapping[str, int],
    members: Sequence[Member],
    generations: Mapping[str, int | None],
) -> dict[str, list[TopicPartition]]:
    """Each member's partitions (sorted by topic, then number), keyed by member id.

    ``generations``: the generation each member's ``owned_partitions`` are from (``None`` when
    unknown, counted as -1), as the assignor read it from the subscription.

    Raises:
        ValueError: two members with the same member id.
    """
    by_id = members_by_id(members)
    ids = sorted(by_id)
    subscribed = {
        member_id: frozenset(
            t for t in by_id[member_id].subscription.topics if partitions_per_topic.get(t, 0) > 0
        )
        for member_id in ids
    }
    partitions = all_partitions(partitions_per_topic, set().union(*subscribed.values()))
    owned = valid_ownership(partitions, by_id, subscribed, generations)
    if len({subscribed[m] for m in ids}) <= 1:
        assignment = _constrained(ids, partitions, owned)
    else:
        assignment = _general(ids, partitions, owned, subscribed)
    return {member_id: sorted(assignment[member_id]) for member_id in ids}


def valid_ownership(
    partitions: Sequence[TopicPartition],
    by_id: Mapping[str, Member],
    subscribed: Mapping[str, frozenset[str]],
    generations: Mapping[str, int | None],
) -> dict[str, list[TopicPartition]]:
    """Pass 1: the previous owner of each partition, if one can be trusted (module docstring)."""
    exists = set(partitions)
    claims: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member_id in sorted(by_id):
        generation = generations.get(member_id)
        generation = -1 if generation is None else generation
        for tp in set(by_id[member_id].subscription.owned_partitions):
            if tp in exists and tp.topic in subscribed[member_id]:
                claims.setdefault(tp, []).append((generation, member_id))
    owned: dict[str, list[TopicPartition]] = {member_id: [] for member_id in by_id}
    for tp in partitions:
        claimants = claims.get(tp)
        if not claimants:
            continue
        newest = max(generation for generation, _ in claimants)
        winners = [member_id for generation, member_id in claimants if generation == newest]
        if len(winners) == 1:
            owned[winners[0]].append(tp)
        else:
            logger.warning(
                "members %s all claim %s in generation %d: none of them keeps it",
                winners, tp, newest,
            )
    return owned


def _previous_owners(owned: Mapping[str, list[TopicPartition]]) -> dict[TopicPartition, str]:
    return {tp: member_id for member_id, parts in owned.items() for tp in parts}


def _constrained(
    ids: list[str],
    partitions: list[TopicPartition],
    owned: Mapping[str, list[TopicPartition]],
) -> dict[str, list[TopicPartition]]:
    """Pass 2 when every member subscribes to the same topics: quotas computed, not searched.

    (Kafka's ConstrainedAssignmentBuilder.) ``min_quota = P // N``; ``extra = P % N`` members
    hold ``min_quota + 1``. Members visited by most owned first keep up to their quota of what
    they owned; the rest go, in (topic, partition) order, to the member holding fewest that
    still has room.
    """
    if not ids:
        return {}
    min_quota, extra = divmod(len(partitions), len(ids))
    over = 0  # members holding min_quota + 1, at most `extra`
    assignment: dict[str, list[TopicPartition]] = {}
    for member_id in sorted(ids, key=lambda m: (-len(owned[m]), m)):
        mine = sorted(owned[member_id], key=lambda tp: (tp.partition, tp.topic))
        if len(mine) <= min_quota:
            keep = mine
        elif over < extra:
            keep = mine[: min_quota + 1]
            over += 1
        else:
            keep = mine[:min_quota]
        assignment[member_id] = keep
    kept = {tp for parts in assignment.values() for tp in parts}
    previous = _previous_owners(owned)

    def has_room(member_id: str) -> bool:
        # Below the minimum, or at it while extra slots are left. Fewest first means every
        # member reaches min_quota before any takes an extra slot, and the counts add up to P
        # exactly, so some member always has room while a partition is left.
        held = len(assignment[member_id])
        return held < min_quota or (held == min_quota and over < extra)

    # The members with room by (count, member id); entries go stale as counts change and are
    # dropped when they reach the top (a lazy heap: O((P + N) log N) in all).
    with_room = [(len(assignment[m]), m) for m in ids if has_room(m)]
    heapq.heapify(with_room)
    for tp in partitions:
        if tp in kept:
            continue
        while with_room[0][0] != len(assignment[with_room[0][1]]) or not has_room(with_room[0][1]):
            heapq.heappop(with_room)
        fewest, member_id = with_room[0]
        owner = previous.get(tp)
        if owner is not None and len(assignment[owner]) == fewest and has_room(owner):
            member_id = owner  # a tie: back to the member that owned it
        if len(assignment[member_id]) == min_quota:
            over += 1
        assignment[member_id].append(tp)
        if has_room(member_id):
            heapq.heappush(with_room, (len(assignment[member_id]), member_id))
    return assignment


def _general(
    ids: list[str],
    partitions: list[TopicPartition],
    owned: Mapping[str, list[TopicPartition]],
    subscribed: Mapping[str, frozenset[str]],
) -> dict[str, list[TopicPartition]]:
    """Pass 2 for differing subscriptions: keep every valid claim, deal the rest, then balance.

    (Kafka's GeneralAssignmentBuilder.) Ends when no partition can move from a member to a
    subscriber of its topic holding two or more fewer: Kafka's own balance criterion.
    """
    assignment = {member_id: list(owned[member_id]) for member_id in ids}
    previous = _previous_owners(owned)
    # Per topic, its subscribers by (count, member id): a lazy heap whose entries go stale as
    # counts change and are refreshed when they reach the top.
    subscribers: dict[str, list[tuple[int, str]]] = {}
    for member_id in ids:
        for topic in subscribed[member_id]:
            subscribers.setdefault(topic, []).append((len(assignment[member_id]), member_id))
    for heap in subscribers.values():
        heapq.heapify(heap)
    # Partitions of topics with fewest subscribers first: they have the least choice.
    for tp in sorted(
        (tp for tp in partitions if tp not in previous),
        key=lambda tp: (len(subscribers[tp.topic]), tp),
    ):
        heap = subscribers[tp.topic]
        while heap[0][0] != len(assignment[heap[0][1]]):
            _, stale = heapq.heappop(heap)
            heapq.heappush(heap, (len(assignment[stale]), stale))
        member_id = heap[0][1]
        assignment[member_id].append(tp)
        heapq.heapreplace(heap, (len(assignment[member_id]), member_id))
    moves_max = len(partitions) * len(partitions) // 2 + 1
    for _ in range(moves_max):
        move = _next_move(ids, assignment, subscribed, previous)
        if move is None:
            return assignment
        tp, donor, receiver = move
        assignment[donor].remove(tp)
        assignment[receiver].append(tp)
    raise AssertionError(f"balancing {len(partitions)} partitions took over {moves_max} moves")


def _next_move(
    ids: list[str],
    assignment: Mapping[str, list[TopicPartition]],
    subscribed: Mapping[str, frozenset[str]],
    previous: Mapping[TopicPartition, str],
) -> tuple[TopicPartition, str, str] | None:
    """A (partition, donor, receiver) that narrows the spread, or None when balanced.

    The receiver holds fewest, the donor most (at least two more); of the donor's partitions the
    receiver subscribes to, one it owned before goes back first, then one the donor did not own
    (it moved this rebalance anyway), then the donor's last.
    """
    receivers = sorted(ids, key=lambda m: (len(assignment[m]), m))
    donors = sorted(ids, key=lambda m: (-len(assignment[m]), m))
    for receiver in receivers:
        for donor in donors:
            if len(assignment[donor]) < len(assignment[receiver]) + 2:
                break
            movable = [tp for tp in assignment[donor] if tp.topic in subscribed[receiver]]
            if not movable:
                continue
            tp = max(
                movable,
                key=lambda tp: (previous.get(tp) == receiver, previous.get(tp) != donor, tp),
            )
            return tp, donor, receiver
    return None
