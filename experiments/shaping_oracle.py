"""Diagnostic: residual RL on lift shaped by the task's own progress instead of the learned Phi.

    python experiments/shaping_oracle.py base=runs/results/w6/bc800/policy \
        rl.reward_model=runs/results/w6/reward-qs-s0/reward_model rl.shaping=0.3 rl.env_steps=50000 rl.seed=1

Runs robot-rl-train-residual (task=lift, rl.reward=learned; any of its overrides) with one change: the reward
model's progress Phi is replaced by lift's ground-truth progress (sim/tasks/lift.py: 0.3 reach + 0.2 grasp +
0.5 lift, 1 at success), computed from the observation. Success still comes from the learned classifier, so a
run differs from the learned-Phi run only in Phi. It answers whether shaping is slow because the learned Phi
is inexact or because potential shaping does not speed up this learner on this task: an upper bound on what a
better progress model could give. Simulator ground truth enters the reward here, so this is never a training
setup for a robot; robot_rl itself does not offer it. The last line is JSON: the run directory, its final success
and its first evaluations at or above 50% and 80% (env steps).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def lift_progress(obs: dict) -> np.ndarray:
    """lift's progress [N] from observations {"object": [N, 11], "proprio": [N, 20]}: the task's own terms
    (sim/tasks/lift.py reach_term / progress_of, sim/task.py held) fed with what the observation says: cube - ee,
    gripper width, height to go (lift fraction; success where it is <= 0). Equals the env's info["progress"]
    (tested)."""
    from robot_rl.sim.task import held
    from robot_rl.sim.tasks.lift import default_config, progress_of, reach_term

    cfg = default_config()
    obj, proprio = np.asarray(obs["object"], np.float64), np.asarray(obs["proprio"], np.float64)
    dist, to_go = np.sqrt((obj[:, 7:10] ** 2).sum(-1)), obj[:, 10]  # |cube - ee|, height to go
    lift = np.clip((cfg.lift_height - to_go) / cfg.lift_height, 0.0, 1.0)
    grasp = held(dist, proprio[:, 14], cfg.cube_half).astype(np.float64)
    return progress_of(np, to_go <= 0, reach_term(np, dist), grasp, lift).astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="robot-rl-train-residual overrides (task=lift, rl.reward=learned "
                                                  "are set)")
    args = ap.parse_args(argv)
    import robot_rl.reward.shaping as shaping

    learned = shaping.from_config

    def task_progress_reward(*a, **k):
        reward = learned(*a, **k)  # the classifier, spec checks and lambda as configured
        reward.model.progress = lambda obs, instruction=None: lift_progress(obs)
        print("shaping with lift's ground-truth progress (diagnostic)", flush=True)
        return reward

    shaping.from_config = task_progress_reward  # train.py imports it when the workspace is built
    import robot_rl.cli.train_residual as cli
    from robot_rl.rl.compare import first_reaching, load_curve

    run_dirs, hydra_dir = [], cli.current_run_dir

    def recording_run_dir():
        run_dirs.append(hydra_dir())
        return run_dirs[-1]

    cli.current_run_dir = recording_run_dir
    sys.argv = [sys.argv[0], "task=lift", "rl.reward=learned", *args.overrides]
    cli.main()
    if run_dirs:  # one JSON line: the run's evaluations at a glance
        curve = load_curve(run_dirs[-1])
        print(json.dumps({"bench": "shaping_oracle", "run_dir": str(run_dirs[-1]), "final_success": curve["y"][-1],
                          "first_steps_at_0.5": first_reaching(curve, 0.5),
                          "first_steps_at_0.8": first_reaching(curve, 0.8)}))


if __name__ == "__main__":
    main()
