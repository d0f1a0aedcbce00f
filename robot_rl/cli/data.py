"""robot-rl-data: inspect and combine episode stores.

    robot-rl-data info PATH [--json]          episodes, steps, keys (shape, dtype), success rate, sources
    robot-rl-data merge OUT IN1 [IN2 ...]     append every episode of IN1, IN2, ... to OUT (created if missing)
    robot-rl-data verify PATH [--json]        check every chunk; one line per damaged episode

Damaged episodes (a chunk missing, truncated or altered: robot_rl/data/integrity.py) make info and merge
exit 2 naming them; --skip-damaged leaves them out (`merge NEW OLD --skip-damaged` copies the intact ones).
verify exits 0 when the store is intact, 1 when it found damaged episodes, 2 when it cannot read the store.

A rosbag2 of a deployment becomes episodes with robot-rl-import-rosbag (real/cli/import_rosbag.py).

A path that is not a store, a corrupted store, a locked OUT or stores with different keys: exit code 2
and one line naming the path and the problem.

argparse, not Hydra like the other robot-rl-* commands: these are subcommands on paths (merge OUT IN1 IN2 ...)
that take seconds and write no run directory. Hydra has neither subcommands nor positional arguments, and its run
directory, config groups and -m sweeps would have nothing to act on here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from robot_rl.common.cli import ArgumentParser, fail


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
    existing = out.is_file() or (out.is_dir() and any(out.iterdir()))
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
    args = parser.parse_args(argv)

    from robot_rl.data.errors import StoreError

    try:
        args.func(args)
    except StoreError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
