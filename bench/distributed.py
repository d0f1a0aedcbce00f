"""Env steps/s and learner updates/s of residual RL with 1 vs 2 actor processes on Ray, one run.

    python bench/distributed.py [--quick] [--seconds 30] [--rounds 2] [--envs 16] [--utd 0.02] [--base diffusion|none]

Setup: lift on MuJoCo C (1 thread per env), `--envs` envs per actor; the base is a diffusion policy at its
default configuration (untrained weights: the same compute as a trained one), loaded inside every actor; the
learner at its default configuration (LearnerConfig(), ResidualConfig(): 5 critics, batch 256) doing `--utd`
updates per transition, as in training (updates owed are paid before the next batch is taken: the learner and the
actors stay in that ratio, the actors running at most `max_in_flight` batches ahead).
Phases, in one process and one local Ray instance, each `--seconds` of training time (actor start-up excluded):
  single  robot_rl/rl/train.py ResidualWorkspace: one process steps the envs and learns (the baseline)
  1 actor / 2 actors  robot_rl/rl/distributed/workspace.py DistributedWorkspace: actor processes collect, this one learns
  collect-only  the same EnvActors without a learner: each runs `batch_steps`-step batches back to back (what
                the actors alone can do on this machine, without the learner taking CPU from them)
run as: single, then `--rounds` x (1 actor, 2 actors, collect-only 1 and 2), alternating so that changes in the
machine's load hit both;
figures are medians over rounds. Env steps/s = transitions / training time, updates/s = learner updates /
training time, learner busy = share of training time spent in updates (near 1: the learner is the bottleneck and
more actors cannot help; lower utd or a faster learner host can). The small default utd keeps the learner off the
critical path on 2 CPU cores so that the figure measures the actors. The load average is reported with every
phase. Last line: JSON with actor_scaling = env steps/s with 2 actors / with 1 actor (training), and
collect_only_scaling, the same ratio for the actors alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np


def make_base(path: Path, kind: str) -> str | None:
    """A default-size diffusion BasePolicy checkpoint for lift (untrained), or None for no base."""
    if kind == "none":
        return None
    from robot_rl import sim
    import torch
    from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy
    from robot_rl.data.stats import KeyStats

    env = sim.make("lift", num_envs=1)
    try:
        dims = {**{f"obs/{k}": d for k, d in env.obs_dims.items()}, "action": env.action_dim}
        spec = dict(task="lift", obs_dims=dict(env.obs_dims), action_dim=env.action_dim)
    finally:
        env.close()
    stats = {k: KeyStats(min=-np.ones(d), max=np.ones(d), mean=np.zeros(d), std=np.ones(d), count=10)
             for k, d in dims.items()}
    torch.manual_seed(0)
    return str(DiffusionPolicy.from_stats(spec, DiffusionConfig(), stats).save(path))


def phase(actors: int, env, base_path, args, root: Path) -> dict:
    """Train for args.seconds with `actors` actor processes (0: single process); rates over training time."""
    from robot_rl.policies import load_policy
    from robot_rl.rl.distributed import DistributedConfig, DistributedWorkspace
    from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace
    from robot_rl.common.run_log import RunLog

    batch_steps = 16
    cfg = ResidualRLConfig(env_steps=10**9, time_budget_s=args.seconds, learning_starts=env.num_envs * batch_steps,
                           utd=args.utd, eval_every=0, final_eval=False, log_every=env.num_envs * batch_steps * 4,
                           ckpt_every=10**9, save_replay=False, replay_capacity=200_000, seed=actors)
    base = load_policy(base_path) if base_path else None
    run = root / f"actors{actors}"
    if actors:
        ws = DistributedWorkspace(run, cfg, env, base, DistributedConfig(actors=actors, batch_steps=batch_steps),
                                  base_path=base_path)
    else:
        ws = ResidualWorkspace(run, cfg, env, base)
    log = RunLog(run)
    load0 = os.getloadavg()[0]
    result = ws.run(log)
    log.close()
    t = result["train_time_s"]
    busy_rates = [v for _, v in log.history.get("perf/updates_per_s", [])]
    capacity = float(np.median(busy_rates)) if busy_rates else float("nan")
    out = {"env_steps_per_s": result["env_steps_this_session"] / t, "updates_per_s": result["updates"] / t,
           "learner_busy": (result["updates"] / capacity) / t if busy_rates else 0.0,
           "env_steps": result["env_steps_this_session"], "updates": result["updates"], "train_s": t,
           "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}
    if actors:
        dist = result["distributed"]
        out.update(actor_steps_per_s=dist["actor_steps_per_s"], actor_busy=dist["actor_busy"],
                   restarts=dist["restarts"])
    return out


def collect_only(actors: int, env, base_path, seconds: float) -> dict:
    """Transitions/s of `actors` EnvActors collecting back to back (no learner), over ~`seconds`."""
    import dataclasses

    import ray

    from robot_rl.rl.distributed import EnvActor
    from robot_rl.policies.residual import ResidualConfig

    cls = ray.remote(EnvActor).options(num_cpus=1)
    reward = {"reward": "success", "reward_model": None, "shaping": 0.0, "gamma": 0.99}
    hs = [cls.remote(i, dataclasses.asdict(env.cfg), base_path, "cpu", dataclasses.asdict(ResidualConfig()), reward,
                     0.5, 16, 100 + i, 0, 0) for i in range(actors)]
    try:
        ray.get([h.collect.remote("warm-up") for h in hs])
        load0, t, steps = os.getloadavg()[0], time.perf_counter(), 0
        while time.perf_counter() - t < seconds:
            steps += sum(len(b["rows"]["obs"]) * env.num_envs for b in ray.get([h.collect.remote("b") for h in hs]))
        dt = time.perf_counter() - t
    finally:
        for h in hs:
            ray.kill(h)
    return {"env_steps_per_s": steps / dt, "env_steps": steps, "s": dt,
            "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one round of 15 s phases, 8 envs per actor")
    ap.add_argument("--seconds", type=float, default=30.0, help="training time per phase")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the 1- and 2-actor phases")
    ap.add_argument("--envs", type=int, default=16, help="envs per actor (and in the single-process baseline)")
    ap.add_argument("--utd", type=float, default=0.02, help="learner updates per transition")
    ap.add_argument("--base", choices=("diffusion", "none"), default="diffusion")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.envs, args.rounds = 15.0, 8, 1
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import ray
    import torch

    from robot_rl import sim

    torch.set_num_threads(1)
    from robot_rl.rl.distributed import DistributedConfig, connect

    connect(DistributedConfig(actors=2))  # the local Ray instance robot-rl-train-residual starts, kept for all phases
    env = sim.make("lift", num_envs=args.envs, threads=1)
    runs: dict[str, list[dict]] = {"single": [], "1_actor": [], "2_actors": [], "collect_only_1": [],
                                   "collect_only_2": []}
    one_round = [("1_actor", 1), ("2_actors", 2), ("collect_only_1", 1), ("collect_only_2", 2)]
    order = [("single", 0)] + one_round * args.rounds
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base_path = make_base(Path(tmp) / "base", args.base)
            for i, (name, actors) in enumerate(order):
                t = time.perf_counter()
                if name.startswith("collect_only"):
                    f = collect_only(actors, env, base_path, args.seconds / 2)
                    runs[name].append(f)
                    print(f"{name:9s} {f['env_steps_per_s']:8.1f} env steps/s (actors alone; load {f['load_avg_1m']})",
                          flush=True)
                    continue
                f = phase(actors, env, base_path, args, Path(tmp) / str(i))
                runs[name].append(f)
                print(f"{name:9s} {f['env_steps_per_s']:8.1f} env steps/s  {f['updates_per_s']:7.1f} updates/s  "
                      f"learner busy {f['learner_busy']:.2f}  ({f['env_steps']} steps in {f['train_s']:.1f} s, "
                      f"{time.perf_counter() - t:.0f} s with start-up; load {f['load_avg_1m']})"
                      + (f"  per actor {f['actor_steps_per_s']:.0f} steps/s while collecting, "
                         f"busy {f['actor_busy']:.2f}"
                         if actors else ""), flush=True)
    finally:
        env.close()
        ray.shutdown()
    figures = {k: {m: float(np.median([f[m] for f in v])) for m in ("env_steps_per_s", "updates_per_s",
                                                                      "learner_busy")} for k, v in runs.items()
               if not k.startswith("collect_only")}
    alone = {k: float(np.median([f["env_steps_per_s"] for f in runs[k]])) for k in ("collect_only_1", "collect_only_2")}
    one, two = figures["1_actor"]["env_steps_per_s"], figures["2_actors"]["env_steps_per_s"]
    r = lambda x: round(x, 3) if isinstance(x, float) else x  # noqa: E731
    print(json.dumps({
        "actor_scaling": round(two / one, 3),
        "collect_only_scaling": round(alone["collect_only_2"] / alone["collect_only_1"], 3),
        "collect_only_env_steps_per_s": {k: round(v, 1) for k, v in alone.items()},
        "env_steps_per_s": {k: round(v["env_steps_per_s"], 1) for k, v in figures.items()},
        "updates_per_s": {k: round(v["updates_per_s"], 1) for k, v in figures.items()},
        "learner_busy": {k: round(v["learner_busy"], 3) for k, v in figures.items()},
        "vs_single_process": {k: round(figures[k]["env_steps_per_s"] / figures["single"]["env_steps_per_s"], 3)
                              for k in ("1_actor", "2_actors")},
        "phases": {k: [{kk: r(vv) for kk, vv in f.items()} for f in v] for k, v in runs.items()},
        "seconds_per_phase": args.seconds, "rounds": args.rounds, "envs_per_actor": args.envs, "utd": args.utd,
        "base": args.base,
        "batch_steps": 16, "ray": ray.__version__, "torch": torch.__version__, "machine": platform.machine(),
        "cpus": os.cpu_count(), "load_avg": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
