"""Shared fixtures: one compiled MJX env per session, persistent JAX compilation cache in .cache/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Small torch models run ~10x slower with intra-op threads on 2 busy cores (measured: 150 SB3 SAC updates
# 22 s with 2 threads, 2 s with 1). Set before torch is imported anywhere in the session.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Randomization used by the shared envs: every mechanism on, so equivalence and determinism cover it.
DR = dict(
    friction=[0.7, 1.3], object_mass=[0.5, 1.5], object_size=[0.9, 1.1], joint_damping=[0.8, 1.2],
    armature=[0.8, 1.2], actuator_gain=[0.9, 1.1], obs_noise_std=0.002, action_latency=[0, 2],
)
N_ENVS = 4


@pytest.fixture(scope="session", autouse=True)
def _jax_cache():
    import jax

    jax.config.update("jax_compilation_cache_dir", str(ROOT / ".cache" / "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


@pytest.fixture(scope="session")
def mjx_env():
    import sim

    env = sim.make("lift", backend="mjx", num_envs=N_ENVS, randomization=DR)
    yield env
    env.close()


@pytest.fixture()
def cpu_env():
    import sim

    env = sim.make("lift", backend="mujoco", num_envs=N_ENVS, randomization=DR)
    yield env
    env.close()
