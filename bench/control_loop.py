"""Control-loop timing of the deployment node against the simulated robot, over loopback DDS.

    python bench/control_loop.py [--quick] [--policy CHECKPOINT] [--seconds 30]

Starts robot-rl-sim-driver and robot-rl-deploy as separate processes (Cyclone DDS pinned to 127.0.0.1,
a random DDS domain) and runs the node at 100 Hz:
  baseline   policy=expert (a few microseconds of numpy per step: no model competes for the CPU)
  measured   a diffusion policy (the given checkpoint, or an untrained one with the default architecture and
             normalization from a few expert episodes: identical compute) with temporal ensembling, so a chunk
             is requested every policy step and inference runs nearly all the time, in the node's worker process
Figures are the node's own (runs/deploy/.../metrics.json): tick lateness (start - schedule), missed ticks
(ticks skipped because the loop overran a whole period), and obs_to_cmd (from the header stamp the driver
put on the joint state to the publication of the command computed from it). Targets: p99 lateness <= 1 ms,
0 missed ticks, obs_to_cmd p99 <= 3 ms. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def untrained_diffusion(tmp: Path) -> Path:
    """A diffusion checkpoint with the default config and real normalization stats, untrained."""
    from robot_rl import sim
    from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy
    from robot_rl.data.collect import collect
    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=4)
    with EpisodeStore.open(tmp / "expert.zarr", mode="a") as store:
        collect(env, make_expert(env), store, 4, seed=0)
        stats = store.stats()
    spec = dict(task="lift", obs_dims=dict(env.obs_dims), action_dim=env.action_dim, action_space="ee_delta",
                control_hz=env.cfg.control_hz)
    env.close()
    policy = DiffusionPolicy.from_stats(spec, DiffusionConfig(), stats)
    return policy.save(tmp / "diffusion_untrained")


def run_pair(tmp: Path, name: str, policy: str, seconds: float, domain: int, extra: list[str]) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    common = [f"deploy.domain_id={domain}"]
    driver = subprocess.Popen(
        [sys.executable, "-m", "robot_rl.real.cli.sim_driver", "episodes=100000", "wait_for_node_s=300",
         f"hydra.run.dir={tmp / (name + '_driver')}", *common],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        node = subprocess.run(
            [sys.executable, "-m", "robot_rl.real.cli.deploy", f"policy={policy}", f"duration_s={seconds}",
             f"hydra.run.dir={tmp / (name + '_node')}", *common, *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=seconds + 600,
        )
    finally:
        driver.terminate()
        try:
            driver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            driver.kill()
            driver.wait()
    if node.returncode != 0:
        raise SystemExit(f"robot-rl-deploy failed ({name}):\n{node.stdout}\n{node.stderr}")
    return json.loads((tmp / (name + "_node") / "metrics.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="8 s measured, 4 s baseline (default 30 s and 10 s)")
    ap.add_argument("--seconds", type=float, default=None, help="measured duration (s)")
    ap.add_argument("--policy", default=None, help="diffusion checkpoint directory (default: an untrained one)")
    args = ap.parse_args()
    seconds = args.seconds or (8.0 if args.quick else 30.0)
    base_seconds = 4.0 if args.quick else 10.0
    domain = random.Random(os.getpid() ^ time.time_ns()).randint(100, 230)
    with tempfile.TemporaryDirectory(prefix="bench_control_loop_") as d:
        tmp = Path(d)
        policy = args.policy or str(untrained_diffusion(tmp))
        base = run_pair(tmp, "baseline", "expert", base_seconds, domain, [])
        meas = run_pair(tmp, "measured", policy, seconds, domain,
                        ["deploy.blending.mode=temporal_ensemble"])
    print(f"baseline (expert, {base_seconds:g} s): p99 lateness {base['p99_lateness_ms']:.3f} ms, "
          f"missed {base['missed_ticks']}, obs->cmd p99 {base['obs_to_cmd_p99_ms']:.3f} ms")
    print(f"diffusion ({seconds:g} s, {meas['chunk_requests']} chunks, inference p50 "
          f"{meas['chunk_latency_p50_ms']:.1f} ms): p99 lateness {meas['p99_lateness_ms']:.3f} ms, missed "
          f"{meas['missed_ticks']}, obs->cmd p99 {meas['obs_to_cmd_p99_ms']:.3f} ms, ticks {meas['ticks']}")
    out = {
        "p99_lateness_ms": round(meas["p99_lateness_ms"], 3),
        "missed_ticks": meas["missed_ticks"],
        "obs_to_cmd_p99_ms": round(meas["obs_to_cmd_p99_ms"], 3),
        "lateness_p50_ms": round(meas["lateness_p50_ms"], 3),
        "lateness_max_ms": round(meas["lateness_max_ms"], 3),
        "obs_to_cmd_p50_ms": round(meas["obs_to_cmd_p50_ms"], 3),
        "recv_to_cmd_p99_ms": round(meas["recv_to_cmd_p99_ms"], 3),
        "ticks": meas["ticks"],
        "chunk_requests": meas["chunk_requests"],
        "inference_p50_ms": round(meas["chunk_latency_p50_ms"], 2),
        "phase_locked": meas["phase_locked"],
        "baseline_p99_lateness_ms": round(base["p99_lateness_ms"], 3),
        "baseline_missed_ticks": base["missed_ticks"],
        "baseline_obs_to_cmd_p99_ms": round(base["obs_to_cmd_p99_ms"], 3),
        "targets": {"p99_lateness_ms": 1.0, "missed_ticks": 0, "obs_to_cmd_p99_ms": 3.0},
        "seconds": seconds,
        "rate_hz": 100,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "quick": bool(args.quick),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
