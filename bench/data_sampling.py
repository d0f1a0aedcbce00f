"""Windows/s of the sequence sampler vs a naive per-window zarr read of the same windows, in one run.

    python bench/data_sampling.py [--quick]

Builds a low-dim episode store in a temp dir (200 episodes x 100 steps; obs/proprio 20, obs/object 11,
action 4 floats; --quick: 50 episodes), then samples batches of 256 windows (obs_horizon 2,
action_horizon 16) with:
  - SequenceSampler, in-memory mode (the figure that matters; target >= 50,000 windows/s),
  - SequenceSampler, lazy mode (reads each batch from zarr),
  - WindowDataset.loader (the torch path: batches of tensors),
  - naive: per window and key, slice the zarr array and pad by hand (what a first Dataset does).
The naive reader is checked to return exactly the sampler's windows. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl.data import Episode, EpisodeStore
from robot_rl.data.sampler import SequenceSampler
from robot_rl.data.torch_dataset import WindowDataset

OBS_KEYS = ["obs/object", "obs/proprio"]
ACTION_KEYS = ["action"]


def build_store(path: Path, episodes: int, steps: int, seed: int = 0) -> EpisodeStore:
    rng = np.random.default_rng(seed)
    batch = []
    with EpisodeStore.open(path, mode="a") as store:
        for k in range(episodes):
            n = steps + int(rng.integers(-10, 11))  # realistic: lengths differ
            batch.append(Episode(
                steps={"obs/proprio": rng.standard_normal((n, 20)).astype(np.float32),
                       "obs/object": rng.standard_normal((n, 11)).astype(np.float32),
                       "action": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                       "intervention": np.zeros(n, bool)},
                task="lift", source="expert", success=bool(k % 2), seed=k,
            ))
            if len(batch) == 50:
                store.append(batch)
                batch = []
        store.append(batch)
    return EpisodeStore.open(path)


def naive_windows(store: EpisodeStore, index: np.ndarray, to: int, ta: int) -> dict[str, np.ndarray]:
    """Window w anchored at global step w: one zarr slice per window and key, edge rows repeated by hand."""
    arrays = {k: store.array(k) for k in OBS_KEYS + ACTION_KEYS}
    ends = store.episode_ends
    out = {k: [] for k in arrays}
    for g in index.tolist():
        ep = int(np.searchsorted(ends, g, side="right"))
        start, end = (int(ends[ep - 1]) if ep else 0), int(ends[ep])
        for k in OBS_KEYS:
            rows = arrays[k][max(start, g - to + 1): g + 1]
            out[k].append(np.concatenate([np.repeat(rows[:1], to - len(rows), axis=0), rows]))
        for k in ACTION_KEYS:
            rows = arrays[k][g: min(end, g + ta)]
            out[k].append(np.concatenate([rows, np.repeat(rows[-1:], ta - len(rows), axis=0)]))
    return {k: np.stack(v) for k, v in out.items()}


def rate(fn, windows_per_call: int, min_seconds: float) -> float:
    """Windows per second of fn(), timed over at least min_seconds after one warm-up call."""
    fn()
    n, start = 0, time.perf_counter()
    while n < 3 or time.perf_counter() - start < min_seconds:
        fn()
        n += 1
    return n * windows_per_call / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 episodes, shorter timing")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    episodes = 50 if args.quick else 200
    seconds = 0.5 if args.quick else 2.0
    naive_n = 256 if args.quick else 1024
    b, to, ta = args.batch, 2, 16

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store = build_store(Path(tmp) / "bench.zarr", episodes, 100)
        build_s = time.perf_counter() - t0
        kw = dict(obs_keys=OBS_KEYS, action_keys=ACTION_KEYS, obs_horizon=to, action_horizon=ta)
        mem = SequenceSampler(store, mode="memory", **kw)
        lazy = SequenceSampler(store, mode="lazy", **kw)
        rng = np.random.default_rng(0)

        # Same windows for every reader; the naive one must agree exactly with the sampler.
        index = rng.integers(0, len(mem), size=naive_n)
        want = mem.windows(index)
        got = naive_windows(store, index, to, ta)
        assert all(np.array_equal(want[k], got[k]) for k in got), "naive reader and sampler disagree"
        assert all(np.array_equal(want[k], lazy.windows(index)[k]) for k in got), "lazy and memory modes disagree"

        mem_wps = rate(lambda: mem.sample(b, rng), b, seconds)
        lazy_wps = rate(lambda: lazy.sample(b, rng), b, seconds)
        loader = WindowDataset(mem).loader(batch_size=b)
        it = iter(loader)

        def torch_batch():
            nonlocal it
            try:
                next(it)
            except StopIteration:
                it = iter(loader)
                next(it)

        torch_wps = rate(torch_batch, b, seconds)
        t = time.perf_counter()
        naive_windows(store, index, to, ta)
        naive_wps = naive_n / (time.perf_counter() - t)

    speedup = mem_wps / naive_wps
    print(f"store: {episodes} episodes, {store.n_steps} steps, keys {OBS_KEYS + ACTION_KEYS} (built in {build_s:.2f} s)")
    print(f"batch {b}, obs_horizon {to}, action_horizon {ta}")
    print(f"sampler, in-memory : {mem_wps:12,.0f} windows/s   (target >= 50,000)")
    print(f"sampler, lazy      : {lazy_wps:12,.0f} windows/s")
    print(f"torch loader       : {torch_wps:12,.0f} windows/s   (WindowDataset.loader, in-memory)")
    print(f"naive zarr slicing : {naive_wps:12,.0f} windows/s   ({naive_n} windows, same ones)")
    print(f"speedup vs naive   : {speedup:12,.1f}x   (target >= 10x)")
    print(json.dumps({
        "windows_per_s": round(mem_wps), "speedup_vs_naive": round(speedup, 1), "naive_windows_per_s": round(naive_wps),
        "lazy_windows_per_s": round(lazy_wps), "torch_loader_windows_per_s": round(torch_wps),
        "episodes": episodes, "steps": store.n_steps, "batch": b, "obs_horizon": to, "action_horizon": ta,
        "cores": os.cpu_count(), "quick": args.quick,
    }))


if __name__ == "__main__":
    main()
