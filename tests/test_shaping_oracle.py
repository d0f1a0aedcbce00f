"""experiments/shaping_oracle.py: lift's progress computed from observations equals the env's ground truth."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from robot_rl import sim
from robot_rl.sim.experts import make_expert

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("shaping_oracle", ROOT / "experiments" / "shaping_oracle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lift_progress_from_observations_is_the_envs_progress():
    lift_progress = _script().lift_progress
    env = sim.make("lift", num_envs=4, threads=1)
    try:
        expert = make_expert(env, noise=0.3, seed=0)
        obs = env.reset(0)
        seen = []
        for _ in range(120):  # more than one 80-step episode: reach, grasp, lift, success and resets
            obs, _, done, info = env.step(expert.act(obs))
            reached = {k: np.where(done[:, None], info["final_obs"][k], obs[k]) for k in obs}
            np.testing.assert_allclose(lift_progress(reached), info["progress"], atol=1e-5)
            seen.append(np.asarray(info["progress"]))
        seen = np.concatenate(seen)
        assert (seen == 1.0).any() and ((seen > 0.5) & (seen < 1.0)).any()  # successes and grasped lifts occurred
    finally:
        env.close()
