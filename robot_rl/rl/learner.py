"""TD3-style learner for the residual actor, with a critic ensemble.

One `update(batch)`:
  1. critic: y = R_n + discount * min over `target_heads` (2) random heads of Q_target(s', b', a'), where
     a' = clip(b' + clip(res_target(s', b') + clip(noise), -scale, scale), -1, 1)   (target-policy smoothing);
     y is clipped to the returns the reward range allows (`reward_bounds`, widened by `potential_bound` on either
     side under potential-based shaping); every head regresses on y (sum of
     per-head MSEs); gradient norm clipped.
  2. actor, every `policy_delay` updates once `critic_warmup` updates are done:
     maximize the ensemble-mean Q(s, b, clip(b + res(s, b), -1, 1)); gradient norm clipped.
  3. Polyak averaging of both target networks.
A non-finite loss raises FloatingPointError naming the loss and the update.

Batches are dicts of [B, ...] arrays from robot_rl.rl.replay (obs, base_action, action, ret, discount,
next_obs, next_base_action; potential, next_potential, potential_gain under shaping). Observations are
normalized by the actor's frozen statistics; critics read (normalized obs, base action, action[, Phi(s)]).
Under shaping, `Learner.shaping` is the weight lambda the targets use: rewards were labeled with lambda_0 =
potential_bound, and ret + (lambda - lambda_0) potential_gain is the return at lambda (the shaping terms of an
n-step window telescope to potential_gain), so a decaying lambda needs no relabeling of the replay.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import torch

from robot_rl.rl.critic import EnsembleCritic, random_heads
from robot_rl.policies.residual import ResidualActor


@dataclasses.dataclass
class LearnerConfig:
    """Every hyperparameter of the update."""

    # 5 heads of 128: at batch 256 on one CPU thread this runs at ~1.2x the updates/s of SB3 SAC's 2 critics
    # of 256 (bench/learner_throughput.py); 10 heads of 128 ran at ~0.9x, 10 of 256 at ~0.4x.
    num_critics: int = 5  # ensemble heads
    critic_hidden: tuple[int, ...] = (128, 128)
    layer_norm: bool = True  # LayerNorm in every critic hidden layer
    batch_size: int = 256
    gamma: float = 0.99  # per control step
    n_step: int = 3  # n-step returns (cut at episode ends and at the newest transition)
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    tau: float = 0.005  # Polyak rate of the target networks
    policy_delay: int = 2  # critic updates per actor update
    target_noise: float = 0.2  # std of target-policy smoothing noise, as a fraction of the residual scale
    target_noise_clip: float = 0.5  # its clip, as a fraction of the residual scale
    critic_warmup: int = 1000  # critic-only updates before the first actor update (the actor stays at the base)
    grad_clip: float = 10.0  # max global gradient norm, critic and actor each
    target_heads: int = 2  # the TD target is the min over this many randomly chosen target heads
    # Per-step reward range: TD targets are clipped to [lo, hi] / (1 - gamma), the returns such rewards can give.
    # Keeps the min-over-heads pessimism from driving values below any achievable return (sparse rewards).
    reward_bounds: tuple[float, float] | None = (0.0, 1.0)
    # Potential-based shaping lambda (gamma Phi(s') - Phi(s)), Phi in [0, 1], adds terms that telescope: a return
    # from s moves by lambda (gamma^T Phi(s_T) - Phi(s)), so the clip becomes [lo / (1 - gamma) - lambda Phi(s),
    # hi / (1 - gamma) + lambda (1 - Phi(s))] where the batch carries Phi(s) ("potential"), else -lambda / +lambda.
    # The per-step widening [lo - lambda, hi + lambda] / (1 - gamma) = [-30, 130] for lambda = 0.3 let the
    # min-over-heads pessimism drive Q down to -0.62 on lift (shaped values lie in [-0.3, 1.3]).
    potential_bound: float = 0.0
    # The critics also read Phi(s) (the batch's "potential"; Phi(s') for the TD target), so the state offset
    # -lambda Phi(s) that shaped values carry is one weight away instead of a function of the observation to fit.
    # Set by residual RL when shaping is on. Lift, lambda = 0.3, seed 1, critic loss at 40k steps: 0.079 without,
    # 0.069 with (0.047 unshaped).
    critic_potential: bool = False
    # Penalty on the squared residual (in units of scale) in the actor loss: the residual moves only where the critic
    # pays for it. Evaluation success at 20k / 40k env steps (explore_std 0.1; docs/results/residual_rl.md):
    # peg_insert (base 0.41): 0 -> 0.01 / -, the residual at ~0.65 of its bound; 0.1 -> 0.17 / 0.61 (0.99 at 120k).
    # lift (base 0.17): 0.1 -> 0.73 / 0.73, the residual held at ~0.15 of its bound; 0.01 -> 0.93 / 0.95.
    actor_l2: float = 0.01
    # The actor maximizes mean - actor_pessimism * std over the critic heads: it leaves the base only where the heads
    # agree that doing so pays (where data supports it), not where their extrapolation happens to rise. 0: the mean
    actor_pessimism: float = 0.0
    compile: bool = False  # torch.compile the critics: +10-20% updates/s measured, 15-30 s of compilation first

    def __post_init__(self):
        self.critic_hidden = tuple(int(h) for h in self.critic_hidden)
        if self.reward_bounds is not None:
            self.reward_bounds = (float(self.reward_bounds[0]), float(self.reward_bounds[1]))
        checks = [
            ("num_critics", self.num_critics >= 2, ">= 2"),
            ("target_heads", 1 <= self.target_heads <= self.num_critics, "in [1, num_critics]"),
            ("reward_bounds", self.reward_bounds is None or self.reward_bounds[0] <= self.reward_bounds[1],
             "None or [lo, hi] with lo <= hi"),
            ("critic_hidden", bool(self.critic_hidden) and min(self.critic_hidden) >= 1, "one or more widths >= 1"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("gamma", 0.0 <= self.gamma < 1.0, "in [0, 1)"),
            ("n_step", self.n_step >= 1, ">= 1"),
            ("actor_lr", self.actor_lr > 0, "> 0"),
            ("critic_lr", self.critic_lr > 0, "> 0"),
            ("tau", 0.0 < self.tau <= 1.0, "in (0, 1]"),
            ("policy_delay", self.policy_delay >= 1, ">= 1"),
            ("target_noise", self.target_noise >= 0, ">= 0"),
            ("target_noise_clip", self.target_noise_clip >= 0, ">= 0"),
            ("critic_warmup", self.critic_warmup >= 0, ">= 0"),
            ("grad_clip", self.grad_clip > 0, "> 0"),
            ("actor_l2", self.actor_l2 >= 0, ">= 0"),
            ("actor_pessimism", self.actor_pessimism >= 0, ">= 0"),
            ("potential_bound", self.potential_bound >= 0, ">= 0 (the shaping weight lambda)"),
        ]
        for name, ok, rule in checks:
            if not ok:
                raise ValueError(f"learner.{name}={getattr(self, name)!r} must be {rule}")


def to_torch(batch: dict[str, np.ndarray], device) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v, device=device) for k, v in batch.items() if k != "steps"}


class Learner:
    def __init__(self, actor: ResidualActor, cfg: LearnerConfig, seed: int = 0):
        self.cfg = cfg
        self.actor = actor  # shared with the ResidualPolicy that acts
        self.scale = actor.cfg.scale
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        in_dim = actor.obs_dim + 2 * actor.action_dim + int(cfg.critic_potential)
        self.critic = EnsembleCritic(in_dim, cfg.num_critics, cfg.critic_hidden, cfg.layer_norm)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        if cfg.compile:  # instance attributes: state_dict and checkpoints are unaffected
            self.critic.forward = torch.compile(self.critic.forward)
            self.critic_target.forward = torch.compile(self.critic_target.forward)
        # fused Adam: one kernel over all tensors instead of a Python loop per parameter
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=cfg.critic_lr, fused=True)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr, fused=True)
        self.generator = torch.Generator().manual_seed(seed)  # target noise and head choice
        self.updates = 0
        # The shaping weight the TD targets use now; replay rewards carry cfg.potential_bound (the weight they
        # were labeled with) and update() rescales their shaping part by the batch's potential_gain. Residual
        # RL lowers it over training (rl.shaping_decay_steps).
        self.shaping = cfg.potential_bound

    def set_obs_stats(self, center, scale) -> None:
        self.actor.set_obs_stats(center, scale)
        self.actor_target.set_obs_stats(center, scale)

    def _critic_in(self, obs_n, base, action, potential=None):
        parts = [obs_n, base, action]
        if self.cfg.critic_potential:  # an unknown (NaN) or missing Phi reads as 0
            phi = obs_n.new_zeros(len(obs_n)) if potential is None else torch.nan_to_num(potential, nan=0.0)
            parts.append(phi.reshape(-1, 1).to(obs_n.dtype))
        return torch.cat(parts, dim=-1)

    @torch.no_grad()
    def td_target(self, b: dict) -> torch.Tensor:
        """The clipped TD target y [B] of a torch batch, with the shaping weight `self.shaping`."""
        cfg, scale = self.cfg, self.scale
        next_n = self.actor.normalize(b["next_obs"])
        res = self.actor_target(next_n, b["next_base_action"])
        noise = torch.randn(res.shape, generator=self.generator) * (cfg.target_noise * scale)
        noise = noise.clamp(-cfg.target_noise_clip * scale, cfg.target_noise_clip * scale)
        next_action = (b["next_base_action"] + (res + noise).clamp(-scale, scale)).clamp(-1.0, 1.0)
        heads = random_heads(cfg.num_critics, cfg.target_heads, self.generator)
        next_in = self._critic_in(next_n, b["next_base_action"], next_action, b.get("next_potential"))
        q_next = self.critic_target(next_in, heads).min(0).values
        lam, phi = self.shaping, b.get("potential")
        if phi is None:
            phi = torch.full_like(q_next, float("nan"))
        ret = b["ret"]
        if lam != cfg.potential_bound and "potential_gain" in b:  # shaping labeled at lambda_0, wanted at lam
            ret = ret + (lam - cfg.potential_bound) * torch.nan_to_num(b["potential_gain"], nan=0.0)
        target = ret + b["discount"] * q_next
        if cfg.reward_bounds is not None:
            # shaped values are unshaped ones + lambda (gamma^T Phi(s_T) - Phi(s)): the unshaped clip moved down
            # by lambda Phi(s) and up by lambda (1 - Phi(s)); an unknown (NaN) Phi(s) (its shaping, if any,
            # not rescaled) takes the bound that holds at lambda_0 for any Phi in [0, 1]
            known = ~torch.isnan(phi)
            down = torch.where(known, lam * torch.nan_to_num(phi), cfg.potential_bound)
            up = torch.where(known, lam * (1.0 - torch.nan_to_num(phi)), cfg.potential_bound)
            lo, hi = (v / (1.0 - cfg.gamma) for v in cfg.reward_bounds)
            target = torch.minimum(torch.maximum(target, lo - down), hi + up)
        return target

    def update(self, batch: dict) -> dict[str, float]:
        """One critic update (and an actor update when due); returns scalar metrics."""
        cfg, scale = self.cfg, self.scale
        b = to_torch(batch, "cpu") if isinstance(batch["obs"], np.ndarray) else batch
        obs_n = self.actor.normalize(b["obs"])
        target = self.td_target(b)
        q = self.critic(self._critic_in(obs_n, b["base_action"], b["action"], b.get("potential")))  # [N, B]
        critic_loss = (q - target).pow(2).mean(1).sum()
        self._check("critic", critic_loss)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_grad = torch.nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip)
        self.critic_opt.step()
        self.updates += 1
        q = q.detach()
        metrics = {"critic_loss": float(critic_loss.detach()), "q_mean": float(q.mean()), "q_max": float(q.max()),
                   "q_min": float(q.min()), "q_head_std": float(q.std(0).mean()), "target_mean": float(target.mean()),
                   "critic_grad_norm": float(critic_grad)}

        if self.updates > cfg.critic_warmup and self.updates % cfg.policy_delay == 0:
            res = self.actor(obs_n, b["base_action"])
            action = (b["base_action"] + res).clamp(-1.0, 1.0)
            q_heads = self.critic(self._critic_in(obs_n, b["base_action"], action, b.get("potential")))
            q_pi = q_heads.mean(0)
            if cfg.actor_pessimism:
                q_pi = q_pi - cfg.actor_pessimism * q_heads.std(0)
            actor_loss = -q_pi.mean()
            if cfg.actor_l2:
                actor_loss = actor_loss + cfg.actor_l2 * (res / scale).pow(2).sum(-1).mean()
            self._check("actor", actor_loss)
            self.actor_opt.zero_grad(set_to_none=True)
            # Gradients reach the actor through the critic; the critic's own weight gradients are not computed.
            actor_loss.backward(inputs=list(self.actor.parameters()))
            actor_grad = torch.nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.grad_clip)
            self.actor_opt.step()
            with torch.no_grad():
                self._polyak(self.actor_target, self.actor)
            metrics.update(actor_loss=float(actor_loss.detach()), residual_abs=float(res.detach().abs().mean()),
                           actor_grad_norm=float(actor_grad))
        with torch.no_grad():
            self._polyak(self.critic_target, self.critic)
        return metrics

    def _polyak(self, target, source) -> None:
        torch._foreach_lerp_(list(target.parameters()), list(source.parameters()), self.cfg.tau)

    def _check(self, name: str, loss: torch.Tensor) -> None:
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{name} loss is {loss.item()} at update {self.updates + 1}")

    # ---- checkpoints --------------------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "actor_target": self.actor_target.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(), "critic_opt": self.critic_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(), "generator": self.generator.get_state(),
            "updates": self.updates,
        }

    def load_state(self, state: dict) -> None:
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.generator.set_state(state["generator"])
        self.updates = int(state["updates"])
