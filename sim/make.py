"""The env factory: an EnvConfig (or a Hydra `env` node) -> a batched env of the configured backend."""

from __future__ import annotations

from typing import Any

from sim.config import EnvConfig, from_mapping
from sim.env import BatchedEnv
from sim.tasks import TASKS


def env_config(node: Any) -> EnvConfig:
    """A validated EnvConfig from a dict / OmegaConf `env` node; ConfigError (or TypeError) names the bad key."""
    cfg = from_mapping(node)
    cfg.validate(TASKS)
    return cfg


def make(task: str = "lift", backend: str = "mujoco", num_envs: int = 16, **overrides) -> BatchedEnv:
    """Build a batched env: `sim.make("lift", backend="mjx", num_envs=256, randomization={...})`."""
    return make_from_config(from_mapping(dict(task=task, backend=backend, num_envs=num_envs, **overrides)))


def make_from_config(cfg: EnvConfig) -> BatchedEnv:
    """The env of `cfg.backend`; MJX gets JAX's persistent compilation cache, so its jit compiles are paid once."""
    cfg.validate(TASKS)
    if cfg.backend == "mujoco":
        from sim.backends.mujoco_cpu import MujocoEnv

        return MujocoEnv(cfg)
    import logging

    from robot_rl.common.jax_cache import enable_compilation_cache
    from sim.backends.mjx import MjxBatchedEnv

    logging.getLogger("jax").setLevel(logging.WARNING)  # JAX's backend probing (no TPU, ...) is noise at INFO
    enable_compilation_cache()
    return MjxBatchedEnv(cfg)
