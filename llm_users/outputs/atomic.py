"""Every file a run writes at its end is complete or absent (issue 54 item 6): the text goes to a
temporary file beside the target (``.NAME.PID.RANDOM.tmp``, same directory, so same file
system), is flushed and ``fsync``-ed, and only then takes the target's name (``os.replace``,
atomic on POSIX). A disk that fills, a size limit or a removed directory on the way leaves the
target as it was (absent, or the previous run's whole file) and no temporary file; the
``OSError`` is raised as before, its ``filename`` the target's path, so the one line that
reports it (:func:`~llm_users.outputs.registry.write_outputs`) names the file the user knows.

requests.jsonl is the exception: it is appended to as the run goes (:mod:`.records_file`),
and a failed append truncates it back to its last whole line.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """A file object open on a temporary file beside ``path`` (``mode``: ``"w"`` or ``"wb"``,
    ``kwargs`` as :func:`open` takes them); at the end of the ``with`` block it is flushed,
    synced and renamed to ``path``. Any exception inside removes it and is raised again."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes a whole file: mode 'w' or 'wb', not {mode!r}")
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as to open()
        with open(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError) and e.filename in (None, str(tmp)):
            e.filename = str(target)  # the file the user asked for, not our temporary name
        raise


def write_atomic(path: str | Path, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` (bytes, or text in ``encoding``) to ``path``, whole or not at all."""
    if isinstance(data, str):
        data = data.encode(encoding)
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)
