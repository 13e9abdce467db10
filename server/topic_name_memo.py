"""A bounded memo of the topic names that passed the engine's rules.

Every request names a topic, and most name the same few; checking a name walks its characters
(:func:`~stratalog.server.storage.topic_names.validate_topic_name`, the engine's rules, which
keep a name typed by a client from becoming a path outside the data directories). The memo
remembers names that passed, so that a request naming a known topic costs a set lookup. It
decides nothing itself: a name not remembered is checked by the engine's function, and a name
refused is never remembered, so it is refused with the engine's message every time.

Why an object the servicer owns, not a cache inside ``topic_names.py``: validity is the
engine's rule, but checking a name on every request is the server's request path (the engine
checks a name once, when the topic is created). One memo per servicer keeps its memory and its
lifetime with the server that fills it: no process-wide state shared by every server of a
process (the tests run many), and a bound chosen where requests arrive.
"""

from __future__ import annotations

from stratalog.server.storage.topic_names import validate_topic_name

__all__ = ["ValidTopicNames"]


class ValidTopicNames:
    """Topic names that passed :func:`validate_topic_name`, at most ``max_names`` of them.

    Bounded: emptied when full, so that clients sending ever new names cannot grow it (names
    forgotten are simply checked again). Concurrency: event-loop only (one servicer's memo).
    """

    __slots__ = ("_max_names", "_names")

    def __init__(self, max_names: int = 4096) -> None:
        if max_names < 1:
            raise ValueError(f"max_names must be >= 1, got {max_names}")
        self._max_names = max_names
        self._names: set[str] = set()

    def check(self, name: str) -> str:
        """``name`` if it is a valid topic name, remembered; O(1) once remembered.

        Raises:
            InvalidTopicError: the engine's description of what is wrong with ``name``.
        """
        if name in self._names:
            return name
        validate_topic_name(name)
        if len(self._names) >= self._max_names:
            self._names.clear()
        self._names.add(name)
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)
