"""The scripted experts nominally and under randomization=sim2real, and as demonstrators (expert.noise=0.1).

    python bench/experts_sim2real.py [--episodes 100] [--seed 1000] [--num-envs 16] [--tasks lift push ...]

Per task, three conditions, each over the same `episodes` episodes (the first ones to start, batched over
`num-envs` MuJoCo C envs) of env seed `seed`:
  nominal   no randomization, noise-free expert: the baseline, measured in the same run
  sim2real  configs/randomization/sim2real.yaml (5 mm observation noise, 0-2 ticks of action latency, physics
            ranges); peg_insert keeps its size (object_size=[1,1]: its fit tolerance is fixed)
  demos     no randomization, expert.noise=0.1 (the demonstrations the quickstart and benchmark record)
Each is evaluated as `robot-rl-eval policy=expert` evaluates (robot_rl.evaluation.evaluate_policy), so
nominal and sim2real reproduce `robot-rl-eval policy=expert task=T episodes=100 [randomization=sim2real]`.
One JSON line per task and condition (success rate, 95% Wilson interval, mean length); last line: JSON summary.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml

TASKS = ("lift", "push", "peg_insert", "color_lift")


def sim2real(task: str) -> dict:
    """The preset's ranges as an env `randomization` mapping (peg_insert: object_size fixed)."""
    path = Path(__file__).resolve().parents[1] / "configs" / "randomization" / "sim2real.yaml"
    r = yaml.safe_load(path.read_text())
    r.pop("defaults", None)
    return dict(r, object_size=[1.0, 1.0]) if task == "peg_insert" else r


def measure(task: str, condition: str, episodes: int, seed: int, num_envs: int) -> dict:
    from robot_rl import sim
    from robot_rl.policies.expert import ExpertPolicy
    from robot_rl.evaluation import evaluate_policy

    randomization = sim2real(task) if condition == "sim2real" else {}
    noise = 0.1 if condition == "demos" else 0.0
    env = sim.make(task, backend="mujoco", num_envs=num_envs, randomization=randomization)
    try:
        t0 = time.perf_counter()
        m = evaluate_policy(env, ExpertPolicy(env, noise=noise, seed=0), episodes, seed=seed)
    finally:
        env.close()
    return {"task": task, "condition": condition, "episodes": m["episodes"], "successes": m["successes"],
            "success_rate": m["success_rate"], "success_ci95": [round(x, 3) for x in m["success_ci95"]],
            "mean_length": round(m["mean_length"], 1), "expert_noise": noise, "seed": seed,
            "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    args = ap.parse_args()
    summary = {}
    for task in args.tasks:
        for condition in ("nominal", "sim2real", "demos"):
            row = measure(task, condition, args.episodes, args.seed, args.num_envs)
            print(json.dumps(row), flush=True)
            summary.setdefault(task, {})[condition] = row["success_rate"]
    print(json.dumps({"bench": "experts_sim2real", "episodes": args.episodes, "seed": args.seed,
                      "num_envs": args.num_envs, "success_rate": summary}))


if __name__ == "__main__":
    main()
