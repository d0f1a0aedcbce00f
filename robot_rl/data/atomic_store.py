"""A zarr LocalStore whose every key write is atomic: a temp file in the same directory, then rename.

zarr 3.1 already writes this way, zarr 3.0 (allowed by our dependency range) wrote chunks and
`zarr.json` in place, so a writer killed mid-write could leave a torn `zarr.json`. The episode store's
commit protocol needs "a key holds either its old or its new bytes, never a mix", so it uses this
store and does not depend on the zarr version. `fsync=True` also flushes each file and its directory
before returning (survives power loss, costs a disk flush per key); a SIGKILL never needs it because
written pages belong to the kernel, not the process.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from zarr.storage import LocalStore

# Temp files end in one of these; a writer sweeps leftovers of killed writers when it opens a store
# (".partial" is what zarr 3.1's own LocalStore leaves behind).
TMP_SUFFIXES = (".tmp", ".partial")


def atomic_put(path: Path, data, *, fsync: bool = False, exclusive: bool = False) -> None:
    """Write bytes-like `data` to `path` so readers see the old file or the new one, nothing between."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    # os.open with 0o666 so the umask applies as for any other file (mkstemp would force 0600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)  # FileExistsError if another writer got there first
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
        if fsync:
            fsync_dir(path.parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicLocalStore(LocalStore):
    """LocalStore with atomic (temp + rename) key writes and optional fsync."""

    def __init__(self, root: Path | str, *, read_only: bool = False, fsync: bool = False) -> None:
        super().__init__(root, read_only=read_only)
        self.fsync = bool(fsync)

    def with_read_only(self, read_only: bool = False) -> "AtomicLocalStore":
        return type(self)(self.root, read_only=read_only, fsync=self.fsync)

    def _write(self, key: str, value, exclusive: bool = False) -> None:
        atomic_put(self.root / key, value.as_numpy_array(), fsync=self.fsync, exclusive=exclusive)

    async def set(self, key: str, value) -> None:
        if not self._is_open:
            await self._open()
        self._check_writable()
        await asyncio.to_thread(self._write, key, value)

    async def set_if_not_exists(self, key: str, value) -> None:
        if not self._is_open:
            await self._open()
        self._check_writable()
        try:
            await asyncio.to_thread(self._write, key, value, True)
        except FileExistsError:
            pass

    def set_sync(self, key: str, value) -> None:
        self._ensure_open_sync()
        self._check_writable()
        self._write(key, value)
