"""The residual policy: identical to its base at step 0, bounded correction, a BasePolicy checkpoint that loads
unchanged through load_policy and runs in the evaluation code of robot-rl-eval."""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies import load_policy
from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy
from robot_rl.policies.runner import PolicyRunner
from robot_rl.common.checkpoint import CheckpointError
from robot_rl.data.stats import KeyStats
from robot_rl.policies.residual import ResidualConfig, ResidualPolicy

SMALL = DiffusionConfig(dims=(16, 32), step_embed_dim=16, pred_horizon=8, action_horizon=4, inference_steps=4,
                        train_steps=20, jit=False)


@pytest.fixture(scope="module")
def lift_env():
    env = sim.make("lift", num_envs=3, threads=1, task_config={"episode_steps": 12})
    yield env
    env.close()


def _diffusion(env) -> DiffusionPolicy:
    rng = np.random.default_rng(0)
    stats = {}
    for k, d in {**{f"obs/{k}": d for k, d in env.obs_dims.items()}, "action": env.action_dim}.items():
        lo = rng.uniform(-2, 0, d)
        stats[k] = KeyStats(min=lo, max=lo + 2, mean=lo + 1, std=np.ones(d), count=10)
    torch.manual_seed(0)
    policy = DiffusionPolicy.from_stats(dict(task="lift", obs_dims=dict(env.obs_dims), action_dim=env.action_dim),
                                        SMALL, stats)
    with torch.no_grad():
        for p in policy.ema.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return policy


