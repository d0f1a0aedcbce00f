"""Damage detection for the episode store: missing, truncated or altered chunk files, and stale temp stores.

Every array robot_rl creates ends its codec chain with zarr's `crc32c` codec: each chunk file carries the
CRC32C of its other bytes in its last 4, written in the same atomic rename as the bytes it covers (a
checksum kept elsewhere could disagree with a chunk that an append rewrote a moment earlier, for a reader or
after a kill). Such arrays also write every chunk, all-fill ones included (`write_empty_chunks`), so every
chunk in the committed range must exist: zarr itself reads a missing chunk as fill values (zeros).

`scan` checks the chunk files of the committed rows without decoding them (presence, then the checksum of
the raw bytes); `damaged_episodes` maps damaged chunks to the episodes they span. Arrays written by an
older robot_rl carry no checksum and skip empty chunks, so neither check applies to them (`legacy`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from itertools import product
from pathlib import Path

import google_crc32c  # zarr's crc32c codec is built on it, so every zarr install has it
import numpy as np
import zarr
from zarr.codecs import Crc32cCodec

from robot_rl.data.errors import DamagedStoreError, StoreError, StoreLockedError
from robot_rl.data.writer_lock import WriterLock

# A temp store directory with no lock file yet is left alone this long: its creator may be about to lock it.
CREATING_GRACE_S = 60.0


@dataclasses.dataclass(frozen=True)
class ChunkDamage:
    array: str  # e.g. "data/obs/proprio", "meta/success"
    chunk: str  # chunk key, e.g. "c/3/0"
    problem: str  # "missing", "truncated to 2 bytes", "checksum mismatch"
    rows: tuple[int, int]  # committed rows [a, b) of the array the chunk holds (steps for data/, episodes for meta/)

    def __str__(self) -> str:
        return f"{self.array} chunk {self.chunk} {self.problem}"


def checksummed(arr: zarr.Array) -> bool:
    """The array's chunks end in a CRC32C (arrays robot_rl creates; not those of older versions)."""
    codecs = arr.metadata.codecs
    return bool(codecs) and isinstance(codecs[-1], Crc32cCodec)


def chunk_problem(file: Path) -> str | None:
    """What is wrong with one chunk file of a checksummed array, or None when it is intact."""
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return "missing"
    except IsADirectoryError:
        return "is a directory"
    if len(data) < 4:
        return f"truncated to {len(data)} bytes"
    if google_crc32c.value(np.frombuffer(data, np.uint8)[:-4]) != int.from_bytes(data[-4:], "little"):  # no copy
        return "checksum mismatch (truncated or altered)"
    return None


def chunk_files(root: Path, name: str, arr: zarr.Array, rows: int) -> list[tuple[str, Path, tuple[int, int]]]:
    """(chunk key, file, rows [a, b)) of every chunk holding one of the first `rows` rows of array `name`."""
    shape, chunks = arr.shape, arr.metadata.chunk_grid.chunk_shape
    if rows <= 0 or any(d == 0 for d in shape[1:]):
        return []
    grids = [range(math.ceil(rows / chunks[0]))] + [range(math.ceil(d / c)) for d, c in zip(shape[1:], chunks[1:])]
    out = []
    for coords in product(*grids):
        key = arr.metadata.encode_chunk_key(coords)
        a = coords[0] * chunks[0]
        out.append((key, root / name / key, (a, min(a + chunks[0], rows))))
    return out


def scan(root: Path, arrays: dict[str, tuple[zarr.Array, int]], verified: dict | None = None,
         last_only: bool = False) -> tuple[list[ChunkDamage], list[str]]:
    """(damaged chunks, names of legacy arrays) over `arrays`: name -> (array, committed rows).

    Every chunk must exist and pass its checksum; last_only: only the last chunk of each array is read (the one
    an append rewrites), the others are only checked to exist. `verified` caches files found intact (by inode,
    size, mtime), so a refresh re-reads only chunks that changed."""
    damage, legacy = [], []
    for name, (arr, rows) in sorted(arrays.items()):
        if not checksummed(arr):
            legacy.append(name)
            continue
        files = chunk_files(root, name, arr, rows)
        last = files[-1][2][0] if files else -1
        for key, file, span in files:
            try:
                st = os.stat(file)
            except FileNotFoundError:
                damage.append(ChunkDamage(name, key, "missing", span))
                continue
            if last_only and span[0] != last:
                continue
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if verified is not None and verified.get(file) == stamp:
                continue
            problem = chunk_problem(file)
            if problem is not None:
                damage.append(ChunkDamage(name, key, problem, span))
            elif verified is not None:
                verified[file] = stamp
    return damage, legacy


def damaged_episodes(damage: list[ChunkDamage], ends: np.ndarray) -> dict[int, list[ChunkDamage]]:
    """Episode index -> the damaged chunks holding its steps (data/) or its attributes (meta/)."""
    out: dict[int, list[ChunkDamage]] = {}
    for d in damage:
        a, b = d.rows
        if d.array.startswith("meta/"):
            episodes = range(a, b)
        else:  # steps [a, b): the episodes from the one holding step a to the one holding step b - 1
            episodes = range(int(np.searchsorted(ends, a, side="right")), int(np.searchsorted(ends, b - 1, side="right")) + 1)
        for e in episodes:
            out.setdefault(e, []).append(d)
    return dict(sorted(out.items()))


