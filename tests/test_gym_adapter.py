"""Gymnasium adapter: the env checker on every task (with and without cameras), registered ids, both autoreset
modes, per-env seeds, gymnasium's vector wrappers and RecordVideo, bad actions, SB3 SAC on a registered env."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers import vector as vw

from robot_rl import sim
from robot_rl.sim.gym_adapter import RobotRLEnv, gym_id, make_gym_env, make_gym_vector_env

SHORT = 3  # episode length of the short envs
LONG = 10  # a reference env that does not end where the short one does


def _actions(n, dim, steps, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (steps, n, dim)).astype(np.float32)


@pytest.mark.mujoco_compat
@pytest.mark.parametrize("cameras", [(), ("front",)], ids=["vector-obs", "camera"])
@pytest.mark.parametrize("task", sorted(sim.TASKS))
def test_every_registered_task_passes_gymnasium_env_checker_with_and_without_cameras(task, cameras):
    env = gymnasium.make(gym_id(task), cameras=cameras, image_size=(32, 32), render_mode="rgb_array",
                         render_width=32, render_height=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)  # render checks included: env.spec re-makes the env in each render mode
    # Unbounded observation Boxes are intended; anything else the checker says points at a bug.
    unexpected = [str(w.message) for w in caught if "infinity" not in str(w.message)]
    assert unexpected == []
    obs, _ = env.reset(seed=0)
    for k in cameras:
        assert obs[f"images/{k}"].dtype == np.uint8
    frame = env.render()
    assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8 and frame.std() > 5  # a picture, not a blank
    assert env.metadata["render_fps"] == 20.0  # the control rate: videos play in real time
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
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP  # gymnasium's default
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
    env = make_gym_vector_env("lift", n, AutoresetMode.SAME_STEP, task_config={"episode_steps": SHORT})
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
    from robot_rl import sim

    with pytest.raises(ValueError):
        RobotRLEnv(sim.make("lift", num_envs=2))


def test_vector_env_next_step_autoreset_returns_last_obs_then_the_new_episode_without_stepping_it():
    n, cams = 2, dict(cameras=["front"], image_size=[16, 16])
    env = make_gym_vector_env("lift", n, task_config={"episode_steps": SHORT}, **cams)  # NEXT_STEP
    same = make_gym_vector_env("lift", n, AutoresetMode.SAME_STEP, task_config={"episode_steps": SHORT}, **cams)
    ref = make_gym_vector_env("lift", n, task_config={"episode_steps": LONG}, **cams)
    for e in (env, same, ref):
        e.reset(seed=11)
    acts = _actions(n, env.env.action_dim, 2 * SHORT + 1)
    for a in acts[:SHORT]:
        obs, *_, term, trunc, info = env.step(a)
        same_obs, *_ = same.step(a)
        ref_obs, *_ = ref.step(a)
    assert trunc.all() and not term.any() and "final_obs" not in info
    for k in obs:  # the episode's last obs, camera image included
        np.testing.assert_array_equal(obs[k], ref_obs[k])
    # The next step ignores its action: the new episode's first obs, which same-step autoreset returned at once.
    obs, reward, term, trunc, info = env.step(acts[SHORT])
    for k in obs:
        np.testing.assert_array_equal(obs[k], same_obs[k])
    assert (reward == 0).all() and not (term | trunc).any() and not info["_episode_length"].any()
    # From there both run the new episode alike: the ignored step left no trace in the physics.
    for a in acts[SHORT + 1:]:
        obs, reward, term, trunc, info = env.step(a)
        same_obs, same_reward, *_, same_info = same.step(a)
        np.testing.assert_array_equal(reward, same_reward)
        for k in obs:
            for i in range(n):
                want = same_info["final_obs"][i][k] if trunc[i] else same_obs[k][i]
                np.testing.assert_array_equal(obs[k][i], want)
    assert trunc.all() and (info["episode_length"] == SHORT).all()
    for e in (env, same, ref):
        e.close()


def test_vector_env_takes_one_seed_per_env_as_gymnasium_does():
    venv = make_gym_vector_env("push", 2)
    single = make_gym_env("push")
    obs, _ = venv.reset(seed=[1, 2])
    for i, s in enumerate((1, 2)):  # env i starts as a single env reset with seed s
        single_obs, _ = single.reset(seed=s)
        for k in obs:
            np.testing.assert_array_equal(obs[k][i], single_obs[k])
    swapped, _ = venv.reset(seed=[2, 1])
    np.testing.assert_array_equal(swapped["object"], obs["object"][::-1])
    a, _ = venv.reset(seed=[1, 2])
    b, _ = venv.reset()  # unseeded resets after a seed list are reproducible too
    venv.reset(seed=[1, 2])
    c, _ = venv.reset()
    np.testing.assert_array_equal(b["object"], c["object"])
    assert not np.array_equal(a["object"], b["object"])
    half, _ = venv.reset(seed=[1, None])  # None: drawn
    np.testing.assert_array_equal(half["object"][0], obs["object"][0])
    for bad in ([1], [1, 2, 3], "12", [1.5, 2]):
        with pytest.raises(ValueError, match="one per env"):
            venv.reset(seed=bad)
    venv.close()
    single.close()


def test_gymnasium_make_by_id_registers_every_task_and_honours_max_episode_steps():
    ids = {i for i in gymnasium.registry if i.startswith("robot_rl/")}
    assert ids == {gym_id(t) for t in sim.TASKS} and "robot_rl/PegInsert-v0" in ids
    for t, cls in sim.TASKS.items():
        assert gymnasium.spec(gym_id(t)).max_episode_steps == cls.config_cls().episode_steps
    env = gymnasium.make("robot_rl/Push-v0", max_episode_steps=4)
    assert env.spec.max_episode_steps == 4
    env.reset(seed=0)
    flags = [env.step(env.action_space.sample())[3] for _ in range(4)]
    assert flags == [False, False, False, True]  # TimeLimit truncates at 4 (push's own episode is 100 steps)
    env.close()
    venv = gymnasium.make_vec("robot_rl/Lift-v0", num_envs=2, max_episode_steps=4)
    assert venv.env.episode_steps == 4  # the batched env's own episode length, so its truncation is gymnasium's
    venv.reset(seed=0)
    flags = [venv.step(venv.action_space.sample())[3].all() for _ in range(4)]
    assert flags == [False, False, False, True]
    venv.close()


def test_gymnasium_vector_wrappers_run_on_the_vector_env():
    venv = gymnasium.make_vec("robot_rl/Lift-v0", num_envs=2, max_episode_steps=SHORT)
    env = vw.RecordEpisodeStatistics(venv)
    bound = np.full(venv.single_action_space.shape, 2.0, np.float32)
    env = vw.NormalizeReward(vw.ClipAction(vw.RescaleAction(env, -bound, bound)))
    env = vw.NormalizeObservation(vw.FlattenObservation(vw.FilterObservation(env, ["proprio", "object"])))
    obs, _ = env.reset(seed=0)
    dim = venv.single_observation_space["proprio"].shape[0] + venv.single_observation_space["object"].shape[0]
    assert obs.shape == (2, dim) and obs.dtype == np.float32
    episodes = []
    for _ in range(3 * (SHORT + 1)):
        obs, reward, term, trunc, info = env.step(env.action_space.sample())
        assert obs.shape == (2, dim) and np.isfinite(obs).all() and np.isfinite(reward).all()
        if "episode" in info:
            episodes += info["episode"]["l"][info["_episode"]].tolist()
    assert episodes == [SHORT] * 6  # every finished episode counted once, at its length
    assert np.abs(obs).max() < 10  # normalized
    env.close()


def test_record_video_writes_an_mp4_of_the_vector_env(tmp_path):
    from robot_rl.video import read_mp4_frames

    venv = gymnasium.make_vec("robot_rl/Lift-v0", num_envs=2, max_episode_steps=SHORT, render_mode="rgb_array",
                              render_width=32, render_height=32)
    env = vw.RecordVideo(venv, str(tmp_path / "videos"), episode_trigger=lambda e: e == 0)
    env.reset(seed=0)
    for _ in range(SHORT + 1):
        env.step(env.action_space.sample())
    env.close()
    videos = sorted((tmp_path / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["rl-video-episode-0.mp4"]
    frames = read_mp4_frames(videos[0])
    assert frames.shape[0] == SHORT + 1 and frames.shape[1:] == (32, 64, 3)  # reset + each step, both envs side by side
    assert frames.std() > 5


def test_sb3_sac_trains_end_to_end_on_a_registered_env():
    sb3 = pytest.importorskip("stable_baselines3")
    env = gymnasium.make("robot_rl/Lift-v0", max_episode_steps=20, cameras=())
    model = sb3.SAC("MultiInputPolicy", env, learning_starts=100, batch_size=32, buffer_size=1000, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [32, 32]})
    model.learn(total_timesteps=200)
    assert model.num_timesteps == 200 and model._n_updates == 100 and model._episode_num == 10
    obs, _ = env.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True)
    assert env.action_space.contains(action.astype(np.float32))
    env.close()
