"""Incremental Server-Sent Events decoder: bytes in any pieces -> (event, data) frames.

Follows the WHATWG rules the servers and SDKs rely on: lines end in LF, CRLF or CR; ``data:``
may or may not be followed by one space; several ``data:`` lines join with ``\\n``; lines that
start with ``:`` are comments (keep-alives); a blank line ends a frame; a frame with no data is
not dispatched. Pure: no I/O, no clock.
"""

from __future__ import annotations

Frame = tuple[bytes | None, bytes]


class SSEDecoder:
    __slots__ = ("_buf", "_event", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._event: bytes | None = None
        self._data: list[bytes] = []

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: keep it for the next piece.
            hold = b"\r" if buf.endswith(b"\r") else b""
            if hold:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = buf.split(b"\n")
            self._buf = lines.pop() + hold
        else:
            lines = buf.split(b"\n")
            self._buf = lines.pop()
        frames: list[Frame] = []
        for line in lines:
            self._line(line, frames)
        return frames

    def close(self) -> list[Frame]:
        """End of body: a frame whose lines all arrived is dispatched even without the blank
        line; a partial last line is dropped (the caller judges truncation)."""
        frames: list[Frame] = []
        if self._buf.endswith(b"\r"):
            self._line(self._buf[:-1], frames)
        self._buf = b""
        self._line(b"", frames)
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
