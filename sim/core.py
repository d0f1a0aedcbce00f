"""Per-step logic shared by both backends, over an array namespace: reset sampling and task outputs."""

from __future__ import annotations

from robot_rl.sim import rng
from robot_rl.sim.config import RandomizationConfig
from robot_rl.sim.randomization import sample_params
from robot_rl.sim.task import Phys, Task


def episode_stream(xp, key, episode):
    """Key of one env's episode; per-step draws use (stream, step)."""
    return rng.pcg_hash(xp, xp.asarray(key, dtype=xp.uint32) ^ rng.pcg_hash(xp, xp.asarray(episode, dtype=xp.uint32)))


def sample_episode(xp, task: Task, rcfg: RandomizationConfig, key, episode):
    """Randomization draws and initial (qpos, mocap_pos, target) for one episode per env."""
    params = sample_params(xp, rcfg, key, episode)
    u = rng.uniform(xp, key, episode, rng.RESET, task.n_reset_uniforms)
    qpos, mocap, target = task.sample_reset(xp, u, params)
    return params, qpos, mocap, target


def observe(xp, task: Task, phys: Phys, target, params, noise_std: float, key, episode, step):
    """Task observation with per-entry Gaussian noise (std 0 adds nothing); float32."""
    obs = task.observe(xp, phys, target, params)
    if noise_std <= 0:
        return {k: v.astype(xp.float32) for k, v in obs.items()}
    stream = episode_stream(xp, key, episode)
    out = {}
    for i, (k, v) in enumerate(sorted(obs.items())):
        v = v.astype(xp.float32)
        out[k] = v + xp.float32(noise_std) * rng.normal(xp, stream ^ xp.uint32(i + 1), step, rng.OBS_NOISE, v.shape[-1])
    return out


def evaluate(xp, task: Task, phys: Phys, target, params):
    """(reward, success, progress) for the current state."""
    return task.evaluate(xp, phys, target, params)
