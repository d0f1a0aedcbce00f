"""Gradient updates/s of the residual TD3 learner (critic ensemble) against stable-baselines3 SAC, one run.

    python bench/learner_throughput.py [--quick] [--threads 1] [--num-critics N] [--critic-hidden 256 256]
                                       [--compile]

Ours: robot_rl.rl.learner.Learner at its default configuration (LearnerConfig(), ResidualConfig(); batch
256), in steady state (critic_warmup=0, so the actor updates every `policy_delay` critic updates as it
does for the rest of a run), batches drawn from our replay with n-step returns.
Baseline: SB3 SAC with its usual 2 critics of 256x256 and a 256x256 actor, batch 256, `model.train()`
(which samples its own replay buffer), on the same observation and action sizes: the lift task's
observation (proprio 20 + object 11) plus the base action, which our networks also read, and 4-D actions.
Both are timed in alternating blocks in one process (the machine's load hits both alike); figures are
medians over blocks. `--compile` turns on LearnerConfig.compile (torch.compile of the critics; compile
time reported). Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np


def lift_dims() -> tuple[int, int]:
    from robot_rl import sim

    env = sim.make("lift", num_envs=1)
    try:
        return sum(env.obs_dims.values()), env.action_dim
    finally:
        env.close()


def fill_replay(obs_dim: int, action_dim: int, rng):
    from robot_rl.rl.replay import Replay

    n = 16
    replay = Replay(32_000, n, obs_dim, action_dim)
    for _ in range(2000):
        replay.add(obs=rng.normal(size=(n, obs_dim)), base_action=rng.uniform(-1, 1, (n, action_dim)),
                   action=rng.uniform(-1, 1, (n, action_dim)), reward=rng.random(n),
                   next_obs=rng.normal(size=(n, obs_dim)), next_base_action=rng.uniform(-1, 1, (n, action_dim)),
                   terminated=rng.random(n) < 0.01, truncated=rng.random(n) < 0.01)
    return replay


def ours(obs_dim: int, action_dim: int, args, rng):
    """(one block of `k` updates -> seconds, description)."""
    import dataclasses

    from robot_rl.rl.learner import Learner, LearnerConfig
    from robot_rl.policies.residual import ResidualActor, ResidualConfig

    over = {"critic_warmup": 0, "compile": bool(args.compile)}
    if args.num_critics:
        over["num_critics"] = args.num_critics
    if args.critic_hidden:
        over["critic_hidden"] = tuple(args.critic_hidden)
    cfg = dataclasses.replace(LearnerConfig(), **over)
    learner = Learner(ResidualActor(obs_dim, action_dim, ResidualConfig()), cfg)
    learner.set_obs_stats(np.zeros(obs_dim), np.ones(obs_dim))
    replay = fill_replay(obs_dim, action_dim, rng)
    compile_s = 0.0
    if args.compile:
        t = time.perf_counter()
        for _ in range(4):
            learner.update(replay.sample(cfg.batch_size, cfg.n_step, cfg.gamma, rng))
        compile_s = time.perf_counter() - t

    def block(k: int) -> float:
        t = time.perf_counter()
        for _ in range(k):
            learner.update(replay.sample(cfg.batch_size, cfg.n_step, cfg.gamma, rng))
        return time.perf_counter() - t

    return block, {"num_critics": cfg.num_critics, "critic_hidden": list(cfg.critic_hidden),
                   "batch_size": cfg.batch_size, "policy_delay": cfg.policy_delay, "n_step": cfg.n_step,
                   "compile": bool(args.compile), "compile_s": compile_s}


def sb3_sac(obs_dim: int, action_dim: int, rng):
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    class Shapes(gym.Env):  # only the spaces are used: SAC.train() reads its replay buffer
        observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim + action_dim,), np.float32)
        action_space = gym.spaces.Box(-1.0, 1.0, (action_dim,), np.float32)

        def reset(self, seed=None, options=None):
            return np.zeros(self.observation_space.shape, np.float32), {}

        def step(self, action):
            return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}

    model = SAC("MlpPolicy", Shapes(), batch_size=256, learning_starts=0, device="cpu",
                policy_kwargs=dict(net_arch=[256, 256]), seed=0)
    model.set_logger(configure(None, []))
    d = obs_dim + action_dim
    for _ in range(2000):
        model.replay_buffer.add(rng.normal(size=(1, d)).astype(np.float32), rng.normal(size=(1, d)).astype(np.float32),
                                rng.uniform(-1, 1, (1, action_dim)).astype(np.float32), rng.random(1),
                                np.array([False]), [{}])

    def block(k: int) -> float:
        t = time.perf_counter()
        model.train(gradient_steps=k, batch_size=256)
        return time.perf_counter() - t

    return block


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter blocks")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both learners)")
    ap.add_argument("--num-critics", type=int, default=0, help="override the default ensemble size")
    ap.add_argument("--critic-hidden", type=int, nargs="+", default=None, help="override the default critic widths")
    ap.add_argument("--compile", action="store_true", help="torch.compile our critics")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    obs_dim, action_dim = lift_dims()
    ours_block, info = ours(obs_dim, action_dim, args, rng)
    sb3_block = sb3_sac(obs_dim, action_dim, rng)
    k, rounds = (20, 3) if args.quick else (50, 6)
    ours_block(5), sb3_block(5)  # warm-up (allocations, first-call overhead)
    ours_rates, sb3_rates = [], []
    for _ in range(rounds):
        ours_rates.append(k / ours_block(k))
        sb3_rates.append(k / sb3_block(k))
    u, s = float(np.median(ours_rates)), float(np.median(sb3_rates))
    print(f"ours ({info['num_critics']} critics {info['critic_hidden']}, batch {info['batch_size']}): "
          f"{u:.1f} updates/s ({1e3 / u:.1f} ms)   blocks {np.round(ours_rates, 1).tolist()}")
    print(f"SB3 SAC (2 critics [256, 256], batch 256):     {s:.1f} updates/s ({1e3 / s:.1f} ms)   "
          f"blocks {np.round(sb3_rates, 1).tolist()}")
    print(json.dumps({
        "updates_per_s": round(u, 2), "sb3_sac_updates_per_s": round(s, 2), "ratio_vs_sb3": round(u / s, 3),
        "ms_per_update": round(1e3 / u, 2), "sb3_ms_per_update": round(1e3 / s, 2), **info,
        "obs_dim": obs_dim + action_dim, "action_dim": action_dim, "threads": args.threads,
        "updates_per_block": k, "blocks": rounds, "torch": torch.__version__, "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
