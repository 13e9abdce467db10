"""Incremental fetch sessions (KIP-227): the server remembers a consumer's partitions between
Fetch requests, so that a request names only what changed and an answer only what has news.

The intuition: a consumer of 100 partitions that polls an idle topic sends 100 partition
entries and gets 100 back, every poll. With a session the first request (session id 0, epoch
0: "open one") is full; the answer gives a session id, and from then on each request (that id,
epoch 1, 2, ...) names only the partitions added or whose fetch position changed and lists in
``forgotten_topics_data`` those to drop, and each answer names only the partitions with
something to say: records, a changed high watermark, last stable offset or log start offset,
or an error. Kafka's ``core/src/main/scala/kafka/server/FetchSession.scala`` is the model
(``FetchSessionCache``, ``FetchManager.newContext``, ``FullFetchContext``,
``IncrementalFetchContext``, ``SessionlessFetchContext``, ``SessionErrorContext``); the rules
a request's ``(session_id, session_epoch)`` follow (Kafka's ``FetchMetadata``):

=============================  ================================================================
``(0, -1)``                    sessionless: a full request, a full answer, no session (Fetch
                               v4-v6 and librdkafka always)
``(0, 0)``                     full: a full answer, and a new session if the cache has room
                               (its id in the answer, next epoch 1); else session id 0
``(id, 0)`` / ``(id, -1)``     the session ``id`` is closed (if it is the caller's), then as
                               ``(0, 0)`` / ``(0, -1)``
``(id, e)``, ``e`` > 0         incremental: FETCH_SESSION_ID_NOT_FOUND if no session ``id`` is
                               the caller's, INVALID_FETCH_SESSION_EPOCH unless ``e`` is its
                               epoch; else its partitions are updated and all of them read
=============================  ================================================================

Invariants (``FetchSessionCache.check`` asserts them; the unit tests call it after every step):

* at most ``slots_max`` sessions; ids are unique, never 0, random (31 bits), so one client
  cannot name another's session by counting;
* a session belongs to the principal that opened it; every other principal is told
  FETCH_SESSION_ID_NOT_FOUND for it, and cannot close it;
* the cached partitions of all sessions together number at most ``partitions_max``: the
  partitions one request of ``kafka_request_bytes_max`` can name (the decoder refuses a count
  whose items cannot fit in the request's bytes: hot_messages.py), and at most
  :data:`FETCH_SESSION_PARTITIONS_MAX`; a request that would grow
  the cache past it opens no session (a full one) or closes its session (an incremental one,
  answered FETCH_SESSION_ID_NOT_FOUND: the client starts over with a full request). Memory is
  therefore O(``partitions_max``) whatever the clients do; each cached partition is one
  :class:`CachedPartition` (9 slots), its key and one dict entry (about 250 bytes);
* a session's epoch is in 1 .. 2**31 - 1 and wraps to 1 (Kafka's ``FetchMetadata.nextEpoch``).

Eviction (Kafka's ``FetchSessionCacheShard.tryEvict`` without its privileged followers: no
follower fetches here): a full request finding the cache full evicts the least recently used
session if it was last used more than ``eviction_ms`` ago (Kafka's
``min.incremental.fetch.session.eviction.ms``, 120 s); else the smallest session created more
than ``eviction_ms`` ago, if the new one has at least as many partitions; else it gets session
id 0 and fetches without one, as Kafka answers. A session is also dropped when its last
partition is forgotten. Sessions live in memory only: a restart forgets them all, and a
client's next incremental request gets FETCH_SESSION_ID_NOT_FOUND and starts over.

Concurrency: event-loop only; sans-IO (the caller passes the time). A request's context is
made before its reads and answered after them; between the two another request may move the
same session on, and the first is then answered INVALID_FETCH_SESSION_EPOCH (Kafka's "possible
duplicate request"), never with a mixed state.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from stratalog.server.kafka.error_codes import Code

__all__ = [
    "FETCH_PARTITION_BYTES_MIN",
    "FETCH_SESSION_PARTITIONS_MAX",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "PartitionAnswer",
    "PartitionWant",
    "next_epoch",
]

#: A request's session id that names no session (Kafka's ``FetchMetadata.INVALID_SESSION_ID``).
INVALID_SESSION_ID = 0
#: The epoch of a full request that asks for a session (``FetchMetadata.INITIAL_EPOCH``).
INITIAL_EPOCH = 0
#: The epoch of a full request that wants no session (``FetchMetadata.FINAL_EPOCH``).
FINAL_EPOCH = -1
#: Kafka's default ``min.incremental.fetch.session.eviction.ms``.
EVICTION_MS_DEFAULT = 120_000
#: The fewest bytes one partition of a Fetch request takes from v7 (the first with sessions):
#: partition int32, fetch_offset int64, log_start_offset int64, partition_max_bytes int32
#: (hot_messages.py's layout; a test checks the two agree).
FETCH_PARTITION_BYTES_MIN = 24
#: The most partitions all sessions together cache, whatever ``kafka_request_bytes_max``
#: allows one request to name: about 50 MB at ~250 bytes each (a hundred consumers of 2,000
#: partitions each). Beyond it a client fetches without a session, which costs it bytes only.
FETCH_SESSION_PARTITIONS_MAX = 200_000

_FETCH_SESSION_ID_NOT_FOUND = Code.FETCH_SESSION_ID_NOT_FOUND
_INVALID_FETCH_SESSION_EPOCH = Code.INVALID_FETCH_SESSION_EPOCH
_NONE = Code.NONE
_EPOCH_MAX = 2**31 - 1
_SESSION_ID_MAX = 2**31 - 1

TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``): -1 stays -1 (a
    session's last request), the largest wraps to 1 (0 is a full request's)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _EPOCH_MAX else epoch + 1


class PartitionWant(NamedTuple):
    """One partition a request asks for, as its request entry says (the fields a session
    keeps between requests). A tuple: one is made per partition of every Fetch that names
    a session or asks for one."""

    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1


class PartitionAnswer(NamedTuple):
    """What the answer of one partition says that a session compares with its last answer.
    ``records_bytes`` is the size of the records it carries."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records_bytes: int


