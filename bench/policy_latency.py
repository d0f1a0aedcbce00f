"""Diffusion policy inference latency: one action chunk at batch 1 (p50 / p99 ms) and throughput at batch 64.

    python bench/policy_latency.py [--quick] [--policy CKPT] [--threads 1]

The state-based policy of the default task (lift: proprio 20 + object 11, 2 observations, 16 predicted
actions, DDIM 10 steps) with the default config, or a trained checkpoint. Baseline in the same run: the
same weights through the straightforward path, diffusers' `DDIMScheduler.step` and torch's conv1d, which
is what our inlined DDIM update and matmul convolutions replace. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np


def _policy(path: str | None):
    from policies import load_policy
    from policies.diffusion.policy import DiffusionConfig, DiffusionPolicy
    from robot_rl.data.stats import KeyStats

    if path:
        return load_policy(path)
    dims = {"proprio": 20, "object": 11}
    stats = {f"obs/{k}": KeyStats(-np.ones(d), np.ones(d), np.zeros(d), np.ones(d), 1) for k, d in dims.items()}
    stats["action"] = KeyStats(-np.ones(4), np.ones(4), np.zeros(4), np.ones(4), 1)
    return DiffusionPolicy.from_stats(dict(task="lift", obs_dims=dims, action_dim=4), DiffusionConfig(), stats)


def naive_chunk(policy, obs):
    """Reference path: torch conv1d (grad mode selects it) and diffusers' scheduler step, no precomputed FiLM."""
    import torch

    with torch.enable_grad():
        obs_t = {k: torch.as_tensor(v) for k, v in obs.items()}
        cond = policy._cond(obs_t).detach()
        x = torch.randn((cond.shape[0], policy.cfg.pred_horizon, policy.spec.action_dim))
        for t in policy.sampler.timesteps:
            eps = policy.ema.model(x, t, cond).detach()
            x = policy.sampler.step(eps, t, x).prev_sample
    return policy.normalizer.unnormalize("action", x)[:, : policy.cfg.action_horizon]


def _times(fn, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Wall-clock and CPU (this thread) milliseconds per call. With 1 torch thread all work runs in the
    calling thread, so CPU time is what the call costs when the machine is not shared."""
    for _ in range(5):
        fn()
    wall, cpu = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - t)
    return np.array(wall) * 1e3, np.array(cpu) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--policy", default=None, help="a trained checkpoint directory (default: fresh default config)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    policy = _policy(args.policy)
    rng = np.random.default_rng(0)
    obs1 = {k: rng.normal(size=(1, policy.cfg.obs_horizon, d)).astype(np.float32) for k, d in policy.spec.obs_dims.items()}
    obs64 = {k: rng.normal(size=(64, policy.cfg.obs_horizon, d)).astype(np.float32) for k, d in policy.spec.obs_dims.items()}
    n = 50 if args.quick else 300
    ours, ours_cpu = _times(lambda: policy.act(obs1), n)
    naive, naive_cpu = _times(lambda: naive_chunk(policy, obs1), max(20, n // 3))
    b64, _ = _times(lambda: policy.act(obs64), max(10, n // 10))
    load = os.getloadavg()[0]
    params = sum(p.numel() for p in policy.ema.model.parameters())
    print(f"batch 1:  p50 {np.median(ours):.2f} ms  p99 {np.percentile(ours, 99):.2f} ms  (CPU p50 "
          f"{np.median(ours_cpu):.2f} ms)   reference path p50 {np.median(naive):.2f} ms (CPU {np.median(naive_cpu):.2f})"
          f"   load average {load:.1f} on {os.cpu_count()} cores")
    print(f"batch 64: {1e3 / np.median(b64):.1f} chunks/s ({64e3 / np.median(b64):.0f} chunks of {policy.cfg.action_horizon} actions per s)")
    summary = {
        "p50_ms": round(float(np.median(ours)), 2),
        "p99_ms": round(float(np.percentile(ours, 99)), 2),
        "p50_cpu_ms": round(float(np.median(ours_cpu)), 2),
        "naive_p50_ms": round(float(np.median(naive)), 2),
        "naive_p50_cpu_ms": round(float(np.median(naive_cpu)), 2),
        "speedup_vs_naive": round(float(np.median(naive) / np.median(ours)), 2),
        "batch64_ms": round(float(np.median(b64)), 2),
        "batch64_chunks_per_s": round(64e3 / float(np.median(b64)), 1),
        "inference_steps": policy.cfg.inference_steps,
        "dims": list(policy.cfg.dims),
        "params": params,
        "threads": args.threads,
        "cores": os.cpu_count(),
        "load_average": round(load, 2),
        "machine": platform.machine(),
        "quick": args.quick,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
