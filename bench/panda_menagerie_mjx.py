"""Menagerie Panda on MJX: compile time, MJX vs MuJoCo C agreement, and whether the expert succeeds on MJX.

    python bench/panda_menagerie_mjx.py [--task lift] [--robot panda_menagerie] [--num-envs 4] [--steps 15]

The MJX half of tests/test_panda_menagerie.py: its env step compiled in 64 s (cold, N=4) on this project's busy
2-core CPU, too slow for the test suite. Same seed, randomization (tests/conftest.py's DR) and actions on both
backends: the largest |obs difference| per step over the reach (the steps before the fingers close, where float32
and float64 contact solvers part ways, as tests/test_backends.py explains), then the noiseless expert's successes on
MJX over one episode length (its time includes that env's step compile). JAX_PLATFORMS=cpu unless set. Last line:
JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

DR = dict(  # tests/conftest.py's: every randomization mechanism on
    friction=[0.7, 1.3], object_mass=[0.5, 1.5], object_size=[0.9, 1.1], joint_damping=[0.8, 1.2],
    armature=[0.8, 1.2], actuator_gain=[0.9, 1.1], obs_noise_std=0.002, action_latency=[0, 2],
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="lift")
    ap.add_argument("--robot", default="panda_menagerie")
    ap.add_argument("--num-envs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=15, help="steps compared between the backends")
    ap.add_argument("--episode-steps", type=int, default=80, help="steps the expert runs on MJX")
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from robot_rl import sim
    from robot_rl.sim.experts import make_expert

    n = args.num_envs
    t = time.perf_counter()
    mjx_env = sim.make(args.task, backend="mjx", num_envs=n, robot=args.robot, randomization=DR)
    build_s = time.perf_counter() - t
    cpu_env = sim.make(args.task, backend="mujoco", num_envs=n, robot=args.robot, randomization=DR)

    obs_c = cpu_env.reset(5)
    t = time.perf_counter()
    obs_m = mjx_env.reset(5)
    reset_s = time.perf_counter() - t
    expert = make_expert(cpu_env, noise=0.3, seed=7)
    diffs, step_s = [], None
    for k in range(args.steps + 1):
        diffs.append(max(float(np.abs(obs_c[key] - obs_m[key]).max()) for key in obs_c))
        if k == args.steps:
            break
        a = expert.act(obs_c)
        obs_c, *_ = cpu_env.step(a)
        t = time.perf_counter()
        obs_m, *_ = mjx_env.step(a)
        if step_s is None:
            step_s = time.perf_counter() - t  # the first call compiles
        print(f"step {k + 1:3d}: max |obs mujoco - mjx| {diffs[-1]:.2e}", flush=True)

    # no randomization: the expert as robot-rl-eval evaluates it
    clean = sim.make(args.task, backend="mjx", num_envs=n, robot=args.robot)
    obs, ex = clean.reset(0), make_expert(clean)
    first_done, success = np.zeros(n, bool), np.zeros(n, bool)
    t = time.perf_counter()
    for _ in range(args.episode_steps):
        obs, _, done, info = clean.step(ex.act(obs))
        success |= done & ~first_done & info["success"]
        first_done |= done
    run_s = time.perf_counter() - t
    print(json.dumps({
        "task": args.task, "robot": args.robot, "num_envs": n, "build_s": round(build_s, 1),
        "reset_compile_s": round(reset_s, 1), "step_compile_s": round(step_s, 1),
        "max_obs_diff_per_step": [float(f"{d:.2e}") for d in diffs], "max_obs_diff": float(f"{max(diffs):.2e}"),
        "expert_successes_on_mjx": int(success.sum()), "expert_episodes_on_mjx": int(first_done.sum()),
        "expert_run_s_with_compile": round(run_s, 1), "cores": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
