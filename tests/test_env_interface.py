"""The env interface (sim/interface.py): both backends implement it, and nothing above sim reads an env's config."""

from __future__ import annotations

import re

import numpy as np

from robot_rl import sim
from robot_rl.sim.interface import Env
from tests.conftest import ROOT

# Modules above sim that may read env.cfg, and why
READS_ENV_CONFIG = {
    "real/sim_driver.py": "the simulated robot steps the MuJoCo model itself, at the backend's physics_dt",
}


def test_both_backends_implement_it():
    env = sim.make("peg_insert", num_envs=2, action_history=2, control_hz=20.0)
    try:
        assert isinstance(env, Env)
        assert (env.task_name, env.num_envs, env.control_hz, env.action_history, env.backend) == (
            "peg_insert", 2, 20.0, 2, "mujoco")
        assert env.episode_steps == env.task.cfg.episode_steps and env.terminate_on_success is True
        assert env.action_space.kind == "ee_delta" and env.action_space.max_ee_delta == env.cfg.max_ee_delta
        np.testing.assert_array_equal(env.action_space.low, -np.ones(env.action_dim))
        again = sim.make_from_config(sim.env_config(env.config_dict()))  # what env actors rebuild it from
        try:
            assert again.task_name == env.task_name and again.obs_dims == env.obs_dims
        finally:
            again.close()
    finally:
        env.close()
    from robot_rl.sim.backends.mjx import MjxBatchedEnv  # imported here: the mujoco_compat lane's MuJoCo has no MJX

    # the MJX env: the same class's members (its instance attributes are set in BatchedEnv.__init__)
    members = [m for m in vars(Env) if not m.startswith("_")]
    assert issubclass(MjxBatchedEnv, sim.BatchedEnv) and "task_name" in members and "reset" in members
    missing = [m for m in members if not hasattr(MjxBatchedEnv, m)]
    assert not missing, missing


# what only an env's config has (EnvConfig's own keys), read through any name: env.cfg.x, base.cfg.x, self.env.cfg...
ENV_ONLY_KEYS = ("control_hz", "physics_dt", "action_space", "max_ee_delta", "max_yaw_delta", "ik_damping",
                 "workspace_low", "workspace_high", "terminate_on_success", "action_history", "image_size",
                 "image_quality", "randomization", "task_config", "robot", "backend", "gym")
READS = re.compile(r"\benv\.cfg\b|\b\w+\.cfg\.(" + "|".join(ENV_ONLY_KEYS) + r")\b")


def test_no_layer_above_sim_reads_the_env_config():
    hits = []
    for top in ("robot_rl", "policies", "real"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if READS.search(line) and rel not in READS_ENV_CONFIG:
                    hits.append(f"{rel}:{n}: {line.strip()}")
    assert not hits, "read the env interface (sim/interface.py) instead:\n" + "\n".join(hits)
