"""Residual RL with learned rewards: the Collector's shaped reward and terminations, config validation, demo
relabeling, and a reward model that does not fit the env."""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies.base import SpecMismatch
from robot_rl.reward import LearnedReward, RewardModel, RewardSpec
from robot_rl.reward.shaping import relabel_replay
from robot_rl.rl.replay import Replay
from robot_rl.policies.residual import ResidualConfig, ResidualPolicy
from robot_rl.rl.rollout import Collector
from robot_rl.rl.train import ResidualRLConfig, ResidualWorkspace

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def env():
    e = sim.make("lift", num_envs=3, task_config={"episode_steps": 12})
    yield e
    e.close()


def _model(env, seed=0) -> RewardModel:
    torch.manual_seed(seed)
    return RewardModel.build(RewardSpec(task="lift", obs_dims=dict(env.obs_dims)), hidden=(16,))


def _unflatten(x, keys, dims):
    out, i = {}, 0
    for k in keys:
        out[k] = x[:, i:i + dims[k]]
        i += dims[k]
    return out


def test_collector_with_learned_reward_writes_classifier_success_plus_shaping(env):
    model = _model(env)
    obs0 = env.reset(0)
    # a threshold at which the (untrained) classifier fires on some states, so both cases occur
    model.threshold = float(np.quantile(model.success_prob(obs0), 0.3))
    gamma, lam = 0.95, 0.5
    policy = ResidualPolicy.build(None, ResidualConfig(), env=env)
    replay = Replay(1000, env.num_envs, sum(env.obs_dims.values()), env.action_dim)
    col = Collector(env, policy, replay, reward="learned", explore_std=0.5, seed=0,
                    learned=LearnedReward(model, gamma, lam, success="classifier"),
                    classifier_success="every")  # every fire pays here (once / end: tests/test_reward_online.py)
    col.start(seed=0)
    env_done = []
    orig_step = env.step

    def spy(action):
        out = orig_step(action)
        env_done.append(out[2].copy())
        return out

    env.step = spy
    try:
        for _ in range(30):
            col.step()
    finally:
        del env.step
    d, keys, dims = replay.data, policy.obs_keys, dict(env.obs_dims)
    hits = 0
    for t in range(30):
        obs, nxt = _unflatten(d["obs"][t], keys, dims), _unflatten(d["next_obs"][t], keys, dims)
        hit = model.success(nxt)
        hits += hit.sum()
        phi, phi2 = model.progress(obs), model.progress(nxt)
        expected = hit + lam * (gamma * np.where(hit, 1.0, phi2) - phi)
        assert np.allclose(d["reward"][t], expected, atol=1e-5), t
        assert np.allclose(d["potential"][t], phi, atol=1e-6), t  # Phi(s): the learner's TD-target clip reads it
        # Phi(s') as the shaping counts it: 1 at a (classifier) success
        assert np.allclose(d["next_potential"][t], np.where(hit, 1.0, phi2), atol=1e-6), t
        assert d["terminated"][t].tolist() == hit.tolist(), t
        assert d["truncated"][t].tolist() == (env_done[t] & ~hit).tolist(), t
    assert 0 < hits < 90  # both cases were exercised
    # n-step windows: the shaping part of a return is lambda * potential_gain (the terms telescope, Phi = 1 at a
    # success), so ret - lambda * potential_gain is the classifier's sparse n-step return; the learner rescales by it
    rows, envs = np.repeat(np.arange(28), env.num_envs), np.tile(np.arange(env.num_envs), 28)
    out = replay.nstep(rows, envs, 3, gamma)
    sparse = [sum(gamma ** i * float(d["terminated"][r + i, e]) for i in range(k))
              for r, e, k in zip(rows, envs, out["steps"])]
    np.testing.assert_allclose(out["ret"] - lam * out["potential_gain"], sparse, atol=1e-5)
    assert (out["steps"] < 3).any() and (np.abs(out["potential_gain"]) > 1e-3).all()
    assert any(e.any() for e in env_done)  # and env episode ends (12 steps) without classifier success


def test_collector_with_env_success_and_shaping_keeps_env_terminations(env):
    model = _model(env, seed=1)
    policy = ResidualPolicy.build(None, ResidualConfig(), env=env)
    replay = Replay(1000, env.num_envs, sum(env.obs_dims.values()), env.action_dim)
    col = Collector(env, policy, replay, reward="success", learned=LearnedReward(model, 0.9, 1.0, success="env"))
    col.start(seed=3)
    for _ in range(14):
        col.step()
    d, keys, dims = replay.data, policy.obs_keys, dict(env.obs_dims)
    for t in range(14):
        phi = model.progress(_unflatten(d["obs"][t], keys, dims))
        phi2 = model.progress(_unflatten(d["next_obs"][t], keys, dims))
        # no success from a still arm in 14 steps: the reward is the potential term alone
        assert np.allclose(d["reward"][t], 0.9 * np.where(d["terminated"][t], 1.0, phi2) - phi, atol=1e-5)
    assert d["truncated"][:14].any() and not d["terminated"][:14].any()