class Damage:
    """The damaged episodes of a store's committed state (episode_ends `ends`) and what they make unreadable."""

    def __init__(self, chunks: list[ChunkDamage] = (), ends: np.ndarray = np.zeros(0, np.int64)):
        self.chunks, self.ends = list(chunks), ends
        self.episodes = damaged_episodes(self.chunks, ends)  # episode -> its damaged chunks

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def good(self, n_episodes: int) -> np.ndarray:
        """Indices of the intact episodes among the first n_episodes."""
        return np.setdiff1d(np.arange(n_episodes), np.fromiter(self.episodes, np.int64, len(self.episodes)))

    def good_runs(self) -> list[tuple[int, int]]:
        """Step ranges [a, b) of the intact episodes, consecutive ones merged."""
        g = self.good(len(self.ends))
        starts = np.concatenate([[0], self.ends[:-1]])
        return contiguous_runs(starts[g], self.ends[g])

    def attr_gaps(self, array: str) -> list[tuple[int, int]]:
        """Episode ranges [a, b) whose entries of per-episode array `array` (e.g. meta/success) are damaged."""
        return sorted({d.rows for d in self.chunks if d.array == array})

    def refuse(self, path: Path, what: str, episodes: np.ndarray | None = None, rows: tuple[int, int] | None = None):
        """Raise StoreError when `episodes`, or the episodes holding steps [a, b) = rows, include damaged ones."""
        if not self.episodes:
            return
        if rows is not None:
            a, b = rows
            first, last = np.searchsorted(self.ends, [a, max(a, b - 1)], side="right")
            episodes = np.arange(first, last + 1) if b > a else np.zeros(0, np.int64)
        bad = sorted(set(np.unique(episodes).tolist()) & set(self.episodes))
        if bad:
            raise StoreError(f"episode store {path}: {what} include(s) damaged episode(s) {fmt_episodes(bad)} "
                             f"({self.episodes[bad[0]][0]}); read only the store's good_episodes")

    def error(self, path: Path, n_episodes: int, writer: bool) -> DamagedStoreError:
        """The one-line refusal of a damaged store: for a reader, or for a writer (which may not append to it)."""
        merge = f"robot-rl-data merge NEW {path} --skip-damaged"
        fix = (f"appending would bury the damage: copy the intact episodes into a new store ({merge}) and append there"
               if writer else f"`robot-rl-data verify {path}` lists them; " + reader_fix(path))
        return DamagedStoreError(damage_message(path, self.episodes, n_episodes, fix))


def fmt_episodes(episodes, limit: int = 8) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"; more than `limit` runs end in ", ... (N in all)"."""
    runs: list[list[int]] = []
    for e in episodes:
        if runs and e == runs[-1][1] + 1:
            runs[-1][1] = e
        else:
            runs.append([e, e])
    text = ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs[:limit])
    return text + (f", ... ({len(episodes)} in all)" if len(runs) > limit else "")


def damage_message(path: Path, episodes: dict[int, list[ChunkDamage]], n_episodes: int, fix: str) -> str:
    """One line: how many episodes of `path` are damaged, which, the first damaged chunks, and `fix`."""
    chunks = list(dict.fromkeys(d for ds in episodes.values() for d in ds))
    named = "; ".join(map(str, chunks[:2])) + (f"; {len(chunks) - 2} more chunk(s)" if len(chunks) > 2 else "")
    return (f"episode store {path} has {len(episodes)} damaged episode(s) of {n_episodes}: "
            f"{fmt_episodes(list(episodes))} ({named}); {fix}")


def sweep_creating(path: Path, lock_file: str) -> list[Path]:
    """Remove `.<name>.*.creating` temp stores beside `path` that no live creator holds; returns them.

    A creator holds the flock of the temp store's lock file from its first moment to the rename, so a lock
    this process can take means its creator is gone (killed); a temp store without a lock file is removed once
    it is CREATING_GRACE_S old (its creator died between mkdir and locking)."""
    removed = []
    try:
        candidates = sorted(path.parent.glob(f".{path.name}.*.creating"))
    except OSError:
        return removed
    for tmp in candidates:
        lock = None
        try:
            if (tmp / lock_file).is_file():
                lock = WriterLock(tmp / lock_file, tmp)
            elif time.time() - tmp.stat().st_mtime < CREATING_GRACE_S:
                continue
        except (StoreLockedError, OSError):
            continue  # a live creator, or it just finished (renamed) or someone else removed it
        try:
            shutil.rmtree(tmp)
            removed.append(tmp)
        except OSError:
            pass  # read-only parent (a reader without write access): left for a writer
        finally:
            if lock is not None:
                lock.release()
    return removed


def reader_fix(path) -> str:
    """What a reader of a damaged store can do (robot-rl-data verify and the readers' refusal say the same)."""
    return (f"leave them out with --skip-damaged (robot-rl-train-bc: skip_damaged=true), or copy the intact ones into "
            f"a new store: robot-rl-data merge NEW {path} --skip-damaged")


def contiguous_runs(starts: np.ndarray, ends: np.ndarray) -> list[tuple[int, int]]:
    """Step ranges [a, b) of episodes [starts[i], ends[i]) in order, consecutive ones merged."""
    runs: list[list[int]] = []
    for a, b in zip(np.asarray(starts).tolist(), np.asarray(ends).tolist()):
        if runs and runs[-1][1] == a:
            runs[-1][1] = int(b)
        else:
            runs.append([int(a), int(b)])
    return [(a, b) for a, b in runs]
