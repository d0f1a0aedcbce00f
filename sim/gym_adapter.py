"""Gymnasium adapters: `RobotRLVectorEnv` (a VectorEnv over a BatchedEnv) and `RobotRLEnv` (one env).

The vector env follows gymnasium's same-step autoreset convention: where an episode ends, the returned
obs is already the next episode's first obs, and info carries "final_obs" (object array of per-env obs
dicts, None elsewhere) and "final_info" (batched info dict), each with a "_final_obs" / "_final_info" mask.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

import sim
from sim.env import BatchedEnv

_INFO_KEYS = ("success", "progress", "intervention", "episode_return", "episode_length")
_SEED_LIMIT = 2**31


def observation_space(env: BatchedEnv) -> spaces.Dict:
    """Dict of unbounded float32 Boxes, one per vector observation key of `env`, and uint8 image Boxes."""
    boxes = {k: spaces.Box(-np.inf, np.inf, (int(d),), np.float32) for k, d in env.obs_dims.items()}
    boxes.update({k: spaces.Box(0, 255, shape, np.uint8) for k, shape in env.image_shapes.items()})
    return spaces.Dict(dict(sorted(boxes.items())))


def action_space(env: BatchedEnv) -> spaces.Box:
    """Normalized action Box [-1, 1]^action_dim."""
    return spaces.Box(-1.0, 1.0, (env.action_dim,), np.float32)


def _next_seed(np_random: np.random.Generator) -> int:
    """A fresh BatchedEnv seed drawn from a gymnasium RNG."""
    return int(np_random.integers(_SEED_LIMIT))


class RobotRLVectorEnv(gymnasium.vector.VectorEnv):
    """A gymnasium VectorEnv view of a BatchedEnv (same-step autoreset)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(self, env: BatchedEnv):
        self.env = env
        self.num_envs = env.num_envs
        self.single_observation_space = observation_space(env)
        self.single_action_space = action_space(env)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset every env; seed=None draws the next seed from the vector env's np_random."""
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int or None (one seed for the whole batch), got {seed!r}")
        super().reset(seed=seed)
        obs = self.env.reset(seed if seed is not None else _next_seed(self.np_random))
        return obs, {}

    def step(self, actions):
        """Step all envs; terminated / truncated split, final obs reported per gymnasium same-step autoreset."""
        obs, reward, done, raw = self.env.step(actions)
        info = {}
        for k in _INFO_KEYS:
            info[k], info[f"_{k}"] = np.asarray(raw[k]), np.ones(self.num_envs, dtype=bool)
        if done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.nonzero(done)[0]:
                final_obs[i] = {k: v[i].copy() for k, v in raw["final_obs"].items()}
            final_info = {}
            for k in _INFO_KEYS:
                final_info[k], final_info[f"_{k}"] = np.asarray(raw[k]).copy(), done.copy()
            info.update(final_obs=final_obs, _final_obs=done.copy(), final_info=final_info, _final_info=done.copy())
        return obs, reward, np.asarray(raw["terminated"]), np.asarray(raw["truncated"]), info

    def close_extras(self, **kwargs) -> None:
        """Release the backend."""
        self.env.close()


class RobotRLEnv(gymnasium.Env):
    """A single-env gymnasium view of a BatchedEnv with num_envs=1."""

    metadata = {"render_modes": []}

    def __init__(self, env: BatchedEnv):
        if env.num_envs != 1:
            raise ValueError(f"RobotRLEnv needs a BatchedEnv with num_envs=1, got {env.num_envs}")
        self.env = env
        self.observation_space = observation_space(env)
        self.action_space = action_space(env)
        self._needs_reset = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start a new episode; seed=None draws the next seed from self.np_random."""
        super().reset(seed=seed)
        obs = self.env.reset(seed if seed is not None else _next_seed(self.np_random))
        self._needs_reset = False
        return _unbatch(obs), {}

    def step(self, action):
        """One control step; at episode end the returned obs is the episode's final obs."""
        if self._needs_reset:
            raise RuntimeError("call reset() before step() (and again after an episode ends)")
        a = np.asarray(action, dtype=np.float32)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action has shape {a.shape}, expected {self.action_space.shape}")
        obs, reward, done, raw = self.env.step(a[None])
        terminated, truncated = bool(raw["terminated"][0]), bool(raw["truncated"][0])
        if done[0]:
            obs = raw["final_obs"]
            self._needs_reset = True
        info = {k: np.asarray(raw[k][0]).item() for k in _INFO_KEYS}
        return _unbatch(obs), float(reward[0]), terminated, truncated, info

    def close(self) -> None:
        """Release the backend."""
        self.env.close()


def _unbatch(obs: dict) -> dict:
    """Env 0's observation as fresh arrays."""
    return {k: np.array(v[0], dtype=np.float32) for k, v in sorted(obs.items())}


def make_gym_env(task: str = "lift", **env_overrides) -> RobotRLEnv:
    """A single gymnasium env for `task` (overrides as for sim.make)."""
    return RobotRLEnv(sim.make(task, num_envs=1, **env_overrides))


def make_gym_vector_env(task: str = "lift", num_envs: int = 16, **env_overrides) -> RobotRLVectorEnv:
    """A gymnasium vector env of `num_envs` copies of `task` (overrides as for sim.make)."""
    return RobotRLVectorEnv(sim.make(task, num_envs=num_envs, **env_overrides))
