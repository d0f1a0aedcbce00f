"""BasePolicy interface: checkpoints (round trip, bad files, wrong task), the runner, the diffusion sampler."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from robot_rl import sim
from robot_rl.policies import BasePolicy, PolicySpec, SpecMismatch, load_policy
from robot_rl.policies.diffusion.policy import DiffusionConfig, DiffusionPolicy, ddim_coefficients
from robot_rl.policies.runner import PolicyRunner
from robot_rl.common.checkpoint import CheckpointError
from robot_rl.data.stats import KeyStats

SMALL = DiffusionConfig(dims=(16, 32), step_embed_dim=16, pred_horizon=8, action_horizon=4, inference_steps=4,
                        train_steps=20)


def _stats(dims: dict[str, int]) -> dict[str, KeyStats]:
    rng = np.random.default_rng(0)
    out = {}
    for k, d in dims.items():
        lo = rng.uniform(-2, 0, d)
        out[k] = KeyStats(min=lo, max=lo + rng.uniform(0.5, 2, d), mean=lo + 0.5, std=np.full(d, 0.3), count=100)
    return out


def _policy(env, cfg=SMALL) -> DiffusionPolicy:
    spec = dict(task=env.cfg.task, obs_dims=dict(env.obs_dims), action_dim=env.action_dim)
    stats = _stats({**{f"obs/{k}": d for k, d in env.obs_dims.items()}, "action": env.action_dim})
    return DiffusionPolicy.from_stats(spec, cfg, stats)


def _history(env, batch=3, horizon=2, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=(batch, horizon, d)).astype(np.float32) for k, d in env.obs_dims.items()}


@pytest.fixture(scope="module")
def lift_env():
    env = sim.make("lift", num_envs=2)
    yield env
    env.close()


def test_saved_and_loaded_policy_gives_identical_actions(lift_env, tmp_path):
    policy = _policy(lift_env)
    with torch.no_grad():  # weights away from the zero-ish init so the check means something
        for p in policy.ema.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    path = policy.save(tmp_path / "ckpt")
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors"]
    loaded = load_policy(path)
    assert isinstance(loaded, DiffusionPolicy) and loaded.spec == policy.spec
    obs = _history(lift_env)
    policy.generator.manual_seed(3)
    loaded.generator.manual_seed(3)
    a, b = policy.act(obs), loaded.act(obs)
    assert a.shape == (3, SMALL.action_horizon, lift_env.action_dim) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert np.abs(a).max() <= 1.0


def test_saving_over_a_checkpoint_replaces_it_whole(lift_env, tmp_path):
    policy = _policy(lift_env)
    path = policy.save(tmp_path / "ckpt")
    first = (path / "model.safetensors").read_bytes()
    with torch.no_grad():
        next(policy.ema.model.parameters()).add_(1.0)
    policy.save(path)
    assert (path / "model.safetensors").read_bytes() != first
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"], "no temp or old directories are left behind"


def test_missing_checkpoint_files_are_named(lift_env, tmp_path):
    with pytest.raises(CheckpointError, match=f"{tmp_path / 'nope'} does not exist"):
        load_policy(tmp_path / "nope")
    path = _policy(lift_env).save(tmp_path / "ckpt")
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="missing model.safetensors"):
        load_policy(path)


def test_corrupted_checkpoint_files_are_named(lift_env, tmp_path):
    path = _policy(lift_env).save(tmp_path / "a")
    (path / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError, match=r"model.safetensors is corrupted"):
        load_policy(path)
    path = _policy(lift_env).save(tmp_path / "b")
    (path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config.json is corrupted"):
        load_policy(path)
    path = _policy(lift_env).save(tmp_path / "c")
    cfg = json.loads((path / "config.json").read_text())
    cfg["kind"] = "transformer"
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="names no known policy kind"):
        load_policy(path)


def test_checkpoint_for_another_task_is_refused_naming_the_mismatch(lift_env):
    policy = _policy(lift_env)
    push = sim.make("push", num_envs=1)
    with pytest.raises(SpecMismatch, match=r"task: policy 'lift', env 'push'.*observation 'object': policy expects dim 11, env gives 12"):
        policy.spec.check_env(push)
    policy.spec.check_env(lift_env)  # and the right env passes
    push.close()


def test_dataset_lacking_policy_keys_is_named(lift_env):
    spec = dict(task="lift", obs_dims=dict(lift_env.obs_dims), action_dim=lift_env.action_dim)
    stats = _stats({"obs/proprio": 20, "action": 4})
    with pytest.raises(SpecMismatch, match=r"lacks key\(s\) the policy needs: \['obs/object'\]"):
        DiffusionPolicy.from_stats(spec, SMALL, stats)


def test_obs_history_of_the_wrong_shape_is_named(lift_env):
    obs = _history(lift_env, horizon=3)
    with pytest.raises(ValueError, match=r"obs_history\['object'\] has shape \(3, 3, 11\), expected \[B, 2, 11\]"):
        _policy(lift_env).act(obs)


@pytest.mark.parametrize("steps", [4, 10])
def test_inlined_ddim_update_equals_diffusers_step(steps):
    from diffusers import DDIMScheduler

    s = DDIMScheduler(num_train_timesteps=100, beta_schedule="squaredcos_cap_v2", clip_sample=True,
                      prediction_type="epsilon", set_alpha_to_one=True)
    s.set_timesteps(steps)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 3, generator=g)
    y = x.clone()
    for (t, c_x, c_eps, c_prev, c_dir), tt in zip(ddim_coefficients(s, "cpu"), s.timesteps):
        eps = torch.randn(2, 8, 3, generator=g)
        x = s.step(eps, tt, x).prev_sample
        y = c_prev * (c_x * y - c_eps * eps).clamp(-1, 1) + c_dir * eps
    torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_temperature_scales_the_sampling_noise_and_zero_is_deterministic(lift_env):
    """The initial DDIM noise is scaled by policy.temperature: at 0 every call gives the same chunk (the generator
    moves on); at 1 the calls differ; the saved config carries it; out of [0, 1] is refused."""
    hist = _history(lift_env)
    cold = _policy(lift_env, dataclasses.replace(SMALL, temperature=0.0))
    assert np.array_equal(cold.act(hist), cold.act(hist))
    warm = _policy(lift_env, SMALL)
    assert not np.array_equal(warm.act(hist), warm.act(hist))
    assert cold.config()["temperature"] == 0.0
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match=r"policy.temperature=.* must be in \[0, 1\]"):
            dataclasses.replace(SMALL, temperature=bad)


@pytest.mark.parametrize("stride", [1, 2])
def test_temporal_conv_equals_torch_conv1d(stride):
    from robot_rl.policies.diffusion.unet import TemporalConv

    conv = TemporalConv(6, 10, 5 if stride == 1 else 3, stride=stride)
    x = torch.randn(3, 16, 6)  # channels-last [B, T, C]
    k = conv.kernel
    w = conv.weight.view(6, k, 10).permute(2, 0, 1)  # matmul layout -> torch's [out, in, k]
    ref = torch.nn.functional.conv1d(x.transpose(1, 2), w, conv.bias, stride=stride, padding=(k - 1) // 2)
    torch.testing.assert_close(conv(x), ref.transpose(1, 2))


def test_jit_inference_gives_the_eager_actions_and_follows_weight_updates(lift_env):
    eager = _policy(lift_env, dataclasses.replace(SMALL, jit=False))
    jit = _policy(lift_env, dataclasses.replace(SMALL, jit=True))
    jit.ema.model.load_state_dict(eager.ema.model.state_dict())
    obs = _history(lift_env)
    for step in range(2):
        eager.generator.manual_seed(5)
        jit.generator.manual_seed(5)
        np.testing.assert_allclose(jit.act(obs), eager.act(obs), atol=1e-5)
        with torch.no_grad():  # an EMA-like in-place update must reach the traced graph
            for a, b in zip(eager.ema.model.parameters(), jit.ema.model.parameters()):
                a.add_(0.1)
                b.add_(0.1)


class _Counting(BasePolicy):
    """Returns chunks whose entries encode (call number, position in chunk); records what it was asked."""

    def __init__(self, obs_dims, horizon=3):
        self.spec = PolicySpec(task="t", obs_dims=obs_dims, action_dim=2, obs_horizon=2, action_horizon=horizon)
        self.calls, self.asked, self.resets = 0, [], []

    def reset(self, env_ids=None):
        self.resets.append(None if env_ids is None else list(env_ids))

    def act(self, obs_history):
        self.calls += 1
        b = len(next(iter(obs_history.values())))
        self.asked.append({k: v.copy() for k, v in obs_history.items()})
        h = self.spec.action_horizon
        chunk = np.zeros((b, h, 2), np.float32)
        chunk[..., 0] = self.calls
        chunk[..., 1] = np.arange(h)
        return chunk


def test_runner_executes_chunks_open_loop_and_queries_only_envs_that_ran_out():
    pol = _Counting({"x": 1}, horizon=3)
    run = PolicyRunner(pol, num_envs=2)
    run.reset()
    obs = lambda v: {"x": np.array([[v], [10 + v]], np.float32)}  # noqa: E731
    a0, a1 = run.act(obs(0)), run.act(obs(1))
    assert pol.calls == 1 and (a0[:, 1] == 0).all() and (a1[:, 1] == 1).all()
    # first call: history filled with the first observation (edge padding)
    np.testing.assert_array_equal(pol.asked[0]["x"][:, :, 0], [[0, 0], [10, 10]])
    run.reset([1])  # env 1 starts a new episode: only it is re-queried, with a fresh history
    a2 = run.act(obs(2))
    assert pol.calls == 2 and pol.resets[-1] == [1]
    np.testing.assert_array_equal(pol.asked[1]["x"][:, :, 0], [[12, 12]])
    assert tuple(a2[0]) == (1, 2) and tuple(a2[1]) == (2, 0)  # env 0 still runs its first chunk
    a3 = run.act(obs(3))  # env 0's chunk ran out: it alone is queried
    np.testing.assert_array_equal(pol.asked[2]["x"][:, :, 0], [[2, 3]])
    assert tuple(a3[0]) == (3, 0) and tuple(a3[1]) == (2, 1)


def test_expert_policy_through_the_runner_solves_lift():
    from robot_rl.policies.expert import ExpertPolicy
    from robot_rl.sim.experts import run_episodes

    env = sim.make("lift", num_envs=4)
    pol = ExpertPolicy(env)
    result = run_episodes(env, PolicyRunner(pol, env.num_envs), episodes=8, seed=0)
    assert result["success_rate"] == 1.0
    env.close()
