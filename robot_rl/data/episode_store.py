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
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import math
import os
import re
import shutil
import uuid
import warnings
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import zarr
from zarr.codecs import BloscCodec
from zarr.core.array import AsyncArray
from zarr.core.sync import sync as zarr_sync  # runs coroutines on zarr's own I/O loop

from robot_rl.data.atomic_store import TMP_SUFFIXES, AtomicLocalStore
from robot_rl.data.errors import StoreError
from robot_rl.data.stats import KeyStats, compute_stats
from robot_rl.data.writer_lock import WriterLock

MARKER = "robot_rl_episode_store"
FORMAT_VERSION = 1
SOURCES = ("expert", "teleop", "policy", "intervention")
INTERVENTION = "intervention"
# Per-episode attributes: name -> zarr dtype. Strings are variable-length UTF-8.
EPISODE_ATTRS = {"task": str, "instruction": str, "source": str, "success": "bool", "seed": "int64", "metadata": str}
LOCK_FILE = "meta/episode_ends/.lock"  # next to the commit record it guards
META_CHUNK = 1024  # episodes per chunk of the meta arrays
LOWDIM_CHUNK_BYTES = 256 * 1024  # target chunk size of low-dim per-step arrays (<= 1024 steps)
# Frames (per-step arrays of >= 2 dims, e.g. images): up to 64 consecutive steps per chunk, at most ~4 MiB
# raw. Consecutive frames compress together far better than one by one, and a sampler reading a window of
# an episode decodes one or two chunks; a single random frame costs decoding its whole chunk.
FRAME_CHUNK_STEPS = 64
FRAME_CHUNK_BYTES = 4 * 1024 * 1024
_KEY_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


@dataclasses.dataclass
class Episode:
    """One episode: per-step arrays (all of length T, axis 0 is time) and per-episode attributes."""

    steps: dict[str, np.ndarray]
    task: str
    source: str
    success: bool
    instruction: str = ""
    seed: int = -1
    metadata: dict = dataclasses.field(default_factory=dict)

    @property
    def length(self) -> int:
        return len(self.steps[INTERVENTION])


@dataclasses.dataclass(frozen=True)
class KeySpec:
    shape: tuple[int, ...]  # per step
    dtype: np.dtype


