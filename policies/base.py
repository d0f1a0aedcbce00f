"""The BasePolicy interface: everything downstream (residual RL, evaluation, deployment) sees only this.

    policy.reset(env_ids)                       forget per-env state (new episodes)
    policy.act(obs_history) -> [B, H, A]        obs_history: {key: [B, obs_horizon, dim]}, most recent last;
                                                returns the next H = spec.action_horizon actions, normalized [-1, 1]
    policy.spec                                 what it reads and emits (checked against the env)
    policy.save(path) / load_policy(path)       safetensors weights + JSON config, no pickle

`PolicyRunner` (policies/runner.py) turns this chunked interface into one action per env step.
"""

from __future__ import annotations

import abc
import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import numpy as np


class SpecMismatch(ValueError):
    """A policy does not fit an env or a dataset; the message names what differs."""


@dataclasses.dataclass
class PolicySpec:
    """What a policy reads and emits."""

    task: str  # task it was trained on
    obs_dims: dict[str, int]  # observation keys it reads and their sizes
    action_dim: int
    action_space: str = "ee_delta"  # the env action space its actions are for
    obs_horizon: int = 1  # observations per act() call, most recent last
    action_horizon: int = 1  # actions per chunk returned by act()
    control_hz: float = 20.0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PolicySpec":
        return cls(**{**d, "obs_dims": {k: int(v) for k, v in d["obs_dims"].items()}})

    def check_env(self, env) -> None:
        """Raise SpecMismatch naming every difference between this spec and a BatchedEnv."""
        problems = []
        if env.cfg.task != self.task:
            problems.append(f"task: policy {self.task!r}, env {env.cfg.task!r}")
        if env.cfg.action_space != self.action_space:
            problems.append(f"action_space: policy {self.action_space!r}, env {env.cfg.action_space!r}")
        if env.action_dim != self.action_dim:
            problems.append(f"action_dim: policy {self.action_dim}, env {env.action_dim}")
        env_dims = env.obs_dims
        for k, d in self.obs_dims.items():
            if k not in env_dims:
                problems.append(f"observation {k!r}: the policy reads it, the env has only {sorted(env_dims)}")
            elif env_dims[k] != d:
                problems.append(f"observation {k!r}: policy expects dim {d}, env gives {env_dims[k]}")
        if abs(env.cfg.control_hz - self.control_hz) > 1e-9:
            problems.append(f"control_hz: policy {self.control_hz}, env {env.cfg.control_hz}")
        if problems:
            raise SpecMismatch("policy does not fit the env: " + "; ".join(problems))


class BasePolicy(abc.ABC):
    """A (possibly chunked, possibly stateful) policy over batched observation histories."""

    kind: ClassVar[str] = ""  # registry name, stored in the checkpoint's config.json
    spec: PolicySpec

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Forget per-env state for `env_ids` (all when None). Stateless policies need not override."""

    @abc.abstractmethod
    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        """Action chunk [B, spec.action_horizon, spec.action_dim] (float32, in [-1, 1])."""

    def config(self) -> dict[str, Any]:
        """JSON-able constructor arguments (besides the spec) for save()."""
        return {}

    def state_tensors(self) -> dict:
        """Tensors to save (weights, normalization)."""
        return {}

    def save(self, path: str | Path) -> Path:
        """Write safetensors weights + JSON config atomically to the directory `path`."""
        from robot_rl import checkpoint

        if not self.kind:
            raise TypeError(f"{type(self).__name__} cannot be saved (no registry kind)")
        cfg = {"kind": self.kind, "spec": self.spec.to_dict(), "config": self.config()}
        return checkpoint.save(path, self.state_tensors(), cfg)

    @classmethod
    def from_checkpoint(cls, tensors: dict, config: dict, spec: PolicySpec, device: str) -> "BasePolicy":
        raise NotImplementedError(f"{cls.__name__} cannot be loaded from a checkpoint")
