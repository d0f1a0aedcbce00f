"""robot-rl-data: inspect and combine episode stores.

    robot-rl-data info PATH [--json]          episodes, steps, keys (shape, dtype), success rate, sources
    robot-rl-data merge OUT IN1 [IN2 ...]     append every episode of IN1, IN2, ... to OUT (created if missing)
    robot-rl-data import-rosbag BAG OUT [task=lift deploy.topics.joint_states=/x ...] [--target X Y Z]
                                              a rosbag2 with joint states and commands -> episodes in OUT
                                              (real/rosbag_import.py; overrides compose configs/deploy.yaml)

A path that is not a store, a corrupted store, a locked OUT or stores with different keys: exit code 2
and one line naming the path and the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROG = "robot-rl-data"


def _fail(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def _counts(d: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in d.items()) or "-"


def _info(args) -> None:
    from robot_rl.data.episode_store import EpisodeStore

    s = EpisodeStore.open(args.path).summary()
    if args.json:
        print(json.dumps(s, indent=2))
        return
    rate = "n/a" if s["success_rate"] is None else f"{s['success_rate']:.3f}"
    print(f"episode store {s['path']}")
    print(f"  episodes            {s['episodes']}")
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
            _fail(f"{p} is both an input and the output; merge into a new path")
    inputs = [EpisodeStore.open(p) for p in args.inputs]
    # Every input opens and all keys agree before OUT is created or touched.
    existing = out.is_file() or (out.is_dir() and any(out.iterdir()))
    check_mergeable(inputs, EpisodeStore.open(out) if existing else None)
    with EpisodeStore.open(out, mode="a") as store:
        total = sum(s.n_episodes for s in inputs)
        with Progress(TextColumn("merge"), BarColumn(), MofNCompleteColumn(), TextColumn("eta"), TimeRemainingColumn()) as bar:
            task = bar.add_task("merge", total=total)
            copied = merge_stores(store, inputs, progress=lambda n: bar.advance(task, n))
    print(f"merged {copied} episodes from {len(inputs)} store(s) into {out} (now {store.n_episodes} episodes, {store.n_steps} steps)")


def _import_rosbag(args) -> None:
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from real.config import DeployConfigError, check_against_model, deploy_config
    from real.node import model_joints
    from real.rosbag_import import BagImportError, bag_to_episodes, read_bag
    from robot_rl.cli.common import env_config, make_env
    from robot_rl.data.episode_store import EpisodeStore

    try:
        with initialize_config_module(config_module="configs", version_base=None):
            cfg = compose(config_name="deploy", overrides=list(args.overrides))
    except HydraException as e:
        _fail(f"bad override in {args.overrides}: {e}")
    env_cfg = env_config(cfg.env)
    env_cfg.num_envs, env_cfg.backend = 1, "mujoco"
    try:
        dcfg = deploy_config(OmegaConf.to_container(cfg.deploy, resolve=True))
    except DeployConfigError as e:
        _fail(str(e))
    if args.target is not None and len(args.target) == 0:
        _fail("--target needs the task's goal vector, e.g. --target 0.45 0.0 0.12")
    env = make_env(env_cfg)
    try:
        check_against_model(dcfg, model_joints(env))
        msgs = read_bag(args.bag, dcfg)
        episodes = bag_to_episodes(msgs, env, dcfg, target=args.target, source=args.source, task_target=dcfg.task_target)
    except (BagImportError, DeployConfigError) as e:
        _fail(str(e))
    finally:
        env.close()
    if not episodes:
        _fail(f"no episode in {args.bag}: no joint state, command (and object pose) overlap a whole control step")
    with EpisodeStore.open(args.out, mode="a") as store:
        store.append(episodes)
        total = store.n_episodes
    steps = sum(ep.length for ep in episodes)
    print(f"imported {len(episodes)} episodes ({steps} steps at {env_cfg.control_hz:g} Hz) from {args.bag} into "
          f"{args.out} (now {total} episodes)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=PROG, description="Inspect and combine episode stores.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("info", help="episodes, steps, keys with shapes and dtypes, success rate, sources")
    p.add_argument("path")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_info)
    p = sub.add_parser("merge", help="append every episode of the input stores to OUT (created if missing)")
    p.add_argument("out")
    p.add_argument("inputs", nargs="+")
    p.set_defaults(func=_merge)
    p = sub.add_parser("import-rosbag", help="turn a rosbag2 (joint states + commands) into episodes in OUT")
    p.add_argument("bag", help="rosbag2 directory (MCAP or SQLite3)")
    p.add_argument("out", help="episode store to append to (created if missing)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of configs/deploy.yaml: task=..., deploy.topics.*=...")
    p.add_argument("--target", type=float, nargs="*", default=None,
                   help="task goal vector for episodes whose start event carries none (lift: cube x, y, goal height)")
    p.add_argument("--source", choices=("expert", "teleop", "policy", "intervention"), default=None,
                   help="episode source (default: teleop / intervention / policy from the teleop messages)")
    p.set_defaults(func=_import_rosbag)
    args = parser.parse_args(argv)

    from robot_rl.data.errors import StoreError

    try:
        args.func(args)
    except StoreError as e:
        _fail(str(e))


if __name__ == "__main__":
    main()