class CachedPartition:
    """One partition of a session: the client's last request entry for it and what the
    server last answered about it (-1: nothing yet). Kafka's ``CachedPartition``, with the
    last stable offset too (a read_committed consumer waits on it)."""

    __slots__ = ("current_leader_epoch", "fetch_offset", "fetcher_log_start_offset",
                 "high_watermark", "last_stable_offset", "log_start_offset", "partition",
                 "partition_max_bytes", "topic")

    def __init__(self, want: PartitionWant) -> None:
        self.topic = want.topic
        self.partition = want.partition
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.update_request(want)

    def update_request(self, want: PartitionWant) -> None:
        """Take the request entry's fields (Kafka's ``updateRequestParams``)."""
        self.fetch_offset = want.fetch_offset
        self.partition_max_bytes = want.partition_max_bytes
        self.current_leader_epoch = want.current_leader_epoch
        self.fetcher_log_start_offset = want.log_start_offset

    def want(self) -> PartitionWant:
        """The request entry the session stands for."""
        return PartitionWant(self.topic, self.partition, self.fetch_offset,
                             self.partition_max_bytes, self.current_leader_epoch,
                             self.fetcher_log_start_offset)

    def maybe_update_answer(self, answer: PartitionAnswer) -> bool:
        """Remember ``answer`` and say whether an incremental answer must name this partition
        (Kafka's ``maybeUpdateResponseData``): it carries records or an error, or a bound the
        client last heard changed."""
        must_answer = answer.records_bytes > 0 or answer.error_code != _NONE
        if answer.error_code != _NONE:
            # An error's -1s are not bounds: the next good answer must say the real ones.
            self.high_watermark = self.last_stable_offset = self.log_start_offset = -1
            return True
        if self.high_watermark != answer.high_watermark:
            self.high_watermark = answer.high_watermark
            must_answer = True
        if self.last_stable_offset != answer.last_stable_offset:
            self.last_stable_offset = answer.last_stable_offset
            must_answer = True
        if self.log_start_offset != answer.log_start_offset:
            self.log_start_offset = answer.log_start_offset
            must_answer = True
        return must_answer


class FetchSession:
    """A session: its id, the principal that owns it, its next expected epoch, and its
    partitions in the order they are read (those that last carried records move to the end,
    as Kafka's ``IncrementalFetchContext`` does, so that ``max_bytes`` is shared round-robin).
    Owned by the cache; event-loop only."""

    __slots__ = ("created_ms", "epoch", "id", "last_used_ms", "partitions", "principal")

    def __init__(self, session_id: int, principal: str, now_ms: int) -> None:
        self.id = session_id
        self.principal = principal
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions: dict[TopicPartition, CachedPartition] = {}
        self.created_ms = now_ms
        self.last_used_ms = now_ms


