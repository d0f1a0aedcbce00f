"""robot_rl simulation: tasks, robot model, domain randomization, MuJoCo C and MJX backends, experts."""

from sim.render import choose_gl_backend

choose_gl_backend()  # before anything imports mujoco


from sim.config import ConfigError, EnvConfig, RandomizationConfig
from sim.env import BatchedEnv
from sim.make import env_config, make, make_from_config
from sim.tasks import TASKS

__all__ = ["BatchedEnv", "ConfigError", "EnvConfig", "RandomizationConfig", "TASKS", "env_config", "make", "make_from_config"]
