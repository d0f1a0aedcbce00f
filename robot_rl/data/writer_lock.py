"""One writer per episode store: an OS advisory lock (flock) on a lock file inside the store.

The kernel drops a flock when its holder exits for any reason, SIGKILL included, so a killed writer
never leaves a stale lock. flock is per open file, so a second writer in the same process is refused
too. flock is not reliable on some network file systems (old NFS); keep stores on local disks.

Kept instead of `filelock`: its Unix lock is this same flock, but the store needs what it does not give: the holder's
pid in the lock file and in the refusal (filelock's Timeout names only the file), the locked descriptor (a new store is
locked in a temp directory, checked to still be that file, and renamed into place holding the lock), and no fallback
to a lock file that outlives a SIGKILL (filelock 4.2 falls back to one where flock is missing unless told not to).
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from robot_rl.data.errors import StoreLockedError


class WriterLock:
    """Exclusive, non-blocking flock on `lock_file` (created if missing); records the holder's pid in it."""

    def __init__(self, lock_file: Path, store_dir: Path):
        self._fd: int | None = None
        self.path = Path(lock_file)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = _read_pid(self.path)
            who = f"pid {holder}" if holder else "another process (pid not yet recorded)"
            raise StoreLockedError(
                f"episode store {store_dir} is locked by a writer ({who}); one writer per store: wait for it "
                "to finish, or write to another store and combine them with `robot-rl-data merge`"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            # The pid is left in the file: harmless, the lock (not the file) is what counts.
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:  # a forgotten close() must not keep the store locked for the process's life
        self.release()

    def fileno(self) -> int:
        """The locked file's descriptor (e.g. to check it is still the file at `path`)."""
        return self._fd

    @property
    def held(self) -> bool:
        return self._fd is not None


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
