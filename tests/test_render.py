"""Offscreen rendering of env cameras (EGL on headless machines) and mp4 writing."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.video import read_mp4_frames, write_mp4


def test_each_env_renders_its_own_scene():
    env = sim.make("push", num_envs=2)
    env.reset(0)
    frames = env.render([0, 1], camera="overview", width=160, height=120)
    assert frames.shape == (2, 120, 160, 3) and frames.dtype == np.uint8
    assert frames.std() > 10, "a blank frame: nothing was drawn"
    # different cube and goal poses per env
    assert np.abs(frames[0].astype(int) - frames[1].astype(int)).mean() > 1.0
    # the frame follows the state: moving the arm changes it
    for _ in range(5):
        env.step(np.tile([[0.0, 0.0, 1.0, 1.0]], (2, 1)).astype(np.float32))
    after = env.render([0], camera="overview", width=160, height=120)
    assert np.abs(after[0].astype(int) - frames[0].astype(int)).mean() > 0.5
    env.close()


def test_unknown_camera_names_the_cameras():
    env = sim.make("lift", num_envs=1)
    env.reset(0)
    with pytest.raises(ValueError, match=r"unknown camera 'top'.*'front', 'overview', 'wrist'"):
        env.render([0], camera="top")
    env.close()


def test_mp4_round_trip_keeps_frame_count_and_content(tmp_path):
    frames = np.zeros((6, 64, 80, 3), np.uint8)
    frames[:, :, :40] = 200  # left half bright
    path = write_mp4(tmp_path / "v.mp4", frames, fps=20)
    back = read_mp4_frames(path)
    assert back.shape == frames.shape
    assert back[:, :, :30].mean() > 150 and back[:, :, 50:].mean() < 50
    assert not list(tmp_path.glob(".*.tmp")), "the temp file is renamed away"
