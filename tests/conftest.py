"""Shared fixtures: one compiled MJX env per session, persistent JAX compilation cache in .cache/."""

from __future__ import annotations

import os
import subprocess
import sys
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


BIN = Path(sys.executable).parent  # the venv's bin dir, where the console scripts live


def run_cli(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run one of our console scripts as a user would, capturing its output."""
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    return subprocess.run([str(BIN / script), *args], capture_output=True, text=True, timeout=timeout, env=env)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, no traceback, one line on stderr containing every needle."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
