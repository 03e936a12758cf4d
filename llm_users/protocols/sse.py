"""Incremental Server-Sent Events decoder: bytes in any pieces -> (event, data) frames.

Follows the WHATWG rules the servers and SDKs rely on: lines end in LF, CRLF or CR; ``data:``
may or may not be followed by one space; several ``data:`` lines join with ``\\n``; lines that
start with ``:`` are comments (keep-alives); a blank line ends a frame; a frame with no data is
not dispatched. An event still waiting for its end (its data lines and the unfinished line) past
``--llm-max-event-bytes`` is ``response_too_large``, cut as it grows (:mod:`.limits`). Pure: no
I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orjson import JSONDecodeError, loads

from llm_users.errors import ProtocolError
from llm_users.protocols import limits

if TYPE_CHECKING:
    from llm_users.protocols.base import Event

Frame = tuple[bytes | None, bytes]


class SSEDecoder:
    """Linear in the bytes fed, however long a line is: each piece is scanned once for line
    ends, an unfinished line is appended to a bytearray, and only a finished line is joined.
    ``max_bytes``: the event bound (default: the process's, :data:`.limits.CURRENT`)."""

    __slots__ = ("_buf", "_cr", "_event", "_data", "idle", "_held", "_counted", "max_bytes")

    def __init__(self, max_bytes: int | None = None) -> None:
        self._buf = bytearray()  # the unfinished last line
        self._cr = False  # the last piece ended in CR: a LF starting the next one belongs to it
        self._event: bytes | None = None
        self._data: list[bytes] = []
        self._held = 0  # the bytes of _data (the open frame's data lines) at the end of the last piece
        self._counted = 0  # how many of those lines _held counts
        self.idle = True  # nothing pending from earlier pieces: the next starts a line and a frame
        self.max_bytes = limits.CURRENT.event_bytes if max_bytes is None else max_bytes

    def feed(self, data: bytes) -> list[Frame]:
        frames = self._feed(data)
        self.idle = not (self._buf or self._data or self._event is not None or self._cr)
        return frames

    def _feed(self, data: bytes) -> list[Frame]:
        if self.idle and data.endswith(b"\n\n") and 13 not in data:
            return self._whole_frames(data)  # whole frames only: nothing is held after the piece
        if self._cr:
            self._cr = False
            if data[:1] == b"\n":
                data = data[1:]
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            self._buf += data
            if len(self._buf) + self._held > self.max_bytes:  # a line that does not end
                raise self._too_large()
            return []
        if self._buf:
            self._buf += data[: cut + 1]
            block = bytes(self._buf)
            self._buf = bytearray(data[cut + 1:])
        else:
            block = data[: cut + 1]
            self._buf = bytearray(data[cut + 1:])
        if block[-1] == 13 and not self._buf:  # CR last: maybe half of a CRLF split across pieces
            self._cr = True
        if 13 in block:  # CR (an int: memchr, a tenth of a one-byte bytes search)
            block = block.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = block.split(b"\n")
        lines.pop()  # the block ends with a line end: the last piece is empty
        frames: list[Frame] = []
        pending = self._data
        for line in lines:
            self._line(line, frames)
        if self._data:  # a frame still open past this piece
            self._hold(pending)
        elif self._counted:  # the frame counted at the last piece was dispatched
            self._held = self._counted = 0
        return frames

    def _hold(self, pending: list[bytes]) -> None:
        """Count the open frame's data lines (only those this piece added, so an endless frame
        costs linear time) and cut it past the event bound."""
        data = self._data
        if data is pending:  # the same frame as before this piece: its new lines
            self._held += sum(map(len, data[self._counted:]))
        else:  # a frame begun in this piece
            self._held = sum(map(len, data))
        self._counted = len(data)
        if self._held + len(self._buf) > self.max_bytes:  # a frame whose lines end, but never the frame
            raise self._too_large()

    def _too_large(self) -> ProtocolError:
        """The event bound passed: what was held goes now (a failure's traceback keeps this
        decoder until a garbage-collector pass; it must not keep megabytes with it)."""
        self._buf, self._data, self._held, self._counted = bytearray(), [], 0, 0
        return limits.event_too_large("an SSE event", self.max_bytes)

    def lone_data(self, data: bytes) -> bytes | None:
        """The payload when ``data`` is exactly one whole frame of one ``data:`` line, ended by
        LF LF or CRLF CRLF (what a server writes per chunk), and no earlier piece left anything
        pending; else None, with nothing consumed (``feed`` it then). Same frames as ``feed``,
        without a frame list: the per-chunk hot path."""
        if not self.idle or not data.startswith(b"data:"):
            return None
        n = len(data)
        lf = data.find(b"\n")
        if lf == n - 2 and data[-1] == 10 and 13 not in data:
            end = n - 2
        elif lf == n - 3 and data.endswith(b"\r\n\r\n") and data.find(b"\r") == n - 4:
            end = n - 4
        else:
            return None
        return data[6 if data[5:6] == b" " else 5:end]

    def _whole_frames(self, data: bytes) -> list[Frame]:
        """The common case, a piece of whole frames (a server writes one or more per chunk): a
        frame that is one ``data: `` line is taken as is, any other goes line by line (the
        result is the same; this is only faster, about half the per-chunk parse cost)."""
        frames: list[Frame] = []
        for block in data[:-2].split(b"\n\n"):
            if block.startswith(b"data: ") and 10 not in block:
                frames.append((None, block[6:]))
                continue
            for line in block.split(b"\n"):
                self._line(line, frames)
            self._line(b"", frames)
        return frames

    def close(self) -> list[Frame]:
        """End of body: a frame whose lines all arrived is dispatched even without the blank
        line; a partial last line is dropped (the caller judges truncation)."""
        frames: list[Frame] = []
        self._buf = bytearray()
        self._cr = False
        self._held = self._counted = 0
        self._line(b"", frames)
        self.idle = True
        return frames

    def _line(self, line: bytes, frames: list[Frame]) -> None:
        if not line:
            if self._data:
                frames.append((self._event, b"\n".join(self._data)))
            self._event = None
            self._data = []
            return
        if line[0] == 58:  # ":" comment / keep-alive
            return
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value
        # "id", "retry" and unknown fields are ignored.


def json_object(payload: bytes, what: str = "data payload") -> dict[str, Any]:
    """Decode one JSON object (orjson) or raise ProtocolError quoting the bytes."""
    try:
        obj = loads(payload)
    except JSONDecodeError:
        raise ProtocolError(f"{what} is not JSON: {payload[:120]!r}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what} is not an object: {payload[:120]!r}")
    return obj


class SSEJSONParser:
    """Base of the SSE protocol parsers: SSE frames -> one JSON object each -> ``_chunk``.

    Subclasses set ``protocol`` (for messages), implement ``_chunk(obj, event_name, events)``
    and may set ``sentinel`` for a non-JSON terminator such as ``[DONE]``. A payload whose
    JSON has an unexpected shape (a list where an object belongs...) is a ProtocolError too.
    """

    __slots__ = ("_sse", "complete", "frames", "response_id")
    protocol = "SSE"
    sentinel: bytes | None = None  # a payload that is not JSON: a terminator such as ``[DONE]``
    sentinel_ends = False  # whether the sentinel ends the stream (``complete``)

    def __init__(self) -> None:
        self._sse = SSEDecoder()
        self.complete = False
        self.frames = 0
        self.response_id: str | None = None  # the server's own id for the answer, where the stream has one

    def feed(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        sse = self._sse
        # The usual chunk: one whole frame, one ``data: `` line, LF-ended, nothing pending.
        # ``lone_data``'s rule written out for this form, a call less per chunk (the hot path);
        # the other forms (no space, CRLF) go through ``lone_data`` itself.
        if sse.idle and data[:6] == b"data: " and data[-2:] == b"\n\n":
            payload = data[6:-2]
            if 10 not in payload and 13 not in payload:  # one line (ints: memchr, no method call)
                self._frame(None, payload, events)
                return events
        payload = sse.lone_data(data)
        if payload is not None:
            self._frame(None, payload, events)
            return events
        for name, payload in sse.feed(data):
            self._frame(name, payload, events)
        return events

    def close(self) -> list[Event]:
        events: list[Event] = []
        for name, payload in self._sse.close():
            self._frame(name, payload, events)
        return events

    def _frame(self, name: bytes | None, payload: bytes, events: list[Event]) -> None:
        self.frames += 1
        if payload == self.sentinel:
            if self.sentinel_ends:
                self.complete = True
            return
        try:
            obj = loads(payload)  # json_object's work without its call: the per-chunk path
        except JSONDecodeError:
            obj = None
        if obj.__class__ is not dict:
            obj = json_object(payload)  # raises, with its message
        try:
            self._chunk(obj, name, events)
        except (AttributeError, TypeError, ValueError, IndexError, KeyError):
            raise ProtocolError(f"unexpected {self.protocol} payload shape: {payload[:120]!r}") from None

    def payload(self, obj: dict[str, Any], name: bytes | None = None) -> list[Event]:
        """One decoded payload (SDK mode) through the same rules as a frame off the wire."""
        self.frames += 1
        events: list[Event] = []
        try:
            self._chunk(obj, name, events)
        except (AttributeError, TypeError, ValueError, IndexError, KeyError):
            raise ProtocolError(f"unexpected {self.protocol} payload shape: {str(obj)[:120]}") from None
        return events

    def _chunk(self, obj: dict[str, Any], name: bytes | None, events: list[Event]) -> None:
        raise NotImplementedError
