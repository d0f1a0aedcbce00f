"""Residual policy: a frozen base policy plus a small learned correction, itself a BasePolicy.

    executed action = clip(base + scale * tanh(f(obs, base)), -1, 1)     (compose(): the one place it is summed)

obs is the state observation, flattened; with residual.base_features also the base's own encoding of what it
reads (BasePolicy.features: for a VLA the trunk memory of frames + instruction + proprio). That lets the
residual and its critics tell apart states the state vector cannot: on color_lift which of the two cubes the
instruction names is only in the cameras and the words, and without it the critics average the two goals.

The base emits action chunks that run open-loop from a per-env queue (policies/runner.py's ChunkQueue); the residual
acts every control step on the current observation and the base action of that step. So the combined
policy is a BasePolicy with action_horizon = 1 (it must see every observation) and the base's
obs_horizon (it passes the history on to the base); its rows are envs: row i of every act() call is env i,
and reset(env_ids) empties those envs' base queues. The last layer of f starts at zero, so before any
training the residual policy acts exactly as its base.

Checkpoint (kind "residual"): the actor's weights and its frozen observation normalization under
`actor.`, a copy of the base checkpoint's tensors under `base.` and the base's kind/spec/config in
config.json, so one directory holds everything robot-rl-eval and deployment need. With no base (RL from
scratch) the base action is 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import nn

from robot_rl.policies.base import BasePolicy, PolicySpec, SpecMismatch
from robot_rl.policies.runner import ChunkQueue
from robot_rl.common.config import from_mapping


@dataclasses.dataclass
class ResidualConfig:
    """The residual actor's architecture and range."""

    # max |residual| per action dimension in normalized units (0.2 is a tenth of the [-1, 1] range). On lift with the
    # BC base (30 min of training): 0.1 plateaued near 55%, 0.2 at 80% with the residual at ~0.9 of its bound,
    # 0.5 reached 97.5%.
    scale: float = 0.5
    hidden: tuple[int, ...] = (256, 256)  # MLP widths; each layer Linear -> LayerNorm -> ReLU
    layer_norm: bool = True
    obs_clip: float = 5.0  # normalized observations are clipped to +-obs_clip (keeps rare states finite)
    # also read the base's features (BasePolicy.features, e.g. a VLA's trunk memory of frames + instruction),
    # appended to the state: needed when the state does not say what the task is (color_lift: the instruction names
    # one of two cubes; VLA base, 20k steps: 0.12 without, 0.76 with). "auto": when the base offers features (VLA
    # yes, diffusion no); build() stores the resolved true / false in checkpoints
    base_features: bool | str = "auto"

    def __post_init__(self):
        self.hidden = tuple(int(h) for h in self.hidden)
        if not (self.scale > 0 and np.isfinite(self.scale)):
            raise ValueError(f"residual.scale={self.scale} must be a finite number > 0")
        if not self.hidden or min(self.hidden) < 1:
            raise ValueError(f"residual.hidden={list(self.hidden)} must be one or more widths >= 1")
        if not self.obs_clip > 0:
            raise ValueError(f"residual.obs_clip={self.obs_clip} must be > 0")
        if self.base_features not in (True, False, "auto"):
            raise ValueError(f"residual.base_features={self.base_features!r} must be true, false or auto")



def prefixed(tensors: dict, prefix: str) -> dict:
    """The entries of `tensors` under `prefix`, with it removed (state_tensors' "actor." and "base." parts)."""
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def actor_state(tensors: dict) -> dict:
    """The residual actor's state_dict inside a ResidualPolicy checkpoint's tensors."""
    return prefixed(tensors, "actor.")


