"""The deployment dry run as two processes: robot-rl-sim-driver (a MuJoCo robot speaking ROS 2 over DDS) and
robot-rl-deploy (the control node with the policy), on a private DDS domain and topic namespace.

    summary = dry_run(out_dir, policy_dir, "lift", episodes=5, seed=1000, env_args=env_overrides(env_cfg))

Both are the console scripts a user runs (README, "Deploying with ROS 2"), started as subprocesses with Cyclone
DDS pinned to loopback (the `sim` deploy profile); their run directories are out_dir/driver and out_dir/node.
Returns the node's success count and control-loop figures.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Callable, Sequence

from robot_rl.real.config import Topics

# Every topic of real.config.Topics (camera topics are per camera, none in a dry run): namespaced, so concurrent dry
# runs on one machine never cross.
TOPICS = tuple(f.name for f in dataclasses.fields(Topics) if f.name != "cameras")
FIGURES = ("episodes", "successes", "p99_lateness_ms", "missed_ticks", "obs_to_cmd_p50_ms", "obs_to_cmd_p99_ms",
           "chunk_latency_p50_ms", "ticks", "stop_reason")


class DryRunFailed(RuntimeError):
    """The driver or the node exited with an error; the message holds the end of its output."""


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def env_overrides(env_cfg) -> list[str]:
    """Command-line overrides that give another command the same robot conditions as `env_cfg` (an EnvConfig):
    its randomization keys that differ from the defaults, its action history and its task_config (episode length,
    task parameters). For the dry run's driver (the simulated robot: dynamics, action latency, observation noise,
    episode length) and node (the policy's observation)."""
    from robot_rl.sim.config import EnvConfig

    def value(v) -> str:
        return "[" + ",".join(value(x) for x in v) + "]" if isinstance(v, (list, tuple)) else repr(v)

    out = [f"env.randomization.{k}={value(v)}" for k, v in env_cfg.randomization.overrides().items()]
    if env_cfg.action_history != EnvConfig.action_history:
        out.append(f"env.action_history={env_cfg.action_history}")
    out += [f"++env.task_config.{k}={value(v)}" for k, v in env_cfg.task_config.items()]  # ++: add or override
    return out


def dry_run(out: str | Path, policy: str | Path, task: str, episodes: int, seed: int = 0,
            progress: Callable[[int], None] | None = None, timeout_s: float = 900.0,
            env_args: Sequence[str] = ()) -> dict:
    """env_args: overrides of both commands' env (env_overrides(env_cfg): the conditions the policy trained in)."""
    out = Path(out)
    bin_dir = Path(sys.executable).parent
    ns = "dry" + uuid.uuid4().hex[:8]
    common = [f"env.task={task}", f"deploy.domain_id={random.randint(1, 200)}",
              *(f"deploy.topics.{t}=/{ns}/{t}" for t in TOPICS), *env_args]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    driver = subprocess.Popen(
        [str(bin_dir / "robot-rl-sim-driver"), f"episodes={episodes}", f"seed={seed}", "wait_for_node_s=120",
         f"hydra.run.dir={out / 'driver'}", *common],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        node = subprocess.run(
            [str(bin_dir / "robot-rl-deploy"), f"policy={policy}", f"episodes={episodes}",
             f"hydra.run.dir={out / 'node'}", *common], capture_output=True, text=True, timeout=timeout_s, env=env)
        driver_out, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    if node.returncode != 0:
        raise DryRunFailed(f"robot-rl-deploy exited with {node.returncode}: {_tail(node.stdout + node.stderr)}")
    if driver.returncode != 0:
        raise DryRunFailed(f"robot-rl-sim-driver exited with {driver.returncode}: {_tail(driver_out)}")
    metrics = json.loads((out / "node" / "metrics.json").read_text())
    if progress is not None:
        progress(int(metrics.get("episodes", 0)))
    return {k: metrics.get(k) for k in FIGURES} | {"policy": str(policy), "seed": seed}
