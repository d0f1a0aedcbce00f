"""LeRobot round trip: an episode store -> a LeRobot v3.0 dataset -> an episode store, key by key.

    python bench/lerobot_roundtrip.py [--quick] [--episodes N] [--image-size H W]

Collects scripted lift episodes with the front and wrist cameras (default 20 episodes, 96x96 images, the env's
default size; --quick: 4 episodes at 32x32) into a temp store, then for each video setting
  - lerobot-default: AV1 (SVT-AV1) crf 30 yuv420p, g 2: what LeRobot itself writes,
  - near-lossless:   H.264 crf 0 yuv444p,
runs `robot-rl-data export-lerobot` and `import-lerobot` (in-process) and prints one JSON line per setting:
episodes and steps before and after, the max abs difference per key (images: also its 99th percentile and mean),
the attributes that differ (none expected), the dataset's size on disk, and export / import seconds (indicative:
timed on whatever else the machine runs). Last line: JSON with every setting.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np

SETTINGS = {
    "lerobot-default": [],
    "near-lossless": ["--vcodec", "h264", "--crf", "0", "--pix-fmt", "yuv444p"],
}
ATTRS = ("task", "instruction", "source", "success", "seed", "metadata")


def collect_store(path: Path, episodes: int, size: tuple[int, int]) -> None:
    from robot_rl import sim
    from robot_rl.data import EpisodeStore
    from robot_rl.data.collect import collect
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=min(episodes, 4), cameras=["front", "wrist"], image_size=list(size))
    with EpisodeStore.open(path, mode="a") as store:
        collect(env, make_expert(env, noise=0.1, seed=0), store, episodes=episodes, seed=0, source="expert")
    env.close()


def cli(*argv: str) -> str:
    from robot_rl.cli.data import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(list(argv))
    return out.getvalue()


def compare(a_path: Path, b_path: Path) -> dict:
    from robot_rl.data import EpisodeStore

    a, b = EpisodeStore.open(a_path), EpisodeStore.open(b_path)
    keys = {}
    for k in sorted(set(a.keys) | set(b.keys)):
        if k not in a.keys or k not in b.keys:
            keys[k] = "only in " + ("the original" if k in a.keys else "the import")
            continue
        x, y = a.read(k).astype(np.float64), b.read(k).astype(np.float64)
        d = np.abs(x - y) if x.shape == y.shape else None
        keys[k] = ({"max_abs_diff": float(d.max()), "p99_abs_diff": float(np.percentile(d, 99)),
                    "mean_abs_diff": round(float(d.mean()), 3)}
                   if d is not None and k.startswith("obs/images/") else
                   {"max_abs_diff": float(d.max())} if d is not None else f"shape {x.shape} vs {y.shape}")
    return {
        "episodes": [a.n_episodes, b.n_episodes], "steps": [a.n_steps, b.n_steps],
        "episode_ends_equal": a.episode_ends.tolist() == b.episode_ends.tolist(),
        "attributes_differing": [n for n in ATTRS if a.episode_attr(n).tolist() != b.episode_attr(n).tolist()],
        "keys": keys,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--episodes", type=int)
    p.add_argument("--image-size", type=int, nargs=2)
    args = p.parse_args()
    episodes = args.episodes or (4 if args.quick else 20)
    size = tuple(args.image_size or ((32, 32) if args.quick else (96, 96)))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = tmp / "lift.zarr"
        collect_store(store, episodes, size)
        for name, flags in SETTINGS.items():
            lr, back = tmp / f"{name}-lerobot", tmp / f"{name}.zarr"
            t0 = time.perf_counter()
            cli("export-lerobot", str(store), str(lr), *flags)
            t1 = time.perf_counter()
            cli("import-lerobot", str(lr), str(back))
            t2 = time.perf_counter()
            row = {"setting": name, "flags": " ".join(flags) or "(defaults)", "image_size": list(size),
                   **compare(store, back),
                   "lerobot_bytes": sum(f.stat().st_size for f in lr.rglob("*") if f.is_file()),
                   "store_bytes": sum(f.stat().st_size for f in store.rglob("*") if f.is_file()),
                   "export_s": round(t1 - t0, 2), "import_s": round(t2 - t1, 2)}
            results[name] = row
            print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "lerobot_roundtrip", "episodes": episodes, "image_size": list(size), "results": results}))


if __name__ == "__main__":
    main()
