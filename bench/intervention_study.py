"""Residual RL with and without scripted-human interventions: env steps until 90% evaluation success.

    python bench/intervention_study.py --base runs/results/lift-bc/policy --demos runs/results/lift-demos.zarr \
        --seeds 0 1 2 [--conditions none scripted] [--env-steps 30000] [--out runs/results/hil-study]

Each (condition, seed) is one residual RL run with the commands' config (configs/rl/residual.yaml) but
evaluations every --eval-every env steps on --eval-episodes episodes; the figure per run is the first
evaluation at or above --target (env steps, and the human's share of all steps so far). Runs go to
<out>/<condition>-seed<k>/ (resumable run directories). Last line: JSON with the per-seed steps, their means
and `speedup` = mean steps without / mean steps with interventions (runs that never reached the target count
as the budget).
"""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import argparse
import json
import os
import time
from pathlib import Path


def run_one(condition: str, seed: int, args) -> dict:
    from robot_rl import sim
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from robot_rl.policies import load_policy
    from robot_rl.data import EpisodeStore
    from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace, write_results
    from robot_rl.common.run_log import RunLog

    with initialize_config_module(config_module="robot_rl.configs", version_base=None):
        node = compose(config_name="train_residual").rl
    rl = OmegaConf.to_container(node, resolve=True)
    rl.update(env_steps=args.env_steps, time_budget_s=0, eval_every=args.eval_every, eval_episodes=args.eval_episodes,
              final_eval=False, seed=seed, interventions=condition, videos=0, ckpt_every=args.env_steps)
    cfg = from_mapping(ResidualRLConfig, rl)
    run_dir = Path(args.out) / f"{condition}-seed{seed}"
    env = sim.make(args.task, num_envs=args.num_envs, threads=1)
    eval_env = sim.make(args.task, num_envs=args.num_envs, threads=1)
    store = EpisodeStore.open(args.demos)
    try:
        ws = ResidualWorkspace(run_dir, cfg, env, load_policy(args.base), demo_store=store, eval_env=eval_env)
        resumed = ws.try_resume()
        log = RunLog(run_dir, resume_step=ws.env_steps if resumed else None)
        t0 = time.perf_counter()
        result = ws.run(log)
        write_results(run_dir, log, result, {"condition": condition, "seed": seed})
        hist = log.history
        log.close()
    finally:
        store.close()
        env.close()
        eval_env.close()
    evals = hist.get("eval/success_rate", [])
    hit = next((s for s, v in evals if v >= args.target), None)
    frac = dict(hist.get("hil/fraction_so_far", []))
    at = max((s for s in frac if hit is None or s <= hit), default=None)
    return {"condition": condition, "seed": seed, "steps_to_target": hit, "evals": evals,
            "human_fraction": frac.get(at, 0.0) if at is not None else 0.0, "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True)
    ap.add_argument("--demos", required=True)
    ap.add_argument("--task", default="lift")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--conditions", nargs="+", default=["none", "scripted"])
    ap.add_argument("--env-steps", type=int, default=30_000)
    ap.add_argument("--eval-every", type=int, default=5_000)
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--out", default="runs/results/hil-study")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    rows = []
    for condition in args.conditions:
        for seed in args.seeds:
            r = run_one(condition, seed, args)
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "evals"}), flush=True)
    summary = {"target": args.target, "env_steps_budget": args.env_steps, "eval_every": args.eval_every,
               "eval_episodes": args.eval_episodes, "load_average": os.getloadavg()[0]}
    means = {}
    for condition in args.conditions:
        steps = [r["steps_to_target"] for r in rows if r["condition"] == condition]
        summary[f"steps_{condition}"] = steps
        means[condition] = sum(s if s is not None else args.env_steps for s in steps) / len(steps)
        summary[f"mean_steps_{condition}"] = means[condition]
        summary[f"human_fraction_{condition}"] = [round(r["human_fraction"], 4) for r in rows
                                                  if r["condition"] == condition]
    if "none" in means and "scripted" in means:
        summary["speedup"] = round(means["none"] / means["scripted"], 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