class FetchContext:
    """How one Fetch request is served (Kafka's ``FetchContext``): which partitions to read
    (:meth:`wants`), then which answers to send and with what session id and error
    (:meth:`answer`). Made by :meth:`FetchSessionCache.new_context`.

    ``kind`` is ``"sessionless"``, ``"full"``, ``"incremental"`` or ``"session_error"`` (the
    metric's label). ``error_code`` is the request's error (a session error: nothing is read).
    """

    __slots__ = ("_cache", "_principal", "_session", "_session_epoch", "_wants", "error_code",
                 "kind")

    def __init__(self, cache: FetchSessionCache, kind: str, wants: list[PartitionWant],
                 error_code: int = _NONE, session: FetchSession | None = None,
                 principal: str = "") -> None:
        self._cache = cache
        self.kind = kind
        self._wants = wants
        self.error_code = error_code
        self._session = session
        # The epoch the session moved to when this request was accepted: still its epoch at
        # answer time unless another request used the session meanwhile.
        self._session_epoch = session.epoch if session is not None else 0
        self._principal = principal

    def wants(self) -> list[PartitionWant]:
        """The partitions to read, in order: the request's (full, sessionless), the session's
        (incremental), none (a session error)."""
        return self._wants

    def answer(self, answers: dict[TopicPartition, PartitionAnswer],
               now_ms: int) -> tuple[int, int, list[TopicPartition]]:
        """``(error_code, session_id, partitions to answer)`` once ``answers`` (one per
        :meth:`wants` entry) are known. A full context opens its session here, from the
        answers (Kafka's ``FullFetchContext.updateAndGenerateResponseData``); an incremental
        one keeps only the partitions with something to say."""
        if self.kind == "session_error":
            return self.error_code, INVALID_SESSION_ID, []
        if self.kind == "sessionless":
            return _NONE, INVALID_SESSION_ID, list(answers)
        if self.kind == "full":
            session_id = self._cache.maybe_create_session(
                self._principal, self._wants, answers, now_ms)
            return _NONE, session_id, list(answers)
        session = self._session
        assert session is not None
        if self._cache.get(session.id) is not session or session.epoch != self._session_epoch:
            # Another request moved (or closed) the session while this one read.
            return _INVALID_FETCH_SESSION_EPOCH, session.id, []
        selected = []
        for key, answer in answers.items():
            cached = session.partitions.get(key)
            if cached is None:  # forgotten by a later request meanwhile
                continue
            if cached.maybe_update_answer(answer):
                selected.append(key)
                if answer.records_bytes > 0:
                    # Last in the read order next time (round-robin of max_bytes).
                    session.partitions[key] = session.partitions.pop(key)
        return _NONE, session.id, selected


