"""TD3 learner with a critic ensemble: batched heads, targets, critic warm-up, non-finite losses, config checks."""

from __future__ import annotations

from robot_rl.common.config import from_mapping
import dataclasses

import numpy as np
import pytest
import torch

from robot_rl.rl.critic import EnsembleCritic
from robot_rl.rl.learner import Learner, LearnerConfig
from robot_rl.policies.residual import ResidualActor, ResidualConfig

OBS, ACT = 6, 2


def _batch(b=32, seed=0, **over):
    rng = np.random.default_rng(seed)
    out = {
        "obs": rng.normal(size=(b, OBS)), "base_action": rng.uniform(-1, 1, (b, ACT)),
        "action": rng.uniform(-1, 1, (b, ACT)), "ret": rng.random(b), "discount": np.full(b, 0.97),
        "next_obs": rng.normal(size=(b, OBS)), "next_base_action": rng.uniform(-1, 1, (b, ACT)),
    }
    out.update(over)
    return {k: np.asarray(v, np.float32) for k, v in out.items()}


def _learner(**cfg) -> Learner:
    torch.manual_seed(0)
    actor = ResidualActor(OBS, ACT, ResidualConfig(hidden=(32, 32)))
    return Learner(actor, LearnerConfig(**{"num_critics": 4, "critic_hidden": (32, 32), **cfg}))


def test_ensemble_batched_pass_equals_a_loop_over_heads():
    torch.manual_seed(0)
    critic = EnsembleCritic(in_dim=10, num_heads=5, hidden=(16, 8))
    with torch.no_grad():  # move every parameter off its init (the output layer starts at zero)
        for p in critic.parameters():
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(7, 10)
    batched = critic(x)
    assert batched.shape == (5, 7)
    looped = torch.stack([critic.head(i)(x).squeeze(-1) for i in range(5)])
    torch.testing.assert_close(batched, looped, rtol=1e-5, atol=1e-5)
    heads = torch.tensor([3, 1])
    torch.testing.assert_close(critic(x, heads), looped[heads], rtol=1e-5, atol=1e-5)


def test_critic_heads_start_at_zero_and_differ_after_training():
    learner = _learner(critic_warmup=100)
    x = torch.randn(16, OBS + 2 * ACT)
    assert torch.count_nonzero(learner.critic(x)) == 0
    for i in range(5):
        learner.update(_batch(seed=i))
    q = learner.critic(x).detach()
    assert (q.std(0) > 0).all(), "independently initialized heads learn different functions"


def test_terminal_targets_are_the_return_alone():
    learner = _learner(critic_warmup=10_000, critic_lr=1e-2)
    batch = _batch(b=64, discount=np.zeros(64), ret=np.full(64, 0.7))
    for _ in range(300):
        learner.update(batch)
    q = learner.critic(torch.cat([learner.actor.normalize(torch.as_tensor(batch["obs"])),
                                  torch.as_tensor(batch["base_action"]), torch.as_tensor(batch["action"])], 1))
    torch.testing.assert_close(q.detach(), torch.full_like(q, 0.7), atol=0.05, rtol=0)


@pytest.mark.parametrize("bounds, lam, phi, expected", [
    ((0.0, 1.0), 0.0, None, 0.0),
    ((0.0, 1.0), 0.3, None, -0.3),        # shaping moves a return by at most lambda, not lambda / (1 - gamma)
    ((0.0, 1.0), 0.3, np.nan, -0.3),      # a row whose Phi(s) is unknown: the bound for any Phi
    ((0.0, 1.0), 0.3, 0.5, -0.15),        # Phi(s) known: unshaped values >= 0 are shaped ones >= -lambda Phi(s)
    (None, 0.0, None, -0.97 * 5.0)])
def test_td_targets_are_clipped_to_the_returns_the_reward_range_allows(bounds, lam, phi, expected):
    learner = _learner(critic_warmup=10_000, critic_lr=1e-2, tau=1e-6, reward_bounds=bounds, potential_bound=lam)
    with torch.no_grad():  # a target critic that is far too pessimistic, held fixed by the tiny tau
        learner.critic_target.biases[-1].fill_(-5.0)
    batch = _batch(b=64, ret=np.zeros(64), **({} if phi is None else {"potential": np.full(64, phi)}))
    for _ in range(300):
        learner.update(batch)
    q = learner.critic(torch.cat([learner.actor.normalize(torch.as_tensor(batch["obs"])),
                                  torch.as_tensor(batch["base_action"]), torch.as_tensor(batch["action"])], 1))
    assert float(q.detach().mean()) == pytest.approx(expected, abs=0.1)


