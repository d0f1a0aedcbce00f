"""The batched environment interface and `make()`: task + backend from one EnvConfig.

Host API (both backends, numpy in / numpy out):
  reset(seed) -> obs                      obs: dict of float32 arrays [N, dim]
  step(action [N, A]) -> obs, reward [N], done [N], info
Auto-reset happens inside step: where done, `obs` is already the next episode's first observation and
`info["final_obs"]` holds the last observation of the finished episode. info also carries `success`,
`progress`, `intervention` (always False from sim; the HIL layer sets it), `terminated`, `truncated`,
`episode_return` and `episode_length` (meaningful where done).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sim.config import ConfigError, EnvConfig
from sim.tasks import TASKS


class BatchedEnv:
    """Shared host-side logic. Subclasses implement `_reset(seed)` and `_step(action)`."""

    def __init__(self, cfg: EnvConfig):
        from sim.actions import ActionSpace
        from sim.randomization import check_task_support

        cfg.validate(TASKS)
        task_cls = TASKS[cfg.task]
        known = {f.name for f in dataclasses.fields(task_cls.config_cls)}
        unknown = sorted(set(cfg.task_config) - known)
        if unknown:
            raise ConfigError(f"unknown task_config key(s) {unknown} for task {cfg.task!r}; valid: {sorted(known)}")
        try:
            task_cfg = task_cls.config_cls(**{k: _tuplify(v) for k, v in cfg.task_config.items()})
            self.task = task_cls(task_cfg)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        check_task_support(cfg.randomization, self.task)
        self.cfg = cfg
        self.num_envs = int(cfg.num_envs)
        self.action_space = ActionSpace(cfg, self.task)
        self.action_dim = self.action_space.dim

    # ---- host API ---------------------------------------------------------------------------------
    def reset(self, seed: int = 0) -> dict:
        return self._reset(int(seed))

    def step(self, action):
        return self._step(self.check_action(action))

    def check_action(self, action) -> np.ndarray:
        a = np.asarray(action, dtype=np.float32)
        expected = (self.num_envs, self.action_dim)
        if a.shape != expected:
            raise ValueError(
                f"action has shape {a.shape}, expected {expected} (num_envs, action_dim) for "
                f"action_space={self.cfg.action_space!r} on task {self.task.name!r}"
            )
        bad = ~np.isfinite(a)
        if bad.any():
            envs = sorted(set(np.nonzero(bad)[0].tolist()))
            raise ValueError(f"action contains NaN or inf for env(s) {envs[:10]}; actions must be finite")
        return a

    @property
    def obs_dims(self) -> dict[str, int]:
        return self.task.obs_dims()

    def instructions(self) -> list[str]:
        return self.task.instructions()

    @property
    def episode_steps(self) -> int:
        return self.task.cfg.episode_steps

    def render(self, env_ids, camera: str = "front", width: int = 320, height: int = 240) -> np.ndarray:
        """RGB frames [len(env_ids), height, width, 3] uint8 of the envs' current states, offscreen."""
        from sim.render import FrameRenderer

        r = getattr(self, "_frame_renderer", None)
        if r is None or (r.width, r.height) != (width, height):
            if r is not None:
                r.close()
            r = self._frame_renderer = FrameRenderer(width, height)
        return np.stack([r.render(*self._render_state(int(i)), camera) for i in np.atleast_1d(env_ids)])

    def _render_state(self, i: int):
        """(MjModel, MjData) holding env i's current state, for rendering."""
        raise NotImplementedError

    def close(self) -> None:
        r = getattr(self, "_frame_renderer", None)
        if r is not None:
            r.close()
            self._frame_renderer = None


def _tuplify(v):
    return tuple(v) if isinstance(v, list) else v


def make(task: str = "lift", backend: str = "mujoco", num_envs: int = 16, **overrides) -> BatchedEnv:
    """Build a batched env: `sim.make("lift", backend="mjx", num_envs=256, randomization={...})`."""
    from sim.config import from_mapping

    cfg = from_mapping(dict(task=task, backend=backend, num_envs=num_envs, **overrides))
    return make_from_config(cfg)


def make_from_config(cfg: EnvConfig) -> BatchedEnv:
    cfg.validate(TASKS)
    if cfg.backend == "mujoco":
        from sim.backends.mujoco_cpu import MujocoEnv

        return MujocoEnv(cfg)
    from sim.backends.mjx import MjxBatchedEnv

    return MjxBatchedEnv(cfg)
