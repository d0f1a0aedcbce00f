"""robot_rl simulation: tasks, robot model, domain randomization, MuJoCo C and MJX backends, experts."""

from robot_rl.sim.render import choose_gl_backend

choose_gl_backend()  # before anything imports mujoco


from robot_rl.sim.config import ConfigError, EnvConfig, RandomizationConfig
from robot_rl.sim.env import BatchedEnv
from robot_rl.sim.make import env_config, make, make_from_config
from robot_rl.sim.tasks import TASKS

__all__ = ["BatchedEnv", "ConfigError", "EnvConfig", "RandomizationConfig", "TASKS", "env_config", "make", "make_from_config"]
