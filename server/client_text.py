"""Client text repeated by the server: in a log line, escaped and cut; in a status, cut to bytes.

A client chooses the names it sends (topics, transactional ids, user names, principals of
certificates) and can make them as long as gRPC lets a message be (``max_request_bytes``) and
hold any character, newlines included. Whatever the server repeats of them is bounded here:

* **In a log line** (:func:`loggable`): as :func:`repr` shows it (a newline becomes ``\\n``, a
  control character ``\\x1b``: one request can never write a line of its own into the log, nor
  a terminal escape), cut to ``chars_max`` characters of the repr with the full length said, so
  a 256 KiB name costs the log ~100 bytes. Every log line that holds a client's string passes
  it through this one function.
* **In a status** (:func:`clip_utf8`): gRPC sends a status's message twice in the trailers
  (``grpc-message``, percent-encoded: up to 3 bytes per UTF-8 byte; and inside
  ``grpc-status-details-bin``, base64: 4 per 3) with the ErrorInfo's metadata, and a client
  refuses trailers over its metadata limit (8 KiB by default) with RESOURCE_EXHAUSTED instead of
  the status the server meant. server/rpc/status.py cuts the message and each metadata value to a
  number of UTF-8 bytes that keeps the whole under that limit.

Pure functions; thread-safe.
"""

from __future__ import annotations

__all__ = ["LOGGED_CHARS_MAX", "clip_utf8", "loggable"]

#: Characters of a client's string a log line shows at most (of its repr).
LOGGED_CHARS_MAX = 100

_ELLIPSIS = "…"


def loggable(value: object, chars_max: int = LOGGED_CHARS_MAX) -> str:
    """``value`` as a log line may show it: ``repr(str(value))``, cut to ``chars_max``
    characters and then marked with its full length (``'aaaa…'(262144 chars)``).

    Runtime: O(chars_max) whatever the length of ``value`` (only its head is repr'd).
    """
    assert chars_max >= 8
    text = value if isinstance(value, str) else str(value)
    if len(text) <= chars_max:
        shown = repr(text)
        if len(shown) <= chars_max:
            return shown
    # A repr is at most 10 characters per character (\U0001f600): the head is enough.
    shown = repr(text[:chars_max])[: chars_max - 1]
    return f"{shown}{_ELLIPSIS}({len(text)} chars)"


def clip_utf8(text: str, bytes_max: int) -> str:
    """``text`` if its UTF-8 form has at most ``bytes_max`` bytes; else its longest prefix
    that fits with an ellipsis after it (never a character cut in half).

    Runtime: O(min(len(text), bytes_max)).
    """
    assert bytes_max >= len(_ELLIPSIS.encode())
    if len(text) * 4 <= bytes_max:
        return text  # no character is more than 4 bytes
    head = text[:bytes_max].encode("utf-8")
    if len(head) <= bytes_max and len(text) <= bytes_max:
        return text
    keep = head[: bytes_max - len(_ELLIPSIS.encode())]
    return keep.decode("utf-8", errors="ignore") + _ELLIPSIS
