"""Bad input gets one clear error that names the problem and the fix."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.config import ConfigError


def test_unknown_task_lists_the_valid_names():
    with pytest.raises(ConfigError, match="unknown task 'stack'; valid tasks: " + ", ".join(sorted(sim.TASKS))):
        sim.make("stack")
    assert {"lift", "peg_insert"} <= set(sim.TASKS)


def test_unknown_backend_lists_the_valid_names():
    with pytest.raises(ConfigError, match="unknown backend 'warp'.*mujoco, mjx"):
        sim.make("lift", backend="warp")


def test_unknown_action_space_lists_the_valid_names():
    with pytest.raises(ConfigError, match="ee_delta, joint_pos"):
        sim.make("lift", action_space="torque")


def test_action_of_wrong_shape_names_the_expected_shape():
    env = sim.make("lift", num_envs=3)
    env.reset(0)
    with pytest.raises(ValueError, match=r"expected \(3, 4\)"):
        env.step(np.zeros((3, 7), np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_action_is_rejected_at_the_host_api(bad):
    env = sim.make("lift", num_envs=2)
    env.reset(0)
    a = np.zeros((2, 4), np.float32)
    a[1, 2] = bad
    with pytest.raises(ValueError, match=r"NaN or inf for env\(s\) \[1\]"):
        env.step(a)


def test_non_finite_action_inside_jit_is_zeroed_and_counted(mjx_env):
    import jax.numpy as jnp

    mjx_env.reset(0)
    state = mjx_env.state
    a = np.zeros((mjx_env.num_envs, mjx_env.action_dim), np.float32)
    a[0, 0] = np.nan
    state = mjx_env.mjx.step(state, jnp.asarray(a))
    assert np.asarray(state.metrics["invalid_actions"]).tolist() == [1, 0, 0, 0]
    assert np.isfinite(np.asarray(state.data.qpos)).all()


@pytest.mark.parametrize(
    "rand, message",
    [
        ({"friction": [1.2, 0.8]}, r"randomization.friction=\[1.2, 0.8\] has min > max"),
        ({"object_mass": [-1.0, 1.0]}, r"object_mass=.*must be > 0"),
        ({"action_latency": [0, 1.5]}, r"action_latency\[1\]=1.5 must be a whole number"),
        ({"obs_noise_std": -0.1}, r"obs_noise_std=-0.1 must be"),
        ({"gravity": [1, 2]}, r"unknown env.randomization key\(s\) \['gravity'\]"),
    ],
)
def test_invalid_randomization_fails_at_startup_before_any_simulation(rand, message, monkeypatch):
    def no_model(*a, **k):
        raise AssertionError("a model was compiled before the config was validated")

    monkeypatch.setattr(mujoco.MjModel, "from_xml_string", no_model)
    with pytest.raises(ConfigError, match=message):
        sim.make("lift", randomization=rand)


def test_invalid_task_range_fails_at_startup():
    with pytest.raises(ConfigError, match=r"object_x=\[0.6, 0.4\] has min > max"):
        sim.make("lift", task_config={"object_x": [0.6, 0.4]})


def test_control_rate_must_divide_into_physics_steps():
    with pytest.raises(ConfigError, match="whole number"):
        sim.make("lift", control_hz=30.0, physics_dt=0.005)
