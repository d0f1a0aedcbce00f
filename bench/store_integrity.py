"""Damaged chunks of an episode store: delete, truncate or bit-flip one chunk file at random, N trials.

    python bench/store_integrity.py [--trials 100] [--seed 0]

Builds a store in a temp dir (300 episodes of 1-23 steps: obs/proprio, camera frames, action, reward,
intervention; 3,589 steps, so the low-dim keys span 4 chunks and the frames 57), then per trial picks an
array (data/* or meta/*, uniformly) and one of its committed chunks (uniformly), damages it (the three kinds
in turn) and asks the store:
  - detected: EpisodeStore.open(path) refuses it (DamagedStoreError, or StoreError for meta/episode_ends), and
    open(path, skip_damaged=True) lists the episodes that chunk holds as damaged;
  - silent: open() succeeds.
Baseline in the same run: a copy of the store in the layout robot_rl wrote before chunk checksums (the same
arrays and chunks, without the crc32c codec), given the same damage to the same chunk and read with zarr as
the store used to: "error" (the compressor raises), "silent" (other values without a word, e.g. zeros for a
deleted chunk), "same" (the original values). The chunks are restored after each trial. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import numpy as np
import zarr

from robot_rl.data import SOURCES, Episode, EpisodeStore, StoreError

KINDS = ("delete", "truncate", "bitflip")


def make_episode(k: int) -> Episode:
    """Episode k: 1-23 steps of random proprio, 16x16 frames, actions, rewards and intervention flags."""
    rng = np.random.default_rng(k)
    n = 1 + (k * 7) % 23
    return Episode(
        steps={"obs/proprio": rng.standard_normal((n, 20)).astype(np.float32),
               "obs/images/cam": rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8),
               "action": rng.uniform(-1, 1, (n, 4)).astype(np.float32), "reward": rng.standard_normal(n),
               "intervention": rng.random(n) < 0.3},
        task="lift", source=SOURCES[k % len(SOURCES)], success=k % 3 == 0, instruction=f"episode {k}", seed=k,
    )


def build_store(path: Path, episodes: int = 300) -> None:
    with EpisodeStore.open(path, mode="a") as store:
        store.append([make_episode(k) for k in range(episodes)])


def committed_chunks(path: Path) -> dict[str, list[tuple[str, Path, tuple[int, int]]]]:
    """Array name (e.g. data/obs/proprio, meta/success) -> its committed chunks: (key, file, rows [a, b))."""
    from robot_rl.data.integrity import chunk_files

    store = EpisodeStore.open(path)
    arrays = {f"data/{k}": (store.array(k), store.n_steps) for k in store.keys}
    arrays.update({f"meta/{n}": (zarr.open_array(path / "meta" / n, mode="r"), store.n_episodes)
                   for n in ("episode_ends", "task", "instruction", "source", "success", "seed", "metadata")})
    return {name: chunk_files(path, name, arr, rows) for name, (arr, rows) in arrays.items()}


def damage_chunk(file: Path, kind: str, rng: random.Random) -> None:
    """Delete the file, truncate it to a random shorter length, or flip one random bit of it."""
    if kind == "delete":
        file.unlink()
    elif kind == "truncate":
        data = file.read_bytes()
        file.write_bytes(data[: rng.randrange(len(data))])
    elif kind == "bitflip":
        data = bytearray(file.read_bytes())
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
        file.write_bytes(bytes(data))
    else:
        raise ValueError(f"kind={kind!r}; valid: {KINDS}")


def detected(path: Path, name: str, rows: tuple[int, int]) -> bool:
    """The store refuses the damage at open, and names the episodes the damaged chunk holds."""
    from robot_rl.data.errors import DamagedStoreError

    try:
        EpisodeStore.open(path)
        return False
    except DamagedStoreError:
        pass
    except StoreError:
        return name == "meta/episode_ends"  # the boundaries themselves are lost: the store as a whole is refused
    store = EpisodeStore.open(path, skip_damaged=True)
    ends = store.episode_ends
    first = rows[0] if name.startswith("meta/") else int(np.searchsorted(ends, rows[0], side="right"))
    return first in store.damaged_episodes and all(
        any(d.array == name for d in ds) for ds in store.damaged_episodes.values())


def legacy_copy(path: Path, out: Path) -> None:
    """The arrays of the store at `path` (data and meta) copied to `out` without the crc32c codec."""
    for name, chunks in committed_chunks(path).items():
        src = zarr.open_array(path / name, mode="r")
        dst = zarr.create_array(out / name, shape=src.shape, dtype=src.dtype, chunks=src.chunks,
                                compressors=src.compressors[:-1], fill_value=src.fill_value)
        dst[...] = src[...]


def plain_zarr(path: Path, name: str, rows: tuple[int, int], want: np.ndarray) -> str:
    """What a plain zarr read of the damaged chunk's rows gives: error, silent (other values) or same."""
    try:
        got = np.asarray(zarr.open_array(path / name, mode="r")[rows[0]: rows[1]])
    except Exception:
        return "error"
    return "same" if got.tobytes() == want.tobytes() else "silent"


def run_trials(path: Path, trials: int, seed: int = 0, legacy: Path | None = None) -> dict:
    """Damage one random chunk per trial (kinds in turn), check detection, restore. With `legacy` (legacy_copy of
    the store) the same damage to the same chunk there is read with plain zarr: the baseline."""
    rng = random.Random(seed)
    chunks = committed_chunks(path)
    names = sorted(chunks)
    counts = {k: {"trials": 0, "detected": 0, "silent": 0} for k in KINDS}
    baseline = {k: {"error": 0, "silent": 0, "same": 0} for k in KINDS}
    missed = []
    for t in range(trials):
        kind = KINDS[t % len(KINDS)]
        name = rng.choice(names)
        key, file, rows = rng.choice(chunks[name])
        trial_seed = rng.randrange(2**32)  # the same damage (offsets, bit) in the store and its legacy copy
        original = file.read_bytes()
        damage_chunk(file, kind, random.Random(trial_seed))
        try:
            ok = detected(path, name, rows)
        finally:
            file.write_bytes(original)
        if legacy is not None:
            old_file = legacy / name / key
            old_bytes, want = old_file.read_bytes(), np.asarray(zarr.open_array(legacy / name, mode="r")[rows[0]: rows[1]])
            damage_chunk(old_file, kind, random.Random(trial_seed))
            baseline[kind][plain_zarr(legacy, name, rows, want)] += 1
            old_file.write_bytes(old_bytes)
        counts[kind]["trials"] += 1
        counts[kind]["detected" if ok else "silent"] += 1
        if not ok:
            missed.append(f"{kind} {name} {key}")
    return {"trials": trials, "detected": sum(c["detected"] for c in counts.values()),
            "silent": sum(c["silent"] for c in counts.values()), "by_kind": counts, "missed": missed,
            "baseline_no_checksums": baseline, "baseline_silent": sum(b["silent"] for b in baseline.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.zarr"
        build_store(path)
        legacy_copy(path, Path(tmp) / "legacy.zarr")
        result = run_trials(path, args.trials, args.seed, Path(tmp) / "legacy.zarr")
    for kind, c in result["by_kind"].items():
        b = result["baseline_no_checksums"][kind]
        print(f"{kind:9s} {c['trials']:3d} trials: {c['detected']} detected, {c['silent']} silent   "
              f"(before, no checksums: {b['error']} error, {b['silent']} silent, {b['same']} unchanged)")
    print(json.dumps({"bench": "store_integrity", "seed": args.seed, **result}))


if __name__ == "__main__":
    main()
