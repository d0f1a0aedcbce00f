"""Gymnasium adapter: API conformance, same-step autoreset semantics, seeding, bad actions, SB3 smoke run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from sim.gym_adapter import RobotRLEnv, make_gym_env, make_gym_vector_env

SHORT = 3  # episode length of the short envs
LONG = 10  # a reference env that does not end where the short one does


def _actions(n, dim, steps, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (steps, n, dim)).astype(np.float32)


def test_single_env_passes_gymnasium_env_checker_without_unexpected_warnings():
    env = make_gym_env("lift", task_config={"episode_steps": SHORT})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped, skip_render_check=True)
    # Unbounded observation Boxes are intended; anything else the checker says points at a bug.
    unexpected = [str(w.message) for w in caught if "infinity" not in str(w.message)]
    assert unexpected == []
    env.close()


def test_single_env_returns_final_obs_at_episode_end_and_requires_reset():
    env = make_gym_env("lift", task_config={"episode_steps": SHORT})
    ref = make_gym_env("lift", task_config={"episode_steps": LONG})
    env.reset(seed=3)
    ref.reset(seed=3)
    for t, a in enumerate(_actions(1, env.action_space.shape[0], SHORT)[:, 0]):
        obs, _, terminated, truncated, info = env.step(a)
        ref_obs, *_ = ref.step(a)
        assert obs in env.observation_space
        assert (terminated, truncated) == (False, t == SHORT - 1)
    for k in obs:  # the last obs of the episode, not the auto-reset one
        np.testing.assert_array_equal(obs[k], ref_obs[k])
    assert info["episode_length"] == SHORT
    with pytest.raises(RuntimeError):
        env.step(env.action_space.sample())
    env.reset()
    *_, info = env.step(env.action_space.sample())
    assert info["episode_length"] == 1
    env.close()
    ref.close()


def test_single_env_seeding_is_reproducible_and_unseeded_resets_differ():
    a, b = make_gym_env("lift"), make_gym_env("lift")
    o1, _ = a.reset(seed=7)
    o2, _ = b.reset(seed=7)
    a_next, _ = a.reset()
    b_next, _ = b.reset()
    for k in o1:
        np.testing.assert_array_equal(o1[k], o2[k])
        np.testing.assert_array_equal(a_next[k], b_next[k])
    assert any(not np.array_equal(o1[k], a_next[k]) for k in o1)
    a.close()
    b.close()


def test_vector_env_spaces_shapes_and_dtypes_match():
    n = 3
    env = make_gym_vector_env("lift", n)
    assert env.num_envs == n
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.single_action_space.shape == (env.env.action_dim,)
    assert env.single_action_space.dtype == np.float32
    assert set(env.single_observation_space.spaces) == set(env.env.obs_dims)
    obs, _ = env.reset(seed=0)
    assert obs in env.observation_space
    obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
    assert obs in env.observation_space
    for k, space in env.observation_space.spaces.items():
        assert obs[k].shape == space.shape == (n, env.env.obs_dims[k]) and obs[k].dtype == np.float32
    assert reward.shape == terminated.shape == truncated.shape == (n,)
    assert reward.dtype == np.float32 and terminated.dtype == truncated.dtype == np.bool_
    env.close()


def test_vector_env_same_step_autoreset_reports_final_obs():
    n = 2
    env = make_gym_vector_env("lift", n, task_config={"episode_steps": SHORT})
    ref = make_gym_vector_env("lift", n, task_config={"episode_steps": LONG})
    env.reset(seed=11)
    ref.reset(seed=11)
    acts = _actions(n, env.env.action_dim, SHORT + 1)
    for a in acts[: SHORT - 1]:
        _, _, term, trunc, info = env.step(a)
        ref.step(a)
        assert not (term | trunc).any() and "final_obs" not in info
    obs, _, term, trunc, info = env.step(acts[SHORT - 1])
    ref_obs, *_ = ref.step(acts[SHORT - 1])
    assert trunc.all() and not term.any()
    assert info["_final_obs"].all() and info["_final_info"].all()
    assert (info["final_info"]["episode_length"] == SHORT).all()
    for i in range(n):
        for k in obs:
            np.testing.assert_array_equal(info["final_obs"][i][k], ref_obs[k][i])  # true last obs
            assert not np.array_equal(obs[k][i], ref_obs[k][i])  # returned obs is already the new episode's
    *_, info = env.step(acts[SHORT])
    assert (info["episode_length"] == 1).all() and "final_obs" not in info
    env.close()
    ref.close()


def test_wrong_action_shape_raises_value_error():
    env = make_gym_env("lift")
    env.reset(seed=0)
    dim = env.action_space.shape[0]
    for bad in (np.zeros(dim + 1), np.zeros((1, dim))):
        with pytest.raises(ValueError):
            env.step(bad)
    venv = make_gym_vector_env("lift", 2)
    venv.reset(seed=0)
    for bad in (np.zeros((2, dim + 1)), np.zeros((3, dim)), np.zeros(dim)):
        with pytest.raises(ValueError):
            venv.step(bad)
    env.close()
    venv.close()


def test_single_env_rejects_batched_env_with_several_envs():
    import sim

    with pytest.raises(ValueError):
        RobotRLEnv(sim.make("lift", num_envs=2))


def test_sb3_sac_trains_and_predicts_on_single_env():
    sb3 = pytest.importorskip("stable_baselines3")
    env = make_gym_env("lift", task_config={"episode_steps": 20})
    model = sb3.SAC("MultiInputPolicy", env, learning_starts=50, batch_size=32, buffer_size=1000, seed=0, device="cpu")
    model.learn(total_timesteps=200)
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == env.action_space.shape
    assert env.action_space.contains(action.astype(np.float32))
    env.close()
