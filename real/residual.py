"""The residual on top of the base policy, applied synchronously in the control loop.

The base policy's chunks come from the inference worker (slow, asynchronous); the residual is a small
correction computed in the loop itself, on the freshest observation, for every action the node executes
(each policy step; every tick in between executes that step's target). As in ResFiT, it sees the
observation and the base action and returns a delta in the normalized action space:

    residual(obs {key: [1, dim]}, base_action [1, A]) -> delta [1, A]
    action = compose(base, delta, residual_scale) = clip(base + residual_scale * delta, -1, 1)   (policies/residual.py)

Two ways to configure it:
  residual=<dir>                       a `kind: residual` checkpoint (robot-rl-train-residual's <run>/policy):
                                       its actor runs here (PolicyResidual), its base must be the worker's policy;
                                       exactly what ResidualPolicy.act computes in sim, with the base's chunks
                                       from the worker instead of an in-process queue
  residual: {_target_: pkg.mod.Factory, ...kwargs}   any callable (hydra.utils.instantiate)
`residual_scale` in [0, 1] dials it in during a rollout on hardware. An exception from the residual latches a
safe stop, like one from the base policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from robot_rl.policies.base import PolicySpec, SpecMismatch
from robot_rl.policies.residual import ResidualPolicy, compose, explore, flatten_obs

Residual = Callable[[dict, np.ndarray], np.ndarray]


class PolicyResidual:
    """A trained ResidualPolicy's actor as the node's residual: delta = scale * tanh(f(obs, base)), plus
    Gaussian exploration noise of std explore_std * scale (robot actors), kept within [-scale, scale]."""

    where = "in the control loop"  # for the message below
    instead = "run it in the worker (policy=<residual checkpoint>)"

    def __init__(self, policy: ResidualPolicy, explore_std: float = 0.0, seed: int = 0):
        if policy.feature_dim:
            raise ValueError(f"residual.base_features=true is not supported {self.where} yet (the node hands the "
                             "residual the newest observation, not the base's frame / instruction history); "
                             f"{self.instead}, or set rl.residual.base_features=false")
        self.policy, self.keys = policy, policy.obs_keys
        self.scale = float(policy.actor.cfg.scale)
        self.noise = float(explore_std) * self.scale
        self.rng = np.random.default_rng(seed)

    def __call__(self, obs: dict, base: np.ndarray) -> np.ndarray:
        res = self.policy.residual(flatten_obs(obs, self.keys), base)
        noise = self.rng.normal(0.0, self.noise, res.shape) if self.noise > 0 else None
        return explore(res, noise, self.scale).astype(np.float32)

    def check_base(self, spec: PolicySpec) -> None:
        """Raise SpecMismatch unless `spec` (the worker's policy) is the base this residual was trained on."""
        base = self.policy.base
        if base is None:
            raise SpecMismatch("this residual was trained without a base (RL from scratch); it cannot run on top of "
                               "the worker's policy")
        if spec != base.spec:
            diff = sorted(k for k, v in base.spec.to_dict().items() if spec.to_dict().get(k) != v)
            raise SpecMismatch(f"the worker's policy is not the base this residual was trained on (spec differs in "
                               f"{diff}); run policy=<that base's checkpoint> residual=<residual checkpoint>")


def load_residual(cfg: Any) -> Residual | None:
    """The residual a `residual` config value describes: None for null, a PolicyResidual for a checkpoint
    directory, or the callable a `{_target_: ...}` node builds."""
    if cfg is None:
        return None
    if isinstance(cfg, (str, Path)):
        from robot_rl.policies import load_policy

        if not Path(cfg).is_dir():
            raise ValueError(f"residual={str(cfg)!r} is not a checkpoint directory")
        policy = load_policy(cfg)
        if not isinstance(policy, ResidualPolicy):
            raise ValueError(f"residual={str(cfg)!r} is a {policy.kind!r} checkpoint; it must be a residual one "
                             "(robot-rl-train-residual's <run>/policy)")
        return PolicyResidual(policy)
    from hydra.utils import instantiate

    res = instantiate(cfg)
    if not callable(res):
        raise ValueError(f"residual {cfg.get('_target_')!r} built a {type(res).__name__}, which is not callable")
    return res


def apply_residual(residual: Residual | None, scale: float, obs: dict, base: np.ndarray) -> np.ndarray:
    """compose(base [A], residual(obs, base) [A], scale): the step's executed action."""
    if residual is None or scale == 0:
        return np.clip(base, -1.0, 1.0)
    delta = np.asarray(residual(obs, base[None].astype(np.float32)), dtype=np.float64).reshape(-1)
    if delta.shape != base.shape:
        raise ValueError(f"residual returned {delta.size} values, expected {base.size}")
    return compose(base, delta, scale)