def test_actor_stays_at_the_base_during_critic_warmup_then_learns():
    learner = _learner(critic_warmup=6, policy_delay=2)
    before = [p.detach().clone() for p in learner.actor.parameters()]
    metrics = [learner.update(_batch(seed=i)) for i in range(6)]
    assert all("actor_loss" not in m for m in metrics)
    assert all(torch.equal(a, b) for a, b in zip(before, learner.actor.parameters()))
    metrics = [learner.update(_batch(seed=10 + i)) for i in range(4)]
    assert ["actor_loss" in m for m in metrics] == [False, True, False, True]  # updates 7..10, every 2nd
    assert not all(torch.equal(a, b) for a, b in zip(before, learner.actor.parameters()))


def test_target_networks_track_the_online_networks_by_polyak_averaging():
    learner = _learner(tau=0.5, critic_warmup=0, policy_delay=1)
    online0 = [p.detach().clone() for p in learner.critic.parameters()]
    learner.update(_batch())
    for t, o0, o1 in zip(learner.critic_target.parameters(), online0, learner.critic.parameters()):
        torch.testing.assert_close(t, 0.5 * o0 + 0.5 * o1.detach())


def test_actor_update_leaves_critic_gradients_untouched():
    learner = _learner(critic_warmup=0, policy_delay=1)
    learner.update(_batch())
    # after the actor step the critic's .grad still holds the critic loss gradient of this update, not actor's
    grads = [p.grad.clone() for p in learner.critic.parameters()]
    learner.critic_opt.zero_grad(set_to_none=False)
    b = {k: torch.as_tensor(v) for k, v in _batch(seed=5).items()}
    res = learner.actor(learner.actor.normalize(b["obs"]), b["base_action"])
    loss = -learner.critic(torch.cat([learner.actor.normalize(b["obs"]), b["base_action"],
                                      (b["base_action"] + res).clamp(-1, 1)], 1)).mean()
    loss.backward(inputs=list(learner.actor.parameters()))
    assert all(not p.grad.any() for p in learner.critic.parameters()) and grads


def test_non_finite_loss_raises_naming_the_loss_and_update():
    learner = _learner()
    learner.update(_batch())
    with pytest.raises(FloatingPointError, match="critic loss is nan at update 2"):
        learner.update(_batch(ret=np.full(32, np.nan)))


def test_learner_state_round_trip_through_a_checkpoint_continues_identically(tmp_path):
    from robot_rl.common import checkpoint

    a = _learner(critic_warmup=0)
    for i in range(3):
        a.update(_batch(seed=i))
    tensors = {}
    tree = checkpoint.flatten(a.state(), "learner", tensors)
    checkpoint.save(tmp_path / "ckpt", tensors, {"learner": tree})
    tensors, cfg = checkpoint.load(tmp_path / "ckpt")
    b = _learner(critic_warmup=0)
    b.actor.load_state_dict(a.actor.state_dict())
    b.load_state(checkpoint.unflatten(cfg["learner"], tensors))
    ma, mb = a.update(_batch(seed=9)), b.update(_batch(seed=9))
    assert ma == mb


@pytest.mark.parametrize("key, value, needle", [
    ("num_critics", 1, "learner.num_critics=1 must be >= 2"),
    ("gamma", 1.0, "learner.gamma=1.0 must be in [0, 1)"),
    ("tau", 0.0, "learner.tau=0.0"),
    ("grad_clip", -1.0, "learner.grad_clip=-1.0"),
])
def test_bad_learner_config_values_are_named(key, value, needle):
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        LearnerConfig(**{key: value})


