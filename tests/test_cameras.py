"""Rendered cameras as observations: shapes on both backends, auto-reset frames, validation, missing GL,
visual randomization, and images in the episode store."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr

from robot_rl import sim
from robot_rl.sim.config import ConfigError
from tests.conftest import DR, N_ENVS, ROOT

CAMS = ["front", "wrist"]
VISUAL_DR = dict(light=[0.6, 1.3], light_dir_jitter=15.0, color_jitter=0.1, camera_pos_jitter=0.01,
                 camera_rot_jitter=2.0)


def _images(obs):
    return {k: v for k, v in obs.items() if k.startswith("images/")}


def test_cameras_add_uint8_image_observations_and_leave_obs_dims_alone():
    env = sim.make("lift", num_envs=2, cameras=CAMS, image_size=[24, 32])
    assert env.obs_dims == sim.make("lift", num_envs=1).obs_dims  # vector keys only, as before
    assert env.image_shapes == {"images/front": (24, 32, 3), "images/wrist": (24, 32, 3)}
    obs = env.reset(0)
    obs2, *_ = env.step(np.zeros((2, env.action_dim), np.float32))
    for o in (obs, obs2):
        assert set(o) == {"proprio", "object", "images/front", "images/wrist"}
        for k, shape in env.image_shapes.items():
            assert o[k].shape == (2, *shape) and o[k].dtype == np.uint8
            assert o[k].std() > 5, f"{k} is blank"
    # each env is drawn from its own state (its cube elsewhere)
    assert np.abs(obs["images/front"][0].astype(int) - obs["images/front"][1]).mean() > 0.5
    assert sim.make("lift", num_envs=1).image_shapes == {}
    env.close()


def test_gym_observation_space_holds_the_images():
    from robot_rl.sim.gym_adapter import RobotRLVectorEnv

    venv = RobotRLVectorEnv(sim.make("lift", num_envs=2, cameras=["wrist"], image_size=[16, 16]))
    space = venv.single_observation_space["images/wrist"]
    assert space.shape == (16, 16, 3) and space.dtype == np.uint8
    obs, _ = venv.reset(seed=0)
    assert venv.observation_space.contains(obs)
    venv.close()


def test_after_auto_reset_the_images_show_the_new_episode():
    env = sim.make("lift", num_envs=2, cameras=CAMS, image_size=[32, 32], task_config={"episode_steps": 3})
    obs = env.reset(5)
    hold = np.tile(env.action_space.neutral, (2, 1))
    for _ in range(3):
        before = obs
        obs, _, done, info = env.step(hold)
    assert done.all()
    for cam in CAMS:
        k = f"images/{cam}"
        # obs is the new episode's first state: the same picture the env's current state renders to
        np.testing.assert_array_equal(obs[k], env.render([0, 1], cam, width=32, height=32, quality="fast"))
        # final_obs keeps the finished episode's last frame (the cube where it was, not the new reset)
        assert np.abs(info["final_obs"][k].astype(int) - obs[k]).mean() > 0.5
        last, new = info["final_obs"][k].astype(int), obs[k].astype(int)
        assert np.abs(last - before[k]).mean() < np.abs(new - before[k]).mean()
    env.close()


def test_unknown_camera_is_one_error_listing_the_models_cameras():
    with pytest.raises(ConfigError, match=r"unknown camera\(s\) \['top'\].*front, overview, wrist"):
        sim.make("lift", num_envs=1, cameras=["front", "top"])


@pytest.mark.parametrize("size", [[0, 32], [32, -1], [32], ["a", 3]])
def test_image_size_must_be_two_positive_whole_numbers(size):
    with pytest.raises(ConfigError, match="image_size"):
        sim.make("lift", num_envs=1, cameras=["front"], image_size=size)


@pytest.mark.parametrize("bad, match", [(dict(cameras="front"), r"env.cameras=.front. must be a list of strings"),
                                        (dict(cameras=["front", "front"]), "twice"),
                                        (dict(cameras=["front"], image_quality="ultra"), "image_quality 'ultra'")])
def test_bad_camera_settings_are_one_clear_error(bad, match):
    with pytest.raises(ConfigError, match=match):
        sim.make("lift", num_envs=1, **bad)


def _make_with_gl(value: str) -> subprocess.CompletedProcess:
    code = ("from robot_rl import sim\nsim.make('lift', num_envs=1).reset(0)\nprint('physics ok')\n"
            "sim.make('lift', num_envs=1, cameras=['front'])")
    env = dict(os.environ, MUJOCO_GL=value, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


@pytest.mark.parametrize("value", ["bogus", "osmesa"])
def test_missing_gl_is_one_error_naming_the_packages_and_mujoco_gl(value):
    if value == "osmesa" and ctypes.util.find_library("OSMesa"):
        pytest.skip("libOSMesa is installed here, so MUJOCO_GL=osmesa works")
    proc = _make_with_gl(value)
    assert proc.returncode == 1
    assert "physics ok" in proc.stdout, "a GL setting that cannot work must not break the physics"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("robot_rl.sim.render.RenderingUnavailable: offscreen rendering is unavailable"), proc.stderr
    for needle in (f"MUJOCO_GL={value}" if value == "osmesa" else "MUJOCO_GL='bogus'", "libegl1 libegl-mesa0 "
                   "libgl1-mesa-dri", "MUJOCO_GL=egl", "libosmesa6", "MUJOCO_GL=osmesa"):
        assert needle in last, (needle, last)


def test_visual_randomization_is_fixed_by_the_seed_and_varies_across_seeds():
    def frames(seed, dr):
        env = sim.make("lift", num_envs=2, cameras=CAMS, image_size=[32, 32], randomization=dr)
        obs = env.reset(seed)
        fields = [(m.light_diffuse.copy(), m.cam_pos.copy(), m.mat_rgba.copy()) for m in env.models]
        env.close()
        return _images(obs), fields

    a, fa = frames(1, VISUAL_DR)
    b, fb = frames(1, VISUAL_DR)
    c, fc = frames(2, VISUAL_DR)
    plain, fp = frames(1, {})
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert np.abs(a[k].astype(int) - plain[k]).mean() > 1.0, "same seed and state, DR on vs off: must differ"
    for x, y in zip(fa, fb):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
    for x, y, z in zip(fa, fc, fp):
        for u, v, w in zip(x, y, z):
            assert not np.allclose(u, v) and not np.allclose(u, w)  # lights, cameras, table colour all drawn


def test_visual_randomization_is_per_episode():
    env = sim.make("lift", num_envs=1, cameras=["front"], image_size=[32, 32], randomization=VISUAL_DR,
                   task_config={"episode_steps": 1})
    env.reset(0)
    first = env.models[0].cam_pos.copy()
    env.step(np.zeros((1, env.action_dim), np.float32))  # ends the episode: the next one draws anew
    assert not np.allclose(env.models[0].cam_pos, first)
    env.close()


def test_collected_images_round_trip_through_the_store_compressed(tmp_path):
    from robot_rl.data.collect import collect
    from robot_rl.data.episode_store import EpisodeStore
    from robot_rl.sim.experts import make_expert

    env = sim.make("lift", num_envs=2, cameras=CAMS, image_size=[32, 32], task_config={"episode_steps": 10})
    frames = []
    expert = make_expert(env)

    class Recording:
        def act(self, obs):
            frames.append(_images(obs))
            return expert.act(obs)

    with EpisodeStore.open(tmp_path / "s.zarr", mode="a") as store:
        collect(env, Recording(), store, episodes=2, seed=0)
    store = EpisodeStore.open(tmp_path / "s.zarr")
    assert store.keys["obs/images/front"].shape == (32, 32, 3) and store.keys["obs/images/front"].dtype == np.uint8
    for cam in CAMS:
        for i in range(2):  # episode i is env i's first episode: its frames, in step order
            want = np.stack([f[f"images/{cam}"][i] for f in frames[:10]])
            np.testing.assert_array_equal(store.episode(i).steps[f"obs/images/{cam}"], want)
    arr = zarr.open(tmp_path / "s.zarr", mode="r")["data/obs/images/front"]
    assert arr.chunks == (64, 32, 32, 3)  # many frames per chunk: consecutive frames compress together
    files = (tmp_path / "s.zarr/data/obs/images/front").rglob("*")
    on_disk = sum(p.stat().st_size for p in files if p.is_file() and p.name != "zarr.json")
    assert 0 < on_disk < arr.nbytes / 3
    env.close()


@pytest.mark.mjx
def test_mjx_images_match_mujoco_c_through_auto_reset():
    """Same seed and actions: MJX (copied to MuJoCo C and rendered there) and MuJoCo C give the same frames,
    visual randomization included, before and after the auto-reset at the time limit (lift: 80 steps)."""
    kw = dict(num_envs=N_ENVS, randomization={**DR, **VISUAL_DR}, cameras=CAMS, image_size=[32, 32])
    # The same physics settings as the session's mjx_env: the compiled step comes from the JAX cache once that env has
    # been compiled (by this worker or the other one; make test runs 2).
    mjx = sim.make("lift", backend="mjx", **kw)
    cpu = sim.make("lift", backend="mujoco", **kw)
    om, oc = mjx.reset(4), cpu.reset(4)
    assert mjx.image_shapes == cpu.image_shapes and set(om) == set(oc)
    assert mjx.instruction == cpu.instruction

    def close(a, b, what):
        for k in mjx.image_shapes:
            assert a[k].shape == b[k].shape and a[k].dtype == np.uint8
            diff = np.abs(a[k].astype(int) - b[k])
            assert diff.mean() < 1.0 and (diff > 40).mean() < 0.01, (what, k, diff.mean())

    close(om, oc, "reset")
    hold = np.tile(cpu.action_space.neutral, (N_ENVS, 1))
    for t in range(cpu.episode_steps):
        om, _, dm, im = mjx.step(hold)
        oc, _, dc, ic = cpu.step(hold)
    assert dm.all() and dc.all()
    close(om, oc, "first frame of the second episode")
    close(im["final_obs"], ic["final_obs"], "last frame of the first episode")
    assert mjx.instruction == cpu.instruction
    mjx.close()
    cpu.close()
