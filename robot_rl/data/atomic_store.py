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
from pathlib import Path

from robot_rl.common.atomic import atomic_put
from zarr.storage import LocalStore

# Temp files end in one of these; a writer sweeps leftovers of killed writers when it opens a store
# (".partial" is what zarr 3.1's own LocalStore leaves behind).
TMP_SUFFIXES = (".tmp", ".partial")


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
