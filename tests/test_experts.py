"""Scripted experts: the noiseless expert solves each task; the noise knob degrades it."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import sim
from robot_rl.sim.experts import make_expert, run_episodes


@pytest.mark.mujoco_compat
@pytest.mark.parametrize("task", sorted(sim.TASKS))
def test_noiseless_expert_succeeds_in_95_percent_of_50_episodes(task):
    env = sim.make(task, backend="mujoco", num_envs=25)
    result = run_episodes(env, make_expert(env, noise=0.0), episodes=50, seed=123)
    assert result["episodes"] == 50
    assert result["success_rate"] >= 0.95, result


def _sim2real(task: str) -> dict:
    """The randomization=sim2real preset's ranges (configs/randomization/sim2real.yaml); peg_insert keeps its size."""
    import yaml

    from tests.conftest import ROOT

    r = yaml.safe_load((ROOT / "configs" / "randomization" / "sim2real.yaml").read_text())
    r.pop("defaults")
    return dict(r, object_size=[1.0, 1.0]) if task == "peg_insert" else r


# push is left out: its expert already coped with the preset (1.00 over 100 episodes before this test existed).
@pytest.mark.parametrize("task", ["lift", "color_lift", "peg_insert"])
def test_expert_succeeds_under_the_sim2real_preset(task):
    """5 mm of noise on every observation and 0-2 ticks of action latency, as a robot has (the experts that read
    raw observations and switched phase on one reading: 0 to 1 success of these 16 episodes)."""
    env = sim.make(task, backend="mujoco", num_envs=8, randomization=_sim2real(task))
    result = run_episodes(env, make_expert(env, noise=0.0), episodes=16, seed=0)
    assert result["success_rate"] >= 0.75, result


def test_expert_noise_perturbs_actions_and_is_seeded():
    env = sim.make("lift", num_envs=8)
    obs = env.reset(0)
    clean = make_expert(env, noise=0.0).act(obs)
    a = make_expert(env, noise=0.3, seed=1).act(obs)
    b = make_expert(env, noise=0.3, seed=1).act(obs)
    np.testing.assert_array_equal(a, b)
    assert 0.1 < np.abs(a - clean).mean() < 0.5
    assert (np.abs(a) <= 1).all()


@pytest.mark.parametrize("task", ["lift", "peg_insert"])
def test_expert_in_a_joint_pos_env_gives_the_same_motion_as_absolute_joint_targets(task):
    """The joint targets the env's IK step makes of the expert's ee_delta moves: the same trajectory (demonstrations
    for joint-space policies); the expert cannot plan for a batch of another size (its IK step reads the env)."""
    traces = {}
    for space in ("ee_delta", "joint_pos"):
        env = sim.make(task, num_envs=3, action_space=space)
        expert, obs, trace = make_expert(env, noise=0.1, seed=0), env.reset(0), []
        for _ in range(40):
            a = expert.act(obs)
            assert a.shape == (3, env.action_dim) and (np.abs(a) <= 1).all()
            obs, *_ = env.step(a)
            trace.append(obs["proprio"])
        traces[space] = np.array(trace)
    np.testing.assert_allclose(traces["joint_pos"], traces["ee_delta"], atol=1e-5)
    with pytest.raises(ValueError, match="its env's own 3 observations"):
        expert.act({k: v[:1] for k, v in obs.items()})


def test_run_episodes_counts_exactly_the_requested_episodes():
    env = sim.make("lift", num_envs=4, task_config={"episode_steps": 5})
    hold = type("Hold", (), {"act": lambda self, obs: np.tile(env.action_space.neutral, (4, 1))})()
    result = run_episodes(env, hold, episodes=6, seed=0)
    assert result["episodes"] == 6 and result["mean_length"] == 5 and result["success_rate"] == 0.0


def test_peg_expert_distrusts_single_readings_when_only_the_pegs_jitter():
    # On a robot the fixture's position may be known exactly while the peg is seen through a noisy camera (the deploy
    # dry run's driver puts the noise on the object pose only). The expert's trust in single readings must follow the
    # peg's jitter while nothing touches it, not only the fixture's: trusting them, it centred with full-gain
    # corrections on 5 mm noise and failed the dry run under latency (0/6 -> 7/10; docs/results/sim2real.md).
    env = sim.make("peg_insert", backend="mujoco", num_envs=2)
    try:
        obs = env.reset(0)
        assert (np.linalg.norm(env.task.field(obs, "object", "minus_ee"), axis=1) > 0.04).all()  # the hand starts away from the peg
        rng = np.random.default_rng(0)
        for noisy in (False, True):
            expert = make_expert(env)
            for _ in range(8):
                o = {k: v.copy() for k, v in obs.items()}
                if noisy:
                    o["object"][:, env.task.obs_fields()["object"]["pos"]] += rng.normal(0.0, 0.005, (2, 3)).astype(np.float32)  # the peg; the hole exact
                expert.act(o)
            trust = 1.0 - expert.cancel_noise
            assert (trust > 0.99).all() if not noisy else (trust < 0.05).all(), (noisy, trust)
    finally:
        env.close()
