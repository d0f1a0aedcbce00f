"""robot-rl-import-rosbag: a rosbag2 of joint states and commands (a deployment, `ros2 bag record`) -> episodes.

    robot-rl-import-rosbag BAG OUT [task=lift deploy.topics.joint_states=/x ...] [--target X Y Z] [--source S]

Overrides compose configs/deploy.yaml (topics, joints, task); real/rosbag_import.py does the conversion.
A missing bag, a bag without commands or a bad override: exit code 2 and one line naming the problem.
"""

from __future__ import annotations

import argparse

from robot_rl.common.cli import ArgumentParser, fail


def run(args) -> None:
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException

    from robot_rl.real.cli import model_env, single_env_and_deploy_config
    from robot_rl.real.config import DeployConfigError
    from robot_rl.real.rosbag_import import BagImportError, bag_to_episodes, read_bag
    from robot_rl.data.episode_store import EpisodeStore

    try:
        with initialize_config_module(config_module="robot_rl.configs", version_base=None):
            cfg = compose(config_name="deploy", overrides=list(args.overrides))
    except HydraException as e:
        fail(f"bad override in {args.overrides}: {e}")
    env_cfg, dcfg = single_env_and_deploy_config(cfg, "episodes are replayed through the MuJoCo C model")
    if args.target is not None and len(args.target) == 0:
        fail("--target needs the task's goal vector, e.g. --target 0.45 0.0 0.12")
    env = model_env(env_cfg, dcfg)
    try:
        msgs = read_bag(args.bag, dcfg)
        episodes = bag_to_episodes(msgs, env, dcfg, target=args.target, source=args.source, task_target=dcfg.task_target)
    except (BagImportError, DeployConfigError) as e:
        fail(str(e))
    finally:
        env.close()
    if not episodes:
        fail(f"no episode in {args.bag}: no joint state, command (and object pose) overlap a whole control step")
    with EpisodeStore.open(args.out, mode="a") as store:
        store.append(episodes)
        total = store.n_episodes
    steps = sum(ep.length for ep in episodes)
    print(f"imported {len(episodes)} episodes ({steps} steps at {env_cfg.control_hz:g} Hz) from {args.bag} into "
          f"{args.out} (now {total} episodes)")


def parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="robot-rl-import-rosbag",
                                description="Turn a rosbag2 (joint states + commands) into episodes in OUT.")
    p.add_argument("bag", help="rosbag2 directory (MCAP or SQLite3)")
    p.add_argument("out", help="episode store to append to (created if missing)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of configs/deploy.yaml: task=..., deploy.topics.*=...")
    p.add_argument("--target", type=float, nargs="*", default=None,
                   help="task goal vector for episodes whose start event carries none (lift: cube x, y, goal height)")
    p.add_argument("--source", choices=("expert", "teleop", "policy", "intervention"), default=None,
                   help="episode source (default: teleop / intervention / policy from the teleop messages)")
    return p


def main(argv: list[str] | None = None) -> None:
    from robot_rl.data.errors import StoreError

    args = parser().parse_args(argv)
    try:
        run(args)
    except StoreError as e:
        fail(str(e))


if __name__ == "__main__":
    main()