def _perturb(actor, seed=0):
    """Weights away from the zero-initialized last layer, so the residual is not zero."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in actor.net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
        actor.set_obs_stats(torch.randn(actor.obs_dim, generator=g), torch.rand(actor.obs_dim, generator=g) + 0.5)


def _rollout(env, policy, steps=30, seed=0) -> np.ndarray:
    """Actions of `policy` through PolicyRunner on the env, with episode resets (as robot-rl-eval runs it)."""
    runner = PolicyRunner(policy, env.num_envs)
    runner.reset()
    obs, out = env.reset(seed), []
    for _ in range(steps):
        a = runner.act(obs)
        out.append(a)
        obs, _, done, _ = env.step(a)
        if done.any():
            runner.reset(np.nonzero(done)[0])
    return np.stack(out)


def _feed(policy, observations, dones) -> np.ndarray:
    """Actions of `policy` through PolicyRunner on a fixed sequence of observations and episode ends."""
    runner = PolicyRunner(policy, len(dones[0]))
    runner.reset()
    out = []
    for obs, done in zip(observations, dones):
        out.append(runner.act(obs))
        if done.any():
            runner.reset(np.nonzero(done)[0])
    return np.stack(out)


def _recorded(env, steps=20, seed=0):
    """Observations and dones of a random-action rollout (12-step episodes: chunks get cut by resets)."""
    rng = np.random.default_rng(seed)
    obs, observations, dones = env.reset(seed), [], []
    for _ in range(steps):
        observations.append(obs)
        obs, _, done, _ = env.step(rng.uniform(-1, 1, (env.num_envs, env.action_dim)).astype(np.float32))
        dones.append(done)
    return observations, dones


def test_untrained_residual_policy_acts_exactly_as_its_base(lift_env):
    base = _diffusion(lift_env)
    base.generator.manual_seed(7)
    expected = _rollout(lift_env, base)  # 30 steps of 12-step episodes: chunks are cut by resets too
    residual = ResidualPolicy.build(base, ResidualConfig())
    assert residual.spec.action_horizon == 1 and residual.spec.obs_horizon == base.spec.obs_horizon
    base.generator.manual_seed(7)
    np.testing.assert_array_equal(_rollout(lift_env, residual), expected)


def test_residual_stays_within_its_scale_and_actions_within_the_range(lift_env):
    base = _diffusion(lift_env)
    residual = ResidualPolicy.build(base, ResidualConfig(scale=0.1))
    _perturb(residual.actor)
    observations, dones = _recorded(lift_env)
    base.generator.manual_seed(3)
    expected = _feed(base, observations, dones)
    base.generator.manual_seed(3)
    got = _feed(residual, observations, dones)
    diff = np.abs(got - expected)
    assert diff.max() <= 0.1 + 1e-6 and diff.max() > 0.01 and np.abs(got).max() <= 1.0


def test_residual_checkpoint_loads_unchanged_and_gives_identical_actions(lift_env, tmp_path):
    base = _diffusion(lift_env)
    policy = ResidualPolicy.build(base, ResidualConfig(scale=0.2, hidden=(32, 32)))
    _perturb(policy.actor)
    path = policy.save(tmp_path / "policy")
    loaded = load_policy(path)
    assert isinstance(loaded, ResidualPolicy) and loaded.kind == "residual" and loaded.spec == policy.spec
    assert isinstance(loaded.base, DiffusionPolicy)
    observations, dones = _recorded(lift_env, seed=1)
    base.generator.manual_seed(5)
    loaded.base.generator.manual_seed(5)
    np.testing.assert_allclose(_feed(loaded, observations, dones), _feed(policy, observations, dones), rtol=0,
                               atol=1e-6)

    from robot_rl.evaluation import evaluate_policy  # what robot-rl-eval runs on a loaded checkpoint

    metrics = evaluate_policy(lift_env, loaded, episodes=3, seed=0)
    assert metrics["episodes"] == 3 and 0.0 <= metrics["success_rate"] <= 1.0


def test_residual_without_a_base_adds_to_zero_and_round_trips(lift_env, tmp_path):
    policy = ResidualPolicy.build(None, ResidualConfig(scale=1.0, hidden=(16,)), env=lift_env)
    _perturb(policy.actor)
    obs = lift_env.reset(0)
    hist = {k: v[:, None] for k, v in obs.items()}
    a = policy.act(hist)
    loaded = load_policy(policy.save(tmp_path / "scratch"))
    assert loaded.base is None
    np.testing.assert_allclose(loaded.act(hist), a, atol=1e-6)
    assert np.abs(a).max() > 0.05


def test_residual_on_a_base_that_is_code_cannot_be_loaded_alone(lift_env, tmp_path):
    from robot_rl.policies.expert import ExpertPolicy

    path = ResidualPolicy.build(ExpertPolicy(lift_env), ResidualConfig()).save(tmp_path / "on_expert")
    with pytest.raises(CheckpointError, match="ExpertPolicy base"):
        load_policy(path)


def test_bad_residual_config_values_are_named():
    with pytest.raises(ValueError, match="residual.scale=0"):
        ResidualConfig(scale=0)
    with pytest.raises(ValueError, match=r"unknown rl.residual key\(s\) \['scal'\]"):
        from_mapping(ResidualConfig, {"scal": 0.1}, "rl.residual")


def test_a_base_and_residual_read_the_action_history_and_the_zero_residual_is_still_the_base():
    from robot_rl.policies.base import SpecMismatch

    env = sim.make("lift", num_envs=3, threads=1, action_history=2, task_config={"episode_steps": 12})
    try:
        base = _diffusion(env)
        assert base.spec.obs_dims["prev_actions"] == 2 * env.action_dim
        residual = ResidualPolicy.build(base, ResidualConfig())
        assert "prev_actions" in residual.obs_keys
        base.generator.manual_seed(7)
        expected = _rollout(env, base)
        base.generator.manual_seed(7)
        np.testing.assert_array_equal(_rollout(env, residual), expected)
        assert expected.shape == (30, 3, env.action_dim)
        with pytest.raises(SpecMismatch, match=r"'prev_actions'.*trained with env.action_history=2: set it"):
            base.spec.check_env(sim.make("lift", num_envs=1))
    finally:
        env.close()