class EpisodeStore:
    """Append episodes atomically, read committed ones. Build with `EpisodeStore.open(path, mode)`."""

    def __init__(self, path: Path, store: AtomicLocalStore, lock: WriterLock | None):
        self.path = path
        self._store = store
        self._lock = lock
        self._data: dict[str, zarr.Array] = {}
        self._meta: dict[str, zarr.Array] = {}
        self._ends_arr: zarr.Array | None = None
        self._ends = np.zeros(0, dtype=np.int64)
        self._stats: dict | None = None
        self._unsure = False  # a commit failed: re-read the committed state before the next one

    # ---- opening -------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike, mode: str = "r", *, fsync: bool = False) -> "EpisodeStore":
        """mode "r": read committed episodes. mode "a": append (creates the store, takes the writer lock)."""
        path = Path(path)
        if mode == "r":
            check_is_store(path)
            self = cls(path, AtomicLocalStore(path, read_only=True), None)
            self._load()
            return self
        if mode != "a":
            raise ValueError(f"mode={mode!r}; valid: 'r' (read committed episodes) or 'a' (append, create if missing)")
        if not path.exists() or _is_empty_dir(path):
            _create(path, fsync)
        check_is_store(path)
        if not (path / LOCK_FILE).parent.is_dir():
            raise StoreError(f"episode store {path} is corrupted: meta/episode_ends is missing")
        lock = WriterLock(path / LOCK_FILE, path)
        try:
            self = cls(path, AtomicLocalStore(path, fsync=fsync), lock)
            self._load()
            self._repair()
        except BaseException:
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
        return _read(arr, slice(int(start), stop), self.path, f"data/{key}")

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
        return _read(self._meta[name], slice(0, self.n_episodes), self.path, f"meta/{name}")

    def episode(self, i: int) -> Episode:
        """Episode i with its steps and attributes."""
        start, end = self.episode_range(i)
        steps = {k: _read(a, slice(start, end), self.path, f"data/{k}") for k, a in self._data.items()}
        attrs = {n: _read(a, slice(i, i + 1), self.path, f"meta/{n}")[0] for n, a in self._meta.items()}
        return Episode(
            steps=steps, task=str(attrs["task"]), source=str(attrs["source"]), success=bool(attrs["success"]),
            instruction=str(attrs["instruction"]), seed=int(attrs["seed"]), metadata=json.loads(str(attrs["metadata"])),
        )

    def summary(self) -> dict:
        """Episodes, steps, keys (shape, dtype), success rate, counts per source and per task."""
        n = self.n_episodes
        intervention = int(self.read(INTERVENTION).sum()) if n else 0
        return {
            "path": str(self.path),
            "episodes": n,
            "steps": self.n_steps,
            "keys": {k: {"shape": list(s.shape), "dtype": str(s.dtype)} for k, s in sorted(self.keys.items())},
            "success_rate": float(self.episode_attr("success").mean()) if n else None,
            "sources": dict(sorted(Counter(map(str, self.episode_attr("source"))).items())),
            "tasks": dict(sorted(Counter(map(str, self.episode_attr("task"))).items())),
            "intervention_steps": intervention,
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
            steps, attrs = _validate(ep, i, schema)
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
                chunks=_chunks(spec), compressors=_compressor(spec), overwrite=True,
            )

    # ---- loading and repair --------------------------------------------------------------------
    def _load(self) -> None:
        path = self.path
        self._ends_arr = _open_array(self._store, path, "meta/episode_ends")
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

        Computed once over the committed steps and saved in meta/stats; appending makes them stale."""
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
            self._stats = self._load_stats()
        missing = [k for k in keys if k not in self._stats]
        for k in missing:
            self._stats[k] = compute_stats(lambda a, b, k=k: self.read(k, a, b), self.n_steps)
        if missing:
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

    def _check_episode(self, i: int) -> int:
        n = self.n_episodes
        if not (-n <= int(i) < n):
            raise IndexError(f"episode {i} out of range: episode store {self.path} has {n} committed episodes")
        return int(i) % n


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
        return zarr.open_array(store, path=name, mode="r" if store.read_only else "r+")
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


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _create(path: Path, fsync: bool) -> None:
    """Build an empty store next to `path`, then rename it into place: a store exists whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.creating"
    store = AtomicLocalStore(tmp, fsync=fsync)
    root = zarr.create_group(store, attributes={MARKER: FORMAT_VERSION})
    root.create_group("data")
    meta = root.create_group("meta")
    meta.create_group("stats")
    meta.create_array("episode_ends", shape=(0,), dtype="int64", chunks=(META_CHUNK,))
    for name, dtype in EPISODE_ATTRS.items():
        meta.create_array(name, shape=(0,), dtype=dtype, chunks=(META_CHUNK,))
    (tmp / LOCK_FILE).touch()
    try:
        os.rename(tmp, path)  # replaces an empty directory; fails if a concurrent writer created it first
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise StoreError(f"could not create episode store {path}: {e}") from None


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
    await AsyncArray(arr.metadata.update_shape(shape), arr.store_path).setitem(slice(start, stop), values)
    await arr.async_array.resize(shape)


