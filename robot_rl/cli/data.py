"""robot-rl-data: inspect and combine episode stores; LeRobot datasets in and out.

    robot-rl-data info PATH [--json]          episodes, steps, keys (shape, dtype), success rate, sources
    robot-rl-data merge OUT IN1 [IN2 ...]     append every episode of IN1, IN2, ... to OUT (created if missing)
    robot-rl-data verify PATH [--json]        check every chunk; one line per damaged episode
    robot-rl-data export-lerobot STORE OUT    the episodes as a new LeRobot dataset directory (v3.0: parquet + mp4)
    robot-rl-data import-lerobot DIR OUT      the episodes of a local LeRobot v3.0 dataset as a new store

Damaged episodes (a chunk missing, truncated or altered: robot_rl/data/integrity.py) make info and merge
exit 2 naming them; --skip-damaged leaves them out (`merge NEW OLD --skip-damaged` copies the intact ones).
verify exits 0 when the store is intact, 1 when it found damaged episodes, 2 when it cannot read the store.

A rosbag2 of a deployment becomes episodes with robot-rl-import-rosbag (real/cli/import_rosbag.py).

LeRobot datasets (robot_rl/data/lerobot_dataset.py, keys as robot_rl/data/lerobot_keys.py maps them): the vector
observation keys become observation.state (--state-keys picks and orders them), obs/images/<camera> the video
observation.images.<camera> (--camera ours=theirs renames), action, reward, ... LeRobot's names; --keys FILE.json
gives the whole mapping ({"state_keys": [...], "cameras": {...}, "features": {...}}). Images are re-encoded: LeRobot's
AV1 crf 30 yuv420p is lossy; --vcodec h264 --crf 0 --pix-fmt yuv444p is near-lossless. Both write into a temp
directory renamed at the end: OUT appears whole or not at all, and must not exist (or be empty).

A path that is not a store (or not a LeRobot v3.0 dataset), a corrupted one, a locked or existing OUT, stores with
different keys, a NaN on its way to LeRobot or back: exit code 2 and one line naming the path and the problem.

argparse, not Hydra like the other robot-rl-* commands: these are subcommands on paths (merge OUT IN1 IN2 ...)
that take seconds to minutes and write no run directory. Hydra has neither subcommands nor positional arguments, and its run
directory, config groups and -m sweeps would have nothing to act on here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from robot_rl.common.cli import ArgumentParser, fail, or_fail
from robot_rl.common.atomic import vacant


def _counts(d: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in d.items()) or "-"


def _info(args) -> None:
    from robot_rl.data.episode_store import EpisodeStore

    s = EpisodeStore.open(args.path, skip_damaged=args.skip_damaged).summary()
    if args.json:
        print(json.dumps(s, indent=2))
        return
    rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.3f}"
    print(f"episode store {s['path']}")
    print(f"  episodes            {s['episodes']}")
    if s["damaged_episodes"]:
        print(f"  damaged (skipped)   {len(s['damaged_episodes'])}")
    print(f"  steps               {s['steps']}")
    print(f"  success rate        {rate}")
    print(f"  sources             {_counts(s['sources'])}")
    print(f"  tasks               {_counts(s['tasks'])}")
    print(f"  intervention steps  {s['intervention_steps']}")
    print("  keys (per step)")
    width = max((len(k) for k in s["keys"]), default=0)
    for k, spec in s["keys"].items():
        print(f"    {k:<{width}}  {spec['dtype']:<8} {spec['shape']}")


def _merge(args) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.data.merge import check_mergeable, merge_stores

    out = Path(args.out)
    for p in args.inputs:
        if out.exists() and Path(p).exists() and Path(p).resolve() == out.resolve():
            fail(f"{p} is both an input and the output; merge into a new path")
    inputs = [EpisodeStore.open(p, skip_damaged=args.skip_damaged) for p in args.inputs]
    # Every input opens and all keys agree before OUT is created or touched.
    existing = not vacant(out)
    check_mergeable(inputs, EpisodeStore.open(out) if existing else None)
    with EpisodeStore.open(out, mode="a") as store:
        total = sum(len(s.good_episodes) for s in inputs)  # --skip-damaged leaves some out
        with Progress(TextColumn("merge"), BarColumn(), MofNCompleteColumn(), TextColumn("eta"), TimeRemainingColumn()) as bar:
            task = bar.add_task("merge", total=total)
            copied = merge_stores(store, inputs, progress=lambda n: bar.advance(task, n))
    print(f"merged {copied} episodes from {len(inputs)} store(s) into {out} (now {store.n_episodes} episodes, {store.n_steps} steps)")


def _verify(args) -> None:
    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.data.integrity import reader_fix

    store = EpisodeStore.open(args.path, skip_damaged=True)
    damaged = store.damaged_episodes
    if args.json:
        print(json.dumps({"path": str(store.path), "episodes": store.n_episodes, "legacy_arrays": store.legacy_arrays,
                          "damaged": {str(e): [str(d) for d in ds] for e, ds in damaged.items()}}, indent=2))
    else:
        for e, ds in damaged.items():
            start, stop = store.episode_range(e)
            print(f"episode {e} (steps {start}-{stop}): {'; '.join(map(str, ds))}")
        if store.legacy_arrays:
            print(f"note: {len(store.legacy_arrays)} array(s) were written by an older robot_rl without chunk checksums "
                  f"({', '.join(store.legacy_arrays[:3])}, ...): their damage cannot be detected; `robot-rl-data merge NEW "
                  f"{store.path}` writes a checksummed copy")
        if damaged:
            print(f"{len(damaged)} of {store.n_episodes} episodes of {store.path} are damaged; readers refuse them: "
                  + reader_fix(store.path))
        else:
            print(f"{store.path}: {store.n_episodes} episodes, every chunk present and intact")
    if damaged:
        sys.exit(1)


def _keys(args):
    """The key mapping of --keys FILE, with --state-keys / --camera on top."""
    from robot_rl.data.lerobot_keys import DatasetKeys

    keys = or_fail(DatasetKeys.load, args.keys) if args.keys else DatasetKeys()
    if args.state_keys is not None:
        keys.state_keys = tuple(k for k in args.state_keys.split(",") if k)
    if args.camera:
        pairs = [c.partition("=") for c in args.camera]
        bad = [c for c, (ours, eq, theirs) in zip(args.camera, pairs) if not (ours and eq and theirs)]
        if bad:
            fail(f"--camera {bad[0]!r}: give OURS=THEIRS, e.g. --camera front=observation.images.top")
        keys.cameras = {ours: theirs for ours, _, theirs in pairs}
    return or_fail(DatasetKeys, keys.state_keys, keys.cameras, keys.features)


def _print_keys(mapping: dict, arrow: str, left_out: list) -> None:
    width = max(len(k) for k in mapping)
    for k, v in mapping.items():
        print(f"  {k:<{width}}  {arrow} {' + '.join(v)}")
    if left_out:
        print(f"  left out: {', '.join(left_out)}")


def _export_lerobot(args) -> None:
    from robot_rl.common.cli import progress_bar
    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.data.lerobot_dataset import VideoOptions, export_lerobot

    keys = _keys(args)
    video = or_fail(VideoOptions, **{k: v for k, v in (("vcodec", args.vcodec), ("crf", args.crf),
                                                      ("pix_fmt", args.pix_fmt)) if v is not None})
    if args.fps is None:
        from robot_rl.sim.config import EnvConfig

        args.fps = EnvConfig.control_hz  # the store does not record its control rate: the env's default
    if not float(args.fps).is_integer() or args.fps < 1:
        fail(f"--fps {args.fps}: LeRobot datasets have a whole number of frames per second >= 1")
    store = EpisodeStore.open(args.store, skip_damaged=args.skip_damaged)
    with progress_bar() as bar:
        task = bar.add_task("export", total=len(store.good_episodes))
        s = export_lerobot(store, args.out, keys, int(args.fps), video, progress=lambda n: bar.advance(task, n))
    print(f"exported {s['episodes']} episodes ({s['frames']} frames, {s['fps']} fps) of {store.path} to {s['path']} "
          f"(LeRobot {s['version']})")
    _print_keys(s["features"], "<-", s["left_out"])
    print(f"  videos: {video.vcodec} crf {video.crf} {video.pix_fmt}")


def _import_lerobot(args) -> None:
    from robot_rl.common.cli import progress_bar
    from robot_rl.data.lerobot_dataset import LeRobotDir, import_lerobot

    keys = _keys(args)
    ds = LeRobotDir(args.src)
    with progress_bar() as bar:
        task = bar.add_task("import", total=len(ds.episodes))
        s = import_lerobot(ds, args.out, keys, task=args.task, source=args.source, success=args.success == "true",
                           progress=lambda n: bar.advance(task, n))
    print(f"imported {s['episodes']} episodes ({s['steps']} steps, {s['fps']:g} fps) of {ds.root} into {s['path']}")
    _print_keys({", ".join(v): [k] for k, v in s["keys"].items()}, "<-", s["left_out"])


def main(argv: list[str] | None = None) -> None:
    import argparse

    paragraphs = __doc__.strip().split("\n\n")  # what it does and the subcommands; then the details
    parser = ArgumentParser(prog="robot-rl-data", description="\n\n".join(paragraphs[:2]),
                            epilog="\n\n".join(paragraphs[2:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="episodes, steps, keys with shapes and dtypes, success rate, sources")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--skip-damaged", action="store_true", help="summarize the intact episodes of a damaged store")
    p.set_defaults(func=_info)
    p = sub.add_parser("merge", help="append every episode of the input stores to OUT (created if missing)")
    p.add_argument("out")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--skip-damaged", action="store_true", help="copy only the intact episodes of damaged inputs")
    p.set_defaults(func=_merge)
    p = sub.add_parser("verify", help="check every chunk of every episode; exit 1 listing damaged episodes")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_verify)
    for name, func, src, what in (("export-lerobot", _export_lerobot, "store", "the episodes of an episode store as a "
                                   "new LeRobot dataset directory (v3.0: parquet + mp4)"),
                                  ("import-lerobot", _import_lerobot, "src", "the episodes of a local LeRobot v3.0 "
                                   "dataset directory as a new episode store")):
        p = sub.add_parser(name, help=what, description=what)
        p.add_argument(src, metavar="STORE" if src == "store" else "DIR")
        p.add_argument("out", metavar="OUT")
        p.add_argument("--keys", metavar="FILE.json", help="the key mapping: {state_keys, cameras, features} "
                       "(robot_rl/data/lerobot_keys.py); --state-keys / --camera override it")
        p.add_argument("--state-keys", metavar="K1,K2", help="our vector observation keys in observation.state, in "
                       "order (default: every one, sorted; import: the split the names record, else obs/state)")
        p.add_argument("--camera", action="append", metavar="OURS=THEIRS", help="our camera <-> their image key, "
                       "e.g. front=observation.images.top (repeat per camera; default: every camera, same name)")
        p.set_defaults(func=func)
        if name == "export-lerobot":
            p.add_argument("--fps", type=float, help="frames per second: the store's control rate (default: the "
                           "env's default control_hz, 20)")
            p.add_argument("--vcodec", help="libsvtav1 (default, LeRobot's) | h264 | hevc")
            p.add_argument("--crf", type=int, help="video quality, 0 = best (default 30, LeRobot's)")
            p.add_argument("--pix-fmt", help="yuv420p (default, LeRobot's) | yuv444p (h264 only; with --crf 0 "
                           "near-lossless)")
            p.add_argument("--skip-damaged", action="store_true", help="export only the intact episodes")
        else:
            p.add_argument("--task", help="task of episodes the dataset does not name one for (default: DIR's name)")
            p.add_argument("--source", default="teleop", help="source of those episodes: expert | teleop | policy | "
                           "intervention (default teleop)")
            p.add_argument("--success", choices=("true", "false"), default="true",
                           help="success of episodes the dataset does not mark (no next.success; default true)")
    args = parser.parse_args(argv)

    from robot_rl.data.errors import StoreError

    try:
        args.func(args)
    except StoreError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