def test_collector_refuses_learned_reward_without_a_model(env):
    policy = ResidualPolicy.build(None, ResidualConfig(), env=env)
    replay = Replay(100, env.num_envs, sum(env.obs_dims.values()), env.action_dim)
    with pytest.raises(ValueError, match="reward='learned' needs"):
        Collector(env, policy, replay, reward="learned")


def test_rl_config_validates_reward_fields_and_widens_the_target_clip():
    with pytest.raises(ValueError, match="reward=learned needs reward_model=PATH"):
        ResidualRLConfig(reward="learned")
    with pytest.raises(ValueError, match="reward=env is already dense"):
        ResidualRLConfig(reward="env", reward_model="x")
    with pytest.raises(ValueError, match="shaping=-1"):
        ResidualRLConfig(reward="learned", reward_model="x", shaping=-1)
    cfg = from_mapping(ResidualRLConfig, {"reward": "learned", "reward_model": "x", "shaping": 0.5})
    assert cfg.learner.reward_bounds == (0.0, 1.0) and cfg.learner.potential_bound == 0.5
    assert ResidualRLConfig(reward="learned", reward_model="x", shaping=0.0).learner.potential_bound == 0.0


def test_workspace_refuses_a_reward_model_of_another_task(tmp_path):
    push = sim.make("push", num_envs=1)
    try:
        model = RewardModel.build(RewardSpec(task="lift", obs_dims={"proprio": 20, "object": 11}), hidden=(8,))
        model.save(tmp_path / "rm" / "reward_model")
        cfg = ResidualRLConfig(reward="learned", reward_model=str(tmp_path / "rm"), learning_starts=1,
                               replay_capacity=100)
        with pytest.raises(SpecMismatch, match=r"task: reward model 'lift', env 'push'.*'object'"):
            ResidualWorkspace(tmp_path / "run", cfg, push, None)
    finally:
        push.close()


def test_demo_transitions_are_relabeled_with_the_learned_reward(env):
    model = _model(env, seed=2)
    keys, dims = tuple(sorted(env.obs_dims)), dict(env.obs_dims)
    rng = np.random.default_rng(0)
    obs_dim = sum(dims.values())
    demos = Replay(20, 1, obs_dim, env.action_dim)
    for t in range(20):
        o, n = rng.normal(size=(1, obs_dim)).astype(np.float32), rng.normal(size=(1, obs_dim)).astype(np.float32)
        demos.add(obs=o, base_action=np.zeros((1, env.action_dim)), action=np.zeros((1, env.action_dim)),
                  reward=np.array([float(t == 9)]), next_obs=n, next_base_action=np.zeros((1, env.action_dim)),
                  terminated=np.array([t == 9]), truncated=np.array([t == 19]))
    model.threshold = float(np.median(model.success_prob(_unflatten(demos.data["next_obs"][:, 0], keys, dims))))
    reward = LearnedReward(model, 0.9, 1.0)
    relabel_replay(demos, reward, keys, dims)
    obs, nxt = _unflatten(demos.data["obs"][:, 0], keys, dims), _unflatten(demos.data["next_obs"][:, 0], keys, dims)
    hit = model.success(nxt)
    expected = hit + (0.9 * np.where(hit, 1.0, model.progress(nxt)) - model.progress(obs))
    assert np.allclose(demos.data["reward"][:, 0], expected, atol=1e-5)
    assert np.allclose(demos.data["potential"][:, 0], model.progress(obs), atol=1e-6)
    assert demos.data["terminated"][:, 0].tolist() == hit.tolist()
    ended = np.zeros(20, bool)
    ended[[9, 19]] = True
    assert demos.data["truncated"][:, 0].tolist() == (ended & ~hit).tolist()


def test_shaping_weight_decays_linearly_over_training_and_is_logged(env, tmp_path):
    from robot_rl.rl.learner import LearnerConfig
    from robot_rl.common.run_log import RunLog

    model = _model(env)
    model.threshold = float(np.median(model.success_prob(env.reset(0))))
    model.save(tmp_path / "rm" / "reward_model")
    cfg = ResidualRLConfig(
        env_steps=90, learning_starts=15, utd=0.25, reward="learned", reward_model=str(tmp_path / "rm"), shaping=0.6,
        shaping_decay_steps=60, eval_every=0, final_eval=False, log_every=15, ckpt_every=1000,
        residual=ResidualConfig(hidden=(16,)),
        learner=LearnerConfig(num_critics=2, critic_hidden=(16,), batch_size=8, critic_warmup=2))
    ws = ResidualWorkspace(tmp_path / "run", cfg, env, None)
    log = RunLog(ws.run_dir)
    ws.run(log)
    points = dict(log.history["train/shaping"])  # env step -> lambda the targets used
    steps = sorted(points)
    assert steps[0] <= 30 and steps[-1] == 90
    for s in steps:  # lambda_0 (1 - step / 60), 0 from step 60 on (logged after the step's updates)
        assert points[s] == pytest.approx(0.6 * max(0.0, 1.0 - s / 60), abs=1e-6), s
    assert ws.learner.shaping == 0.0 and ws.learner.cfg.potential_bound == 0.6  # rewards stay labeled at 0.6