# ---- validation ------------------------------------------------------------------------------------
def _validate(ep: Episode, i: int, schema: dict[str, KeySpec] | None) -> tuple[dict, dict]:
    """(steps as numpy arrays, attrs) of episode i of a batch, or StoreError naming the key and the fix."""
    where = f"episode {i} of the batch"
    if not isinstance(ep, Episode):
        raise StoreError(f"{where} is a {type(ep).__name__}, expected robot_rl.data.Episode")
    if not isinstance(ep.steps, dict) or not ep.steps:
        raise StoreError(f"{where}: steps must be a non-empty dict of per-step arrays, got {type(ep.steps).__name__}")
    steps = {}
    for key, value in ep.steps.items():
        _check_key_name(key, where)
        a = np.asarray(value)
        if a.ndim == 0:
            raise StoreError(f"{where}: key {key!r} is a scalar; give one value per step (shape [T, ...])")
        if a.dtype.kind not in "biufc":
            raise StoreError(f"{where}: key {key!r} has dtype {a.dtype}; per-step arrays must be bool, integer, float or complex")
        steps[key] = a
    if INTERVENTION not in steps:
        raise StoreError(
            f"{where}: missing key {INTERVENTION!r} (bool [T], True where a human was in control; all False for "
            "expert or policy data)"
        )
    if schema is None:
        for key in steps:  # the first episode defines the schema; 'obs' and 'obs/proprio' cannot both be arrays
            clash = [k for k in steps if k.startswith(key + "/")]
            if clash:
                raise StoreError(f"{where}: key {key!r} is also a prefix of {clash}; rename one of them")
        schema = {k: KeySpec(v.shape[1:], v.dtype) for k, v in steps.items()}
        if schema[INTERVENTION] != KeySpec((), np.dtype(bool)):
            s = steps[INTERVENTION]
            raise StoreError(f"{where}: key {INTERVENTION!r} has dtype {s.dtype} and per-step shape {list(s.shape[1:])}, expected bool and []")
    missing = sorted(set(schema) - set(steps))
    if missing:
        raise StoreError(f"{where}: missing key {missing[0]!r} (expected {_fmt(schema[missing[0]])}); every episode needs all store keys {sorted(schema)}")
    extra = sorted(set(steps) - set(schema))
    if extra:
        raise StoreError(f"{where}: unknown key {extra[0]!r}; the store's keys are {sorted(schema)} (a store's keys are fixed by its first episode)")
    n = len(steps[INTERVENTION])
    if n == 0:
        raise StoreError(f"{where} has zero steps; an episode needs at least one step")
    for key, a in sorted(steps.items()):
        spec = schema[key]
        if tuple(a.shape[1:]) != spec.shape:
            raise StoreError(f"{where}: key {key!r} has per-step shape {list(a.shape[1:])}, expected {list(spec.shape)}")
        if a.dtype != spec.dtype:
            raise StoreError(f"{where}: key {key!r} has dtype {a.dtype}, expected {spec.dtype}; cast it with .astype({str(spec.dtype)!r})")
        if len(a) != n:
            raise StoreError(f"{where}: key {key!r} has {len(a)} steps, expected {n} (the length of {INTERVENTION!r})")
    return steps, _validate_attrs(ep, where)


def _validate_attrs(ep: Episode, where: str) -> dict:
    if not (isinstance(ep.task, str) and ep.task):
        raise StoreError(f"{where}: task={ep.task!r} must be a non-empty string (e.g. 'lift')")
    if ep.source not in SOURCES:
        raise StoreError(f"{where}: source={ep.source!r}; valid sources: {', '.join(SOURCES)}")
    if not isinstance(ep.success, (bool, np.bool_)):
        raise StoreError(f"{where}: success={ep.success!r} must be a bool")
    if not isinstance(ep.instruction, str):
        raise StoreError(f"{where}: instruction={ep.instruction!r} must be a string")
    if isinstance(ep.seed, (bool, np.bool_)) or not isinstance(ep.seed, (int, np.integer)):
        raise StoreError(f"{where}: seed={ep.seed!r} must be an integer (-1 = unknown)")
    if not isinstance(ep.metadata, dict):
        raise StoreError(f"{where}: metadata must be a dict, got {type(ep.metadata).__name__}")
    try:
        metadata = json.dumps(ep.metadata, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{where}: metadata must be JSON-serializable ({e})") from None
    return {"task": ep.task, "instruction": ep.instruction, "source": ep.source, "success": bool(ep.success),
            "seed": int(ep.seed), "metadata": metadata}


def _check_key_name(key, where: str) -> None:
    if not isinstance(key, str) or not all(_KEY_PART.match(p) for p in key.split("/")):
        raise StoreError(
            f"{where}: key {key!r} is not a valid name; use '/'-separated parts of letters, digits, '_', '.', '-' "
            "(e.g. 'obs/proprio')"
        )


def _fmt(spec: KeySpec) -> str:
    return f"{spec.dtype} per-step shape {list(spec.shape)}"