def flatten_obs(obs: dict[str, np.ndarray], keys: tuple[str, ...]) -> np.ndarray:
    """Concatenate observation keys (in `keys` order) along the last axis, float32."""
    return np.concatenate([np.asarray(obs[k], dtype=np.float32) for k in keys], axis=-1)


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, layer_norm: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(in_dim, h), *([nn.LayerNorm(h)] if layer_norm else []), nn.ReLU()]
        in_dim = h
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class ResidualActor(nn.Module):
    """f(normalized obs, base action) -> residual in [-scale, scale]; zero at initialization."""

    def __init__(self, obs_dim: int, action_dim: int, cfg: ResidualConfig):
        super().__init__()
        self.cfg, self.obs_dim, self.action_dim = cfg, obs_dim, action_dim
        self.net = mlp(obs_dim + action_dim, cfg.hidden, action_dim, cfg.layer_norm)
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)
        # Frozen observation normalization, set once from the first rollouts (and demos) before learning.
        self.register_buffer("obs_center", torch.zeros(obs_dim))
        self.register_buffer("obs_scale", torch.ones(obs_dim))

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        c = self.cfg.obs_clip
        return ((obs - self.obs_center) / self.obs_scale).clamp(-c, c)

    def set_obs_stats(self, center, scale) -> None:
        with torch.no_grad():
            self.obs_center.copy_(torch.as_tensor(center, dtype=torch.float32))
            self.obs_scale.copy_(torch.as_tensor(scale, dtype=torch.float32))

    def forward(self, obs_n: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """Residual [B, A] from normalized obs [B, obs_dim] and base actions [B, A]."""
        return self.cfg.scale * torch.tanh(self.net(torch.cat([obs_n, base], dim=-1)))


def compose(base: np.ndarray, residual: np.ndarray, scale: float = 1.0, noise: np.ndarray | None = None,
            bound: float | None = None) -> np.ndarray:
    """The executed action [..., A] = clip(base + scale * r, -1, 1), the one place base and residual are summed.

    residual [..., A]: the residual actor's output (already in [-bound, bound]: bound * tanh) or any residual
    callable's delta; with exploration `noise` (same shape) r = clip(residual + noise, -bound, bound), else r =
    residual. `scale` dials the residual in on hardware (deploy's residual_scale); 1 everywhere else."""
    return np.clip(base + scale * explore(residual, noise, bound), -1.0, 1.0)


def explore(residual: np.ndarray, noise: np.ndarray | None, bound: float | None) -> np.ndarray:
    """The residual with exploration noise, kept within the actor's range: clip(residual + noise, -bound, bound)."""
    if noise is None:
        return residual
    return np.clip(residual + noise, -bound, bound)


def base_feature_dim(base: BasePolicy | None, cfg: ResidualConfig) -> int:
    """Width of the base features the residual reads (0 without residual.base_features)."""
    dim = base.feature_dim if base is not None else 0
    if cfg.base_features == "auto":
        return dim
    if not cfg.base_features:
        return 0
    if dim <= 0:
        what = "no base" if base is None else f"a {type(base).__name__} base, which offers no features"
        raise ValueError(f"residual.base_features=true reads the base policy's features, but there is {what}; use a "
                         "base that has them (a VLA: policy kind vla) or set residual.base_features=false")
    return dim


class ResidualPolicy(BasePolicy):
    kind = "residual"

    def __init__(self, base: BasePolicy | None, actor: ResidualActor, spec: PolicySpec, device: str = "cpu"):
        self.base, self.actor, self.spec = base, actor.to(device).eval(), spec
        self.device = torch.device(device)
        self.obs_keys = tuple(sorted(spec.obs_dims))
        self.feature_dim = base_feature_dim(base, actor.cfg)
        if actor.obs_dim != sum(spec.obs_dims.values()) + self.feature_dim:
            raise SpecMismatch(f"residual actor reads {actor.obs_dim} inputs; the spec's observations and base "
                               f"features make {sum(spec.obs_dims.values())} + {self.feature_dim}")
        self.queue: ChunkQueue | None = None  # sized by the first act() call's batch

    @classmethod
    def build(cls, base: BasePolicy | None, cfg: ResidualConfig, env=None, device: str = "cpu") -> "ResidualPolicy":
        """A fresh (zero-residual) policy on `base`; with base None the spec comes from `env`."""
        if base is not None:
            spec = dataclasses.replace(base.spec, action_horizon=1, obs_dims=dict(base.spec.obs_dims))
        elif env is not None:
            spec = PolicySpec.of_env(env)
        else:
            raise ValueError("a residual policy without a base needs the env to take its spec from")
        feature_dim = base_feature_dim(base, cfg)
        cfg = dataclasses.replace(cfg, base_features=feature_dim > 0)  # "auto" resolved, as checkpoints store it
        obs_dim = sum(spec.obs_dims.values()) + feature_dim
        return cls(base, ResidualActor(obs_dim, spec.action_dim, cfg), spec, device)

    # ---- inputs -------------------------------------------------------------------------------------
    def base_features(self, history: dict[str, np.ndarray]) -> np.ndarray | None:
        """The base's features [B, feature_dim] of obs histories (as the base reads them: frames, instruction);
        None without residual.base_features."""
        return self.base.features(history) if self.feature_dim else None

    def inputs(self, obs: dict[str, np.ndarray], features: np.ndarray | None = None) -> np.ndarray:
        """The residual's (and critics') input [B, obs_dim]: the state keys of `obs` ({key: [B, dim]}) flattened,
        then the base features (base_features() of the same step) when the residual reads them."""
        x = flatten_obs(obs, self.obs_keys)
        if not self.feature_dim:
            return x
        if features is None:
            raise ValueError("this residual reads the base's features (residual.base_features): pass "
                             "features=policy.base_features(obs_history)")
        return np.concatenate([x, np.asarray(features, np.float32)], axis=-1)

    # ---- acting -------------------------------------------------------------------------------------
    def reset(self, env_ids=None) -> None:
        if self.queue is not None:
            self.queue.reset(env_ids)
        elif self.base is not None:
            self.base.reset(env_ids)

    @torch.no_grad()
    def residual(self, obs: np.ndarray, base: np.ndarray) -> np.ndarray:
        """Residual [B, A] (in [-scale, scale]) for flat observations [B, obs_dim] and base actions [B, A]."""
        o = torch.as_tensor(obs, device=self.device)
        b = torch.as_tensor(base, device=self.device)
        return self.actor(self.actor.normalize(o), b).cpu().numpy()

    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        n = len(obs_history[self.obs_keys[0]])
        if self.queue is None or self.queue.num_envs != n:
            self.queue = ChunkQueue(self.base, n, self.spec.action_dim)
            self.queue.reset()
        base = self.queue.next(obs_history)
        obs = self.inputs({k: obs_history[k][:, -1] for k in self.obs_keys}, self.base_features(obs_history))
        return compose(base, self.residual(obs, base)).astype(np.float32)[:, None, :]

    # ---- persistence --------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        base = None
        if self.base is not None:
            base = {"kind": self.base.kind, "class": type(self.base).__name__, "spec": self.base.spec.to_dict(),
                    "config": self.base.config() if self.base.kind else {}}
        return {"residual": dataclasses.asdict(self.actor.cfg), "base": base}

    def state_tensors(self) -> dict:
        out = {f"actor.{k}": v for k, v in self.actor.state_dict().items()}
        if self.base is not None and self.base.kind:
            out.update({f"base.{k}": v for k, v in self.base.state_tensors().items()})
        return out

    @classmethod
    def from_checkpoint(cls, tensors: dict, config: dict, spec: PolicySpec, device: str) -> "ResidualPolicy":
        from robot_rl.policies import policy_class
        from robot_rl.common.checkpoint import CheckpointError

        # checkpoints written before base_features existed read no base features
        cfg = from_mapping(ResidualConfig, {"base_features": False, **config["residual"]}, "residual")
        base = None
        if config.get("base") is not None:
            b = config["base"]
            if not b.get("kind"):
                raise CheckpointError(
                    f"this residual policy was trained on a {b.get('class')} base, which is code, not a checkpoint; "
                    "it cannot be loaded on its own")
            base_tensors = prefixed(tensors, "base.")
            base = policy_class(b["kind"]).from_checkpoint(base_tensors, b["config"], PolicySpec.from_dict(b["spec"]),
                                                           device)
        obs_dim = sum(spec.obs_dims.values()) + base_feature_dim(base, cfg)
        actor = ResidualActor(obs_dim, spec.action_dim, cfg)
        try:
            actor.load_state_dict(actor_state(tensors))
        except RuntimeError as e:
            raise SpecMismatch(f"checkpoint actor weights do not fit its config: {str(e).splitlines()[0]}") from None
        return cls(base, actor, spec, device)
