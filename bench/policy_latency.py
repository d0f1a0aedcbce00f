"""Base policy inference latency: one action chunk at batch 1 (p50 / p99 ms) and throughput at batch 64.

    python bench/policy_latency.py [--quick] [--policy CKPT] [--threads 1] [--no-vla]

The state-based policy of the default task (lift: proprio 20 + object 11, 2 observations, 16 predicted
actions, DDIM 10 steps) with the default config, or a trained checkpoint. Baseline in the same run: the
same weights through the straightforward path, diffusers' `DDIMScheduler.step` and torch's conv1d, which
is what our inlined DDIM update and matmul convolutions replace.
Then the VLA (policies/vla/, configs/bc/policy/vla.yaml, untrained weights: latency does not depend on them): one chunk at
batch 1 from 2 cameras at 96x96 (2 frames each), an instruction (embedding cached, as instructions repeat)
and lift's proprio + object; `vla_trunk_ms` is its one-off part (image encoder + trunk), the rest is the
flow_steps head evaluations. Needs the vla extra (else its figures are null). Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np


def _policy(path: str | None):
    from robot_rl.policies import load_policy
    from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy
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


def _vla(quick: bool, n: int) -> dict:
    """VLA chunk latency at batch 1 (configs/bc/policy/vla.yaml, 2 cameras 96x96, instruction, lift's vector observations)."""
    import torch

    from robot_rl.policies.vla.policy import VLAConfig, VLAPolicy, _encoder_args
    from robot_rl.data.stats import KeyStats

    dims = {"proprio": 20, "object": 11}
    stats = {f"obs/{k}": KeyStats(-np.ones(d), np.ones(d), np.zeros(d), np.ones(d), 1) for k, d in dims.items()}
    stats["action"] = KeyStats(-np.ones(4), np.ones(4), np.zeros(4), np.ones(4), 1)
    cfg = VLAConfig()  # what robot-rl-train-bc policy=vla trains (configs/bc/policy/vla.yaml adds nothing)
    shapes = {f"images/{c}": [96, 96, 3] for c in cfg.cameras}
    policy = VLAPolicy.from_stats(dict(task="lift", obs_dims=dims, action_dim=4, image_shapes=shapes), cfg, stats)
    rng = np.random.default_rng(0)
    obs = {k: rng.normal(size=(1, cfg.obs_horizon, d)).astype(np.float32) for k, d in dims.items()}
    obs.update({k: rng.integers(0, 256, (1, cfg.obs_horizon, *s), dtype=np.uint8) for k, s in shapes.items()})
    obs["instruction"] = np.array(["lift the red cube"], dtype=object)
    wall, cpu = _times(lambda: policy.act(obs), n)
    net = policy.ema.model

    def trunk():  # what act() runs once per chunk: inputs, image encoder + trunk (traced as in act)
        with torch.inference_mode():
            args = _encoder_args(policy.image_keys, *policy._inputs(obs))
            policy._inference_fns(args)[0](*(a for a in args if a is not None))

    trunk_ms, _ = _times(trunk, n)
    return {"vla_p50_ms": round(float(np.median(wall)), 2), "vla_p99_ms": round(float(np.percentile(wall, 99)), 2),
            "vla_p50_cpu_ms": round(float(np.median(cpu)), 2), "vla_trunk_ms": round(float(np.median(trunk_ms)), 2),
            "vla_flow_steps": cfg.flow_steps, "vla_params": sum(p.numel() for p in net.parameters())}


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
    ap.add_argument("--no-vla", action="store_true", help="skip the VLA measurement")
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
    vla = {"vla_p50_ms": None, "vla_p99_ms": None}
    if not args.no_vla:
        try:
            vla = _vla(args.quick, max(20, n // 3))
        except ImportError as e:  # the vla extra (sentence encoder) is not installed
            print(f"VLA skipped: {e}")
    load = os.getloadavg()[0]
    params = sum(p.numel() for p in policy.ema.model.parameters())
    print(f"batch 1:  p50 {np.median(ours):.2f} ms  p99 {np.percentile(ours, 99):.2f} ms  (CPU p50 "
          f"{np.median(ours_cpu):.2f} ms)   reference path p50 {np.median(naive):.2f} ms (CPU {np.median(naive_cpu):.2f})"
          f"   load average {load:.1f} on {os.cpu_count()} cores")
    print(f"batch 64: {1e3 / np.median(b64):.1f} chunks/s ({64e3 / np.median(b64):.0f} chunks of {policy.cfg.action_horizon} actions per s)")
    if vla.get("vla_p50_ms") is not None:
        print(f"VLA batch 1 (2 cameras 96x96, instruction, proprio): p50 {vla['vla_p50_ms']:.2f} ms  p99 "
              f"{vla['vla_p99_ms']:.2f} ms  (CPU p50 {vla['vla_p50_cpu_ms']:.2f} ms; image encoder + trunk "
              f"{vla['vla_trunk_ms']:.2f} ms, then {vla['vla_flow_steps']} head steps)")
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
        **vla,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
