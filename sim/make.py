"""The env factory: an EnvConfig (or a Hydra `env` node) -> a batched env of the configured backend."""

from __future__ import annotations

from typing import Any

from robot_rl.sim.config import ConfigError, EnvConfig, from_mapping
from robot_rl.sim.env import BatchedEnv
from robot_rl.sim.tasks import TASKS


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
    if cfg.backend == "gymnasium":
        from robot_rl.sim.backends.gymnasium import GymnasiumEnv

        return GymnasiumEnv(cfg)
    if cfg.backend == "mujoco":
        from robot_rl.sim.backends.mujoco_cpu import MujocoEnv

        return MujocoEnv(cfg)
    check_mjx_mujoco()
    import logging

    from robot_rl.common.jax_cache import enable_compilation_cache
    from robot_rl.sim.backends.mjx import MjxBatchedEnv

    logging.getLogger("jax").setLevel(logging.WARNING)  # JAX's backend probing (no TPU, ...) is noise at INFO
    enable_compilation_cache()
    return MjxBatchedEnv(cfg)


def check_mjx_mujoco() -> None:
    """ConfigError in one line where the installed mujoco-mjx needs a newer mujoco than the one installed (the MuJoCo C
    backend runs on the older ones the ecosystem's envs pin, e.g. Meta-World's 3.3.0; MJX does not)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.version import Version

    try:
        have = Version(metadata.version("mujoco"))
        reqs = [Requirement(r) for r in metadata.requires("mujoco-mjx") or ()]
        mjx = metadata.version("mujoco-mjx")
    except metadata.PackageNotFoundError as e:
        raise ConfigError(f"env.backend=mjx needs the {e.name} package: pip install mujoco-mjx, or set "
                          "env.backend=mujoco") from None
    for r in reqs:
        if r.name == "mujoco" and (r.marker is None or r.marker.evaluate()) and \
                not r.specifier.contains(have, prereleases=True):
            raise ConfigError(f"env.backend=mjx: mujoco-mjx {mjx} needs mujoco{r.specifier}, this environment has "
                              f"mujoco {have}; set env.backend=mujoco (MuJoCo C runs on {have}) or install a mujoco "
                              "that MJX supports")
