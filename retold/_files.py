"""Writing a file that holds secrets or personal data: readable by its owner only, whole,
and one writer at a time across processes."""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._errors import RuntimeFailure

__all__ = ["exclusive", "write_private"]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with mode 0600, through a temporary file in the
    same directory that replaces ``path`` only once it is complete and synced: a failure
    leaves no partial file behind, and an earlier ``path`` as it was.

    Raises:
        OSError: the directory cannot be written (the temporary file is removed).
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def exclusive(path: Path, *, timeout_s: float = 10.0) -> Iterator[None]:
    """Hold the lock of ``path`` (a ``.<name>.lock`` file beside it, mode 0600) while the
    block runs, so that processes reading, changing and rewriting ``path`` do not lose each
    other's changes. The lock is the operating system's (``flock``; on Windows, a locked
    byte), released when the block ends or the process dies.

    Raises:
        RuntimeFailure: another process held the lock for ``timeout_s`` seconds.
    """
    lock = path.with_name(f".{path.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout_s
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise RuntimeFailure(
                    f"{str(path)!r} is being changed by another process "
                    f"(its lock {str(lock)!r} was held for {timeout_s:g} s)"
                )
            time.sleep(0.01)
        try:
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)


if sys.platform == "win32":
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
