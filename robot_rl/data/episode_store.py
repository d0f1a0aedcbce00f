"""The episode store: demonstrations, rollouts, interventions and robot recordings in one zarr v3 group.

Layout (every path but the lock is a plain zarr v3 node):

    <store>/zarr.json              group; attributes {"robot_rl_episode_store": 1} (format version)
    <store>/data/<key>             per-step array [total_steps, *shape], episodes concatenated in order;
                                   e.g. data/obs/proprio, data/obs/object, data/obs/images/<camera> (uint8
                                   [H, W, 3], up to 64 frames per chunk), data/action, data/reward, ...
    <store>/data/intervention      bool [total_steps]: a human was in control at that step (every store)
    <store>/meta/episode_ends      int64 [episodes], cumulative: episode i is steps [ends[i-1], ends[i])
    <store>/meta/{task, instruction, source, metadata}   string [episodes]; source is expert | teleop |
                                   policy | intervention; metadata is a JSON object per episode
    <store>/meta/success           bool [episodes]
    <store>/meta/seed              int64 [episodes] (-1 = unknown)
    <store>/meta/stats             group; attributes hold normalization stats tagged with the episode and
                                   step counts they were computed for (stale once episodes are appended)
    <store>/meta/episode_ends/.lock  the writer lock (writer_lock.py); inside an array's directory, where
                                   zarr's group listing never looks, so plain zarr sees no foreign file

Reading it with plain zarr:

    z = zarr.open(path, mode="r")
    ends = z["meta/episode_ends"][:]
    proprio = z["data/obs/proprio"][: ends[-1]]   # rows past ends[-1] belong to an episode being written
    third = proprio[ends[1] : ends[2]]

Commit protocol. `meta/episode_ends` is the only source of truth: an episode exists once its end is
inside that array's shape, and the shape lives in `meta/episode_ends/zarr.json`. Every key is written
atomically (temp file + rename, atomic_store.py). Appending a batch of episodes:
  1. write the steps into every `data/<key>` past the committed end, then grow each array's shape;
  2. same for the per-episode `meta/<attr>` arrays (1 and 2 run concurrently, their order is irrelevant);
  3. write the new ends into the episode_ends chunk past its shape, then rewrite its zarr.json with the
     new shape: that single rename is the commit.
A writer killed anywhere leaves complete old episodes plus rows past the committed ends, which readers
ignore and the next writer truncates when it opens the store (and sweeps temp files). Readers take no
lock and see the episodes committed when they opened or last called `refresh()`.

Damage (integrity.py). Every chunk file ends in a CRC32C (zarr's crc32c codec) and every chunk is written,
so a missing, truncated or altered chunk is found. Opening for reading checks every chunk of the committed
episodes; a damaged episode is refused (DamagedStoreError: one line naming the episodes and the fix) unless
`skip_damaged=True`, which leaves them out of `good_episodes`, samplers, statistics and summaries; reading
their rows raises StoreError. Opening for appending checks that every chunk exists and that the last one of
each array (the one an append rewrites) is intact, and refuses a damaged store.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import math
import os
import shutil
import uuid
import warnings
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.core.array import AsyncArray
from zarr.core.sync import sync as zarr_sync  # runs coroutines on zarr's own I/O loop

from robot_rl.data.atomic_store import TMP_SUFFIXES, AtomicLocalStore
from robot_rl.common.atomic import vacant
# Episode, KeySpec and SOURCES are imported from here too (their home is episode.py).
from robot_rl.data.episode import EPISODE_ATTRS, INTERVENTION, SOURCES, Episode, KeySpec, validate  # noqa: F401
from robot_rl.data.errors import StoreError
from robot_rl.data.integrity import ChunkDamage, Damage, scan, sweep_creating
from robot_rl.data.stats import KeyStats, compute_stats
from robot_rl.data.writer_lock import WriterLock

MARKER = "robot_rl_episode_store"
FORMAT_VERSION = 1
LOCK_FILE = "meta/episode_ends/.lock"  # next to the commit record it guards
META_CHUNK = 1024  # episodes per chunk of the meta arrays
LOWDIM_CHUNK_BYTES = 256 * 1024  # target chunk size of low-dim per-step arrays (<= 1024 steps)
# Frames (per-step arrays of >= 2 dims, e.g. images): up to 64 consecutive steps per chunk, at most ~4 MiB
# raw. Consecutive frames compress together far better than one by one, and a sampler reading a window of
# an episode decodes one or two chunks; a single random frame costs decoding its whole chunk.
FRAME_CHUNK_STEPS = 64
FRAME_CHUNK_BYTES = 4 * 1024 * 1024
# Every chunk is written, all-fill ones too, so a missing chunk is damage (zarr would read it as fill values).
WRITE_ALL_CHUNKS = {"write_empty_chunks": True}


class EpisodeStore:
    """Append episodes atomically, read committed ones. Build with `EpisodeStore.open(path, mode)`."""

    def __init__(self, path: Path, store: AtomicLocalStore, lock: WriterLock | None, skip_damaged: bool = False):
        self.path = path
        self.skip_damaged = skip_damaged
        self._store = store
        self._lock = lock
        self._data: dict[str, zarr.Array] = {}
        self._meta: dict[str, zarr.Array] = {}
        self._ends_arr: zarr.Array | None = None
        self._ends = np.zeros(0, dtype=np.int64)
        self._stats: dict | None = None
        self._unsure = False  # a commit failed: re-read the committed state before the next one
        self._damage = Damage()  # damaged chunks of committed episodes (a reader opened with skip_damaged=True)
        self.legacy_arrays: list[str] = []  # arrays of an older robot_rl: no checksums, damage undetectable
        self._verified: dict = {}  # chunk files found intact, so refresh() re-reads only changed ones

    # ---- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike, mode: str = "r", *, fsync: bool = False,
             skip_damaged: bool = False) -> "EpisodeStore":
        """mode "r": read committed episodes. mode "a": append (creates the store, takes the writer lock).

        Damaged episodes raise DamagedStoreError; skip_damaged=True (readers) leaves them out instead."""
        path = Path(path)
        if mode not in ("r", "a"):
            raise ValueError(f"mode={mode!r}; valid: 'r' (read committed episodes) or 'a' (append, create if missing)")
        sweep_creating(path, LOCK_FILE)  # temp stores of killed creators
        if mode == "r":
            check_is_store(path)
            self = cls(path, AtomicLocalStore(path, read_only=True), None, skip_damaged)
            self._load()
            self._check_integrity()
            return self
        lock = _create(path, fsync) if vacant(path) else None
        try:
            check_is_store(path)
            if not (path / LOCK_FILE).parent.is_dir():
                raise StoreError(f"episode store {path} is corrupted: meta/episode_ends is missing")
            lock = lock or WriterLock(path / LOCK_FILE, path)
            self = cls(path, AtomicLocalStore(path, fsync=fsync), lock)
            self._load()
            self._repair()
            self._check_integrity()
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return self

    def close(self) -> None:
        """Release the writer lock (readers: no-op). The store stays usable for reading."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "EpisodeStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def refresh(self) -> None:
        """Re-read the committed state: a reader then sees episodes appended since it opened."""
        self._load()
        if self._lock is None:
            self._check_integrity()

    # ---- committed state -----------------------------------------------------------------------
    @property
    def writable(self) -> bool:
        return self._lock is not None and self._lock.held

    @property
    def n_episodes(self) -> int:
        return len(self._ends)

    @property
    def n_steps(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    @property
    def episode_ends(self) -> np.ndarray:
        return self._ends.copy()

    @property
    def damaged_episodes(self) -> dict[int, list[ChunkDamage]]:
        """Damaged episode -> its damaged chunks (only a store opened with skip_damaged=True has any)."""
        return dict(self._damage.episodes)

    @property
    def good_episodes(self) -> np.ndarray:
        """Indices of the committed episodes that are not damaged (all of them in an intact store)."""
        return self._damage.good(self.n_episodes)

    @property
    def keys(self) -> dict[str, KeySpec]:
        """Per-step keys -> per-step shape and dtype."""
        return {k: KeySpec(tuple(a.shape[1:]), np.dtype(a.dtype)) for k, a in self._data.items()}

    def episode_range(self, i: int) -> tuple[int, int]:
        """Global step range [start, end) of episode i."""
        i = self._check_episode(i)
        return (int(self._ends[i - 1]) if i else 0), int(self._ends[i])

    def read(self, key: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Committed rows [start, stop) of data/<key>, as a numpy array."""
        arr = self.array(key)
        stop = self.n_steps if stop is None else min(int(stop), self.n_steps)
        self._damage.refuse(self.path, f"rows {start}-{stop} of data/{key}", rows=(int(start), stop))
        return _read(arr, slice(int(start), stop), self.path, f"data/{key}")

    def read_rows(self, key: str, rows) -> np.ndarray:
        """Committed rows `rows` (global step indices, any order) of data/<key>."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= self.n_steps):
            raise IndexError(f"rows out of range [0, {self.n_steps}) of episode store {self.path}")
        self._damage.refuse(self.path, f"rows of data/{key}", np.searchsorted(self._ends, rows, side="right"))
        uniq, inverse = np.unique(rows, return_inverse=True)
        return _read(self.array(key).oindex, (uniq,), self.path, f"data/{key}")[inverse]

    def array(self, key: str) -> zarr.Array:
        """The zarr array data/<key>. It may hold rows past `n_steps` (an episode being written): slice it."""
        try:
            return self._data[key]
        except KeyError:
            raise KeyError(f"no key {key!r} in episode store {self.path}; keys: {sorted(self._data)}") from None

    def episode_attr(self, name: str) -> np.ndarray:
        """Per-episode attribute over committed episodes: task, instruction, source, success, seed, metadata."""
        if name not in EPISODE_ATTRS:
            raise KeyError(f"unknown episode attribute {name!r}; valid: {sorted(EPISODE_ATTRS)}")
        arr, where = self._meta[name], f"meta/{name}"
        bad = self._damage.attr_gaps(where)
        if not bad:
            return _read(arr, slice(0, self.n_episodes), self.path, where)
        # Damaged (skipped) episodes whose chunk of this attribute is damaged get the fill value, never read.
        parts, pos = [], 0
        for a, b in bad + [(self.n_episodes, self.n_episodes)]:
            parts.append(_read(arr, slice(pos, a), self.path, where))
            parts.append(np.full(b - a, arr.fill_value, dtype=parts[-1].dtype))
            pos = b
        return np.concatenate(parts)

    def episode(self, i: int) -> Episode:
        """Episode i with its steps and attributes."""
        start, end = self.episode_range(i)
        self._damage.refuse(self.path, f"episode {i}", np.array([self._check_episode(i)]))
        steps = {k: _read(a, slice(start, end), self.path, f"data/{k}") for k, a in self._data.items()}
        attrs = {n: _read(a, slice(i, i + 1), self.path, f"meta/{n}")[0] for n, a in self._meta.items()}
        return Episode(
            steps=steps, task=str(attrs["task"]), source=str(attrs["source"]), success=bool(attrs["success"]),
            instruction=str(attrs["instruction"]), seed=int(attrs["seed"]), metadata=json.loads(str(attrs["metadata"])),
        )

    def summary(self) -> dict:
        """Episodes, steps, keys (shape, dtype), success rate, counts per source and per task (intact episodes)."""
        good = self.good_episodes
        n = len(good)
        read_good, n_steps = self._good_rows(INTERVENTION)
        return {
            "path": str(self.path),
            "episodes": n,
            "steps": n_steps,
            "keys": {k: {"shape": list(s.shape), "dtype": str(s.dtype)} for k, s in sorted(self.keys.items())},
            "success_rate": float(self.episode_attr("success")[good].mean()) if n else None,
            "sources": dict(sorted(Counter(map(str, self.episode_attr("source")[good])).items())),
            "tasks": dict(sorted(Counter(map(str, self.episode_attr("task")[good])).items())),
            "intervention_steps": int(read_good(0, n_steps).sum()) if n else 0,
            "damaged_episodes": sorted(self._damage.episodes),  # skipped (skip_damaged=True)
        }

    # ---- appending -----------------------------------------------------------------------------
    def append(self, episodes: Episode | Iterable[Episode]) -> range:
        """Append episodes in one atomic commit (all or none become visible); returns their indices.

        Everything is validated first: a bad episode raises StoreError and leaves the store unchanged."""
        if not self.writable:
            raise StoreError(f"episode store {self.path} was opened read-only; open it with mode='a' to append")
        if self._unsure:
            # The last commit failed or was interrupted and may or may not have landed: take the committed
            # state from disk and drop its leftovers, as a writer opening the store would.
            self._load()
            self._repair()
            self._unsure = False
        eps = [episodes] if isinstance(episodes, Episode) else list(episodes)
        if not eps:
            return range(self.n_episodes, self.n_episodes)
        schema = self.keys or None
        checked = []
        for i, ep in enumerate(eps):
            steps, attrs = validate(ep, i, schema)
            schema = schema or {k: KeySpec(v.shape[1:], v.dtype) for k, v in steps.items()}
            checked.append((steps, attrs))
        try:
            self._commit(checked, schema)
        except BaseException:
            self._unsure = True  # whatever it wrote past the committed end stays invisible; repaired next time
            raise
        return range(self.n_episodes - len(eps), self.n_episodes)

    def check_compatible(self, schema: dict[str, KeySpec]) -> None:
        """Raise StoreError unless episodes with this schema can be appended (empty stores take any)."""
        if not self._data:
            return
        mine = self.keys
        if set(schema) != set(mine):
            missing, extra = sorted(set(mine) - set(schema)), sorted(set(schema) - set(mine))
            raise StoreError(
                f"episode store {self.path} has keys {sorted(mine)}; the new episodes lack {missing} and add "
                f"{extra}. Write them to a new store (another out=PATH)"
            )
        for k, spec in schema.items():
            if (tuple(spec.shape), np.dtype(spec.dtype)) != (mine[k].shape, mine[k].dtype):
                raise StoreError(
                    f"episode store {self.path}: key {k!r} is {mine[k].dtype}{list(mine[k].shape)} per step there, "
                    f"the new episodes have {np.dtype(spec.dtype)}{list(spec.shape)}. Write them to a new store"
                )

    def _commit(self, checked, schema: dict[str, KeySpec]) -> None:
        t0, e0 = self.n_steps, self.n_episodes
        if not self._data:
            self._create_data_arrays(schema)
        rows = []
        for key, arr in self._data.items():
            parts = [steps[key] for steps, _ in checked]
            rows.append((arr, t0, parts[0] if len(parts) == 1 else np.concatenate(parts)))
        for name, arr in self._meta.items():
            values = [attrs[name] for _, attrs in checked]
            rows.append((arr, e0, np.asarray(values, dtype=arr.dtype if name in ("success", "seed") else None)))
        # Steps 1-2 of the commit protocol for all arrays at once (their order does not matter) ...
        zarr_sync(_all(_write_past_end(*r) for r in rows))
        ends = t0 + np.cumsum([len(steps[INTERVENTION]) for steps, _ in checked], dtype=np.int64)
        # ... and only then step 3, the commit: episode_ends/zarr.json gets the new shape.
        zarr_sync(_write_past_end(self._ends_arr, e0, ends))
        self._ends = np.concatenate([self._ends, ends])

    def _create_data_arrays(self, schema: dict[str, KeySpec]) -> None:
        for key, spec in sorted(schema.items()):
            self._data[key] = zarr.create_array(
                self._store, name=f"data/{key}", shape=(0, *spec.shape), dtype=spec.dtype,
                chunks=_chunks(spec), compressors=(_compressor(spec), Crc32cCodec()), overwrite=True,
                config=WRITE_ALL_CHUNKS,
            )

    # ---- loading and repair --------------------------------------------------------------------
    def _load(self) -> None:
        path = self.path
        self._ends_arr = _open_array(self._store, path, "meta/episode_ends")
        lost, _ = scan(path, {"meta/episode_ends": (self._ends_arr, self._ends_arr.shape[0])})
        if lost:
            raise StoreError(f"episode store {path} is corrupted: {lost[0]}, so its episode boundaries are lost and no "
                             "episode can be read; restore the store from a copy")
        ends = _read(self._ends_arr, slice(None), path, "meta/episode_ends")
        if ends.ndim != 1 or ends.dtype.kind not in "iu":
            raise StoreError(f"episode store {path} is corrupted: meta/episode_ends is {ends.dtype}{list(ends.shape)}, expected int64 [episodes]")
        ends = ends.astype(np.int64)
        if len(ends) and (ends[0] < 1 or np.any(np.diff(ends) < 1)):
            raise StoreError(f"episode store {path} is corrupted: meta/episode_ends is not strictly increasing from >= 1")
        n_eps, n_steps = len(ends), int(ends[-1]) if len(ends) else 0
        meta = {name: _open_array(self._store, path, f"meta/{name}") for name in EPISODE_ATTRS}
        data = {key: _open_array(self._store, path, f"data/{key}") for key in _find_arrays(path / "data")}
        for name, arr in meta.items():
            if arr.shape[0] < n_eps:
                raise StoreError(f"episode store {path} is corrupted: meta/{name} has {arr.shape[0]} entries, meta/episode_ends commits {n_eps} episodes")
        for key, arr in data.items():
            if arr.ndim < 1 or arr.shape[0] < n_steps:
                raise StoreError(f"episode store {path} is corrupted: data/{key} has shape {list(arr.shape)}, meta/episode_ends commits {n_steps} steps")
        if n_eps and INTERVENTION not in data:
            raise StoreError(f"episode store {path} is corrupted: data/{INTERVENTION} is missing")
        self._ends, self._meta, self._data, self._stats = ends, meta, data, None

    def _repair(self) -> None:
        """Truncate rows a killed (or failed) writer left past the committed ends; sweep temp files."""
        n_eps, n_steps = self.n_episodes, self.n_steps
        if n_eps == 0 and self._data:
            # Arrays made by a first append that never committed: the schema is not committed either.
            for child in (self.path / "data").iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                elif child.name != "zarr.json":
                    child.unlink()
            self._data = {}
        for arr in self._data.values():
            if arr.shape[0] > n_steps:
                arr.resize((n_steps, *arr.shape[1:]))
        for arr in self._meta.values():
            if arr.shape[0] > n_eps:
                arr.resize((n_eps,))
        for root, _, files in os.walk(self.path):
            for f in files:
                if f.endswith(TMP_SUFFIXES):
                    Path(root, f).unlink(missing_ok=True)

    # ---- normalization statistics ----------------------------------------------------------------
    def stats(self, keys: Sequence[str] | None = None) -> dict[str, KeyStats]:
        """Normalization stats per key (default: every int / float key with per-step ndim <= 1).

        Computed once over the committed steps and saved in meta/stats; appending makes them stale. With damaged
        episodes skipped they are computed over the intact ones, kept in memory only, never saved."""
        if self.n_episodes == 0:
            raise StoreError(f"episode store {self.path} has no episodes; statistics need at least one")
        specs = self.keys
        if keys is None:
            keys = [k for k, s in sorted(specs.items()) if len(s.shape) <= 1 and s.dtype.kind in "iuf"]
        for k in keys:
            if k not in specs:
                raise KeyError(f"no key {k!r} in episode store {self.path}; keys: {sorted(specs)}")
            if len(specs[k].shape) > 1:
                raise StoreError(
                    f"key {k!r} has per-step shape {list(specs[k].shape)}: per-element statistics are only kept for "
                    "low-dim keys (per-step ndim <= 1); scale images by 1/255 instead"
                )
        if self._stats is None:
            self._stats = self._load_stats() if not self._damage else {}
        missing = [k for k in keys if k not in self._stats]
        for k in missing:
            read, n_steps = self._good_rows(k)
            if n_steps == 0:
                raise StoreError(f"episode store {self.path}: every episode is damaged; statistics need an intact one")
            self._stats[k] = compute_stats(read, n_steps)
        if missing and not self._damage:
            self._save_stats(self._stats)
        return {k: self._stats[k] for k in keys}

    def _load_stats(self) -> dict[str, KeyStats]:
        try:
            attrs = dict(zarr.open_group(self._store, path="meta/stats", mode="r").attrs)
            if attrs.get("n_episodes") != self.n_episodes or attrs.get("n_steps") != self.n_steps:
                return {}
            return {k: KeyStats.from_json(v) for k, v in attrs.get("keys", {}).items()}
        except Exception:  # missing, stale or unreadable stats are recomputed, never trusted
            return {}

    def _save_stats(self, stats: dict[str, KeyStats]) -> None:
        attrs = {"n_episodes": self.n_episodes, "n_steps": self.n_steps, "keys": {k: s.to_json() for k, s in stats.items()}}
        try:
            # Readers save stats too (no lock needed): the write is one atomic rename, and the
            # episode/step tag keeps stats from an older view from ever being used for a newer one.
            store = AtomicLocalStore(self.path, fsync=self._store.fsync)
            zarr.open_group(store, path="meta/stats", mode="a").attrs.put(attrs)
        except OSError as e:
            warnings.warn(f"could not save normalization stats in {self.path}/meta/stats ({e}); they are kept in memory", stacklevel=3)

    # ---- damage ----------------------------------------------------------------------------------------
    def _check_integrity(self) -> None:
        """Find damaged chunks of committed episodes (integrity.py); raise unless a reader skips them.

        Readers check every chunk's checksum; a writer checks presence, and the checksum of each array's last
        chunk (the one an append reads back and rewrites, which would otherwise bake damage into it)."""
        writer = self._lock is not None
        arrays = {f"data/{k}": (a, self.n_steps) for k, a in self._data.items()}
        arrays.update({f"meta/{n}": (a, self.n_episodes) for n, a in self._meta.items()})
        chunks, self.legacy_arrays = scan(self.path, arrays, verified=self._verified, last_only=writer)
        self._damage = Damage(chunks, self._ends)
        if chunks and (writer or not self.skip_damaged):
            raise self._damage.error(self.path, self.n_episodes, writer)

    def _good_rows(self, key: str):
        """(read(a, b), n) over the rows of the intact episodes, concatenated in order: n rows in all."""
        if not self._damage:
            return (lambda a, b: self.read(key, a, b)), self.n_steps
        runs = self._damage.good_runs()
        offsets = np.cumsum([0] + [b - a for a, b in runs])

        def read(a: int, b: int) -> np.ndarray:
            parts = [self.read(key, s + max(a - o, 0), s + min(b - o, e - s))
                     for (s, e), o in zip(runs, offsets) if o < b and o + (e - s) > a]
            return np.concatenate(parts) if parts else np.zeros((0, *self.keys[key].shape), self.keys[key].dtype)

        return read, int(offsets[-1])

    def _check_episode(self, i: int) -> int:
        n = self.n_episodes
        if not (-n <= int(i) < n):
            raise IndexError(f"episode {i} out of range: episode store {self.path} has {n} committed episodes")
        return int(i) % n


@contextlib.contextmanager
def building(path: str | os.PathLike, fsync: bool = False) -> Iterator[EpisodeStore]:
    """A new store at `path` that appears whole or not at all (an import, a conversion): yields a store open for
    appending in a temp directory beside `path`, renamed to `path` when the block ends without error and removed
    otherwise. The temp store holds its writer lock until the rename, so a killed builder's is swept by the next
    open of `path` (integrity.sweep_creating). StoreError if `path` exists and is not an empty directory."""
    path = Path(path)
    if not vacant(path):
        raise StoreError(f"{path} already exists; write into a new path (combine stores with `robot-rl-data merge`)")
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.creating"
    store = EpisodeStore.open(tmp, mode="a", fsync=fsync)
    try:
        yield store
        try:
            os.rename(tmp, path)  # replaces an empty directory
        except OSError as e:
            raise StoreError(f"could not create episode store {path}: {e}") from None
    except BaseException:
        store.close()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    store.close()


# ---- store files ---------------------------------------------------------------------------------
def check_is_store(path: Path) -> None:
    """Raise StoreError naming the path and the problem unless `path` holds an episode store."""
    if not path.exists():
        raise StoreError(f"no episode store at {path}: the path does not exist")
    if not path.is_dir():
        raise StoreError(f"{path} is a file, not an episode store (a zarr directory)")
    root = path / "zarr.json"
    if not root.is_file():
        raise StoreError(
            f"{path} is not an episode store: it has no zarr.json (stores are made by robot-rl-collect or "
            "EpisodeStore.open(path, mode='a'))"
        )
    meta = _read_json(root, path)
    version = (meta.get("attributes") or {}).get(MARKER)
    if meta.get("node_type") != "group" or version is None:
        raise StoreError(f"{path} is a zarr node but not an episode store: {root} has no '{MARKER}' attribute")
    if version != FORMAT_VERSION:
        raise StoreError(f"{path} has episode store format {version!r}; this robot_rl reads format {FORMAT_VERSION}")


def _read_json(file: Path, store_path: Path) -> dict:
    try:
        meta = json.loads(file.read_bytes())
    except (OSError, ValueError) as e:
        raise StoreError(f"episode store {store_path} has corrupted metadata: {file} is not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise StoreError(f"episode store {store_path} has corrupted metadata: {file} is not a JSON object")
    return meta


def _open_array(store: AtomicLocalStore, path: Path, name: str) -> zarr.Array:
    file = path / name / "zarr.json"
    if not file.is_file():
        raise StoreError(f"episode store {path} is corrupted: {name} is missing ({file} does not exist)")
    _read_json(file, path)  # a clear message for torn / garbage JSON before zarr parses it
    try:
        arr = zarr.open_array(store, path=name, mode="r" if store.read_only else "r+")
        return arr if store.read_only else arr.with_config(WRITE_ALL_CHUNKS)
    except Exception as e:
        raise StoreError(f"episode store {path} has corrupted metadata in {file}: {type(e).__name__}: {e}") from None


def _read(arr: zarr.Array, sel, path: Path, name: str) -> np.ndarray:
    try:
        return np.asarray(arr[sel])
    except Exception as e:
        raise StoreError(f"episode store {path}: could not read {name} ({type(e).__name__}: {e}); a chunk is corrupted") from None


def _find_arrays(data_dir: Path) -> list[str]:
    """Keys of the arrays under data/ (e.g. 'obs/proprio'), found on disk without zarr's listing."""
    keys = []
    for root, dirs, files in os.walk(data_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if "zarr.json" in files and Path(root) != data_dir:
            if _read_json(Path(root, "zarr.json"), data_dir.parent).get("node_type") == "array":
                keys.append(Path(root).relative_to(data_dir).as_posix())
                dirs[:] = []  # chunk directories
    return sorted(keys)


def _create(path: Path, fsync: bool) -> WriterLock | None:
    """Build an empty store next to `path`, then rename it into place: a store exists whole or not at all.

    Returns the store's writer lock, held (None when a concurrent writer created the store first). The lock is
    taken before anything else is written, so integrity.sweep_creating never removes a live temp store."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.creating"
    (tmp / LOCK_FILE).parent.mkdir(parents=True)
    lock = WriterLock(tmp / LOCK_FILE, tmp)
    try:
        if not os.path.samestat(os.fstat(lock.fileno()), os.stat(tmp / LOCK_FILE)):
            raise StoreError(f"could not create episode store {path}: its temp directory {tmp} was removed under it")
        store = AtomicLocalStore(tmp, fsync=fsync)
        root = zarr.create_group(store, attributes={MARKER: FORMAT_VERSION})
        root.create_group("data")
        meta = root.create_group("meta")
        meta.create_group("stats")
        for name, dtype in {"episode_ends": "int64", **EPISODE_ATTRS}.items():
            compressors = (ZstdCodec(level=0), Crc32cCodec())  # zarr's default compressor, plus the checksum
            meta.create_array(name, shape=(0,), dtype=dtype, chunks=(META_CHUNK,), compressors=compressors)
        os.rename(tmp, path)  # replaces an empty directory; fails if a concurrent writer created it first
    except BaseException as e:
        lock.release()
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return None
        if isinstance(e, OSError):
            raise StoreError(f"could not create episode store {path}: {e}") from None
        raise
    lock.path = path / LOCK_FILE
    return lock


def _chunks(spec: KeySpec) -> tuple[int, ...]:
    per_step = max(1, spec.dtype.itemsize * math.prod(spec.shape))
    if len(spec.shape) >= 2:  # images and other frames
        return (max(1, min(FRAME_CHUNK_STEPS, FRAME_CHUNK_BYTES // per_step)), *spec.shape)
    return (max(1, min(1024, LOWDIM_CHUNK_BYTES // per_step)), *spec.shape)


def _compressor(spec: KeySpec) -> BloscCodec:
    shuffle = "shuffle" if spec.dtype.itemsize > 1 else "noshuffle"
    return BloscCodec(cname="zstd", clevel=3, shuffle=shuffle)


async def _all(coroutines) -> None:
    """Await every coroutine, then raise the first error: nothing keeps writing after this returns."""
    errors = [r for r in await asyncio.gather(*coroutines, return_exceptions=True) if isinstance(r, BaseException)]
    if errors:
        raise errors[0]


async def _write_past_end(arr: zarr.Array, start: int, values: np.ndarray) -> None:
    """Write rows [start, start+len) through a view with the larger shape, then persist the shape.

    Readers trust the shape in zarr.json, so they see the rows only after they are fully written."""
    stop = start + len(values)
    shape = (stop, *arr.shape[1:])
    await AsyncArray(arr.metadata.update_shape(shape), arr.store_path, arr.async_array.config).setitem(slice(start, stop), values)
    await arr.async_array.resize(shape)