class FetchSessionCache:
    """The server's fetch sessions (module docstring: rules, invariants, memory bound,
    eviction). ``slots_max`` 0 disables sessions: every request is served as before KIP-227
    (a full request gets session id 0; one naming a session FETCH_SESSION_ID_NOT_FOUND).

    Complexity: a lookup, an update and a touch are O(partitions named); a new session when
    the cache is full is O(``slots_max``) (the scan for the smallest evictable session).
    ``on_evict`` is called once per evicted session (a metric's counter).
    """

    def __init__(self, slots_max: int, partitions_max: int,
                 eviction_ms: int = EVICTION_MS_DEFAULT, *, rng: random.Random | None = None,
                 on_evict: Callable[[], None] | None = None) -> None:
        assert slots_max >= 0 and partitions_max >= 1 and eviction_ms >= 0
        self.slots_max = slots_max
        self.partitions_max = partitions_max
        self.eviction_ms = eviction_ms
        self._rng = rng if rng is not None else random.SystemRandom()
        self._on_evict = on_evict
        # Session id -> session, least recently used first (touch moves one to the end).
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.partitions_cached = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[FetchSession]:
        return iter(list(self._sessions.values()))

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_context(self, principal: str, session_id: int, session_epoch: int,
                    wants: list[PartitionWant], forgotten: Iterable[TopicPartition],
                    now_ms: int) -> FetchContext:
        """The context of a Fetch request (v7+) of ``principal`` naming ``session_id`` and
        ``session_epoch`` (Kafka's ``FetchManager.newContext``; the module docstring's
        table). An incremental request's partitions update its session here, and the
        session's epoch moves on."""
        if session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                session = self._sessions.get(session_id)
                if session is not None and session.principal == principal:
                    self._remove(session)
            if session_epoch == FINAL_EPOCH or self.slots_max == 0:
                return FetchContext(self, "sessionless", wants)
            return FetchContext(self, "full", wants, principal=principal)
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            # Another principal's session is as good as none: its id tells the caller nothing.
            return FetchContext(self, "session_error", [], _FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != session_epoch:
            return FetchContext(self, "session_error", [], _INVALID_FETCH_SESSION_EPOCH)
        # Kafka's order (FetchSession.update): the request's partitions added or updated,
        # then the forgotten ones removed.
        partitions = session.partitions
        size_before = len(partitions)
        for want in wants:
            cached = partitions.get((want.topic, want.partition))
            if cached is None:
                partitions[(want.topic, want.partition)] = CachedPartition(want)
            else:
                cached.update_request(want)
        for key in forgotten:
            partitions.pop(key, None)
        self.partitions_cached += len(partitions) - size_before
        if self.partitions_cached > self.partitions_max:
            # Past the bound (the growth is one request's at most): the session goes, and the
            # client starts over with a full request.
            self._remove(session)
            return FetchContext(self, "session_error", [], _FETCH_SESSION_ID_NOT_FOUND)
        if not partitions:
            # Kafka closes a session left with nothing; the request is answered empty.
            self._remove(session)
            return FetchContext(self, "sessionless", [])
        self._touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(self, "incremental", [c.want() for c in partitions.values()],
                            session=session)

    def maybe_create_session(self, principal: str, wants: list[PartitionWant],
                             answers: dict[TopicPartition, PartitionAnswer], now_ms: int) -> int:
        """A new session of ``wants`` with their ``answers`` remembered, and its id; or
        :data:`INVALID_SESSION_ID` when the cache has no room (Kafka's
        ``maybeCreateSession``: module docstring, "Eviction")."""
        size = len(wants)
        if size == 0 or size > self.partitions_max:
            return INVALID_SESSION_ID
        while len(self._sessions) >= self.slots_max or (
                self.partitions_cached + size > self.partitions_max):
            if not self._try_evict(size, now_ms):
                return INVALID_SESSION_ID
        if self._sessions:  # the least-recently-used order is also last-used-time order
            now_ms = max(now_ms, next(reversed(self._sessions.values())).last_used_ms)
        session = FetchSession(self._new_session_id(), principal, now_ms)
        for want in wants:
            cached = CachedPartition(want)
            answer = answers.get((want.topic, want.partition))
            if answer is not None:
                cached.maybe_update_answer(answer)
            session.partitions[(want.topic, want.partition)] = cached
        self._sessions[session.id] = session
        self.partitions_cached += len(session.partitions)
        return session.id

    def check(self) -> None:
        """Assert the invariants of the module docstring (tests call it after every step)."""
        assert len(self._sessions) <= max(self.slots_max, 0)
        assert self.partitions_cached == sum(len(s.partitions) for s in self._sessions.values())
        assert self.partitions_cached <= self.partitions_max
        last_used = -1
        for session_id, session in self._sessions.items():
            assert session_id == session.id and 0 < session_id <= _SESSION_ID_MAX
            assert 1 <= session.epoch <= _EPOCH_MAX
            assert session.partitions, f"session {session_id} is empty"
            assert session.last_used_ms >= last_used, "not in least-recently-used order"
            last_used = session.last_used_ms

    def _try_evict(self, size: int, now_ms: int) -> bool:
        """Evict one session to make room for a new one of ``size`` partitions, if the rules
        allow (module docstring); whether one was."""
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            victim = oldest
        else:
            # Kafka's evictableByAll: sessions past the eviction interval since they were
            # made, smallest first (ties: the lower id); a larger new session displaces one.
            candidates = [s for s in self._sessions.values()
                          if now_ms - s.created_ms > self.eviction_ms]
            if not candidates:
                return False
            victim = min(candidates, key=lambda s: (len(s.partitions), s.id))
            if size < len(victim.partitions):
                return False
        self._remove(victim)
        self.evictions += 1
        if self._on_evict is not None:
            self._on_evict()
        return True

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        # A monotonic caller's time never goes back; the max keeps the order if it did.
        if self._sessions:
            now_ms = max(now_ms, next(reversed(self._sessions.values())).last_used_ms)
        session.last_used_ms = now_ms
        self._sessions.move_to_end(session.id)

    def _remove(self, session: FetchSession) -> None:
        if self._sessions.pop(session.id, None) is not None:
            self.partitions_cached -= len(session.partitions)

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, _SESSION_ID_MAX)
            if session_id not in self._sessions:
                return session_id