def test_unknown_learner_keys_are_named():
    with pytest.raises(ValueError, match=r"unknown rl.learner key\(s\) \['gama'\]"):
        from_mapping(LearnerConfig, {"gama": 0.9}, "rl.learner")
    assert from_mapping(LearnerConfig, {"critic_hidden": [64, 64]}) == dataclasses.replace(LearnerConfig(),
                                                                                      critic_hidden=(64, 64))


def test_critics_read_the_potential_when_shaping_is_on():
    # shaped values carry -lambda Phi(s): with Phi(s) as an input the critic fits it even where the observation
    # alone does not tell it (here Phi is drawn independently of the observation, fresh in every batch)
    def batch(seed):
        phi = np.random.default_rng(seed + 1000).random(64)
        return _batch(b=64, seed=seed, discount=np.zeros(64), ret=-0.5 * phi, potential=phi)

    errors = {}
    for reads in (False, True):
        learner = _learner(critic_warmup=10_000, critic_lr=3e-3, critic_potential=reads, potential_bound=0.5)
        for i in range(300):
            learner.update(batch(i))
        b = {k: torch.as_tensor(v) for k, v in batch(10_000).items()}  # held out
        x = learner._critic_in(learner.actor.normalize(b["obs"]), b["base_action"], b["action"], b["potential"])
        errors[reads] = float((learner.critic(x).detach() - b["ret"]).abs().mean())
    assert errors[True] < 0.03 and errors[False] > 0.08, errors  # 0.125: the mean error of predicting the mean


def test_a_lowered_shaping_weight_gives_the_targets_of_rewards_labeled_with_it():
    """Replay rewards carry the shaping weight they were labeled with (lambda_0); with Learner.shaping = lambda the
    TD targets are those of the same transitions labeled at lambda (rl.shaping_decay_steps needs no relabeling)."""
    gamma, b = 0.99, 64
    rng = np.random.default_rng(3)
    sparse, k = rng.random(b), rng.integers(1, 4, b)
    phi, phi_next = rng.random(b), rng.random(b)
    gain = gamma ** k * phi_next - phi

    def targets(labeled, lam):
        learner = _learner(gamma=gamma, potential_bound=labeled, critic_potential=True)
        learner.shaping = lam
        with torch.no_grad():  # a target critic that is not zero, the same in every learner (same seed)
            learner.critic_target.biases[-1].fill_(0.4)
        batch = _batch(b=b, ret=sparse + labeled * gain, potential=phi, next_potential=phi_next, potential_gain=gain,
                       discount=gamma ** k)
        return learner.td_target({k: torch.as_tensor(v) for k, v in batch.items()})

    at_01 = targets(0.1, 0.1)
    torch.testing.assert_close(targets(0.5, 0.1), at_01)
    assert not torch.allclose(targets(0.5, 0.5), at_01, atol=1e-3)  # the weight does move the targets
    torch.testing.assert_close(targets(0.5, 0.0), targets(0.0, 0.0))  # decayed to 0: the unshaped targets


def test_a_pessimistic_actor_maximizes_the_heads_mean_minus_their_spread():
    """actor_pessimism k: the actor loss is -(mean - k std) over the heads (+ the L2 term), the same batch and
    weights give the mean's loss at k = 0 (critic_lr ~0: the critic step before the actor's leaves the heads as they were)."""
    losses = {}
    for k in (0.0, 2.0):
        lrn = _learner(critic_warmup=0, policy_delay=1, actor_pessimism=k, actor_l2=0.0, critic_lr=1e-12)
        with torch.no_grad():
            for p in lrn.critic.parameters():
                p.add_(0.1 * torch.randn_like(p))  # heads that disagree
        b = {kk: torch.as_tensor(v) for kk, v in _batch().items()}
        obs_n = lrn.actor.normalize(b["obs"])
        with torch.no_grad():
            action = (b["base_action"] + lrn.actor(obs_n, b["base_action"])).clamp(-1, 1)
            q = lrn.critic(lrn._critic_in(obs_n, b["base_action"], action))
        losses[k] = (lrn.update(_batch())["actor_loss"], float(-(q.mean(0) - k * q.std(0)).mean()))
    assert losses[0.0][0] == pytest.approx(losses[0.0][1], rel=1e-5)
    assert losses[2.0][0] == pytest.approx(losses[2.0][1], rel=1e-5) and losses[2.0][0] > losses[0.0][0]
