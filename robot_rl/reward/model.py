"""The reward model: a progress model Phi(obs[, instruction]) -> [0, 1] and a success classifier with its
calibrated threshold, saved together as one checkpoint (safetensors + JSON, robot_rl.checkpoint).

    model = load_reward_model("runs/train_reward/<run>")     # a run directory or its reward_model/
    model.spec.check_env(env)                                # SpecMismatch naming every difference
    phi = model.progress(obs)                                # obs: {key: [N, dim]} -> [N] in [0, 1]
    p, hit = model.success_prob(obs), model.success(obs)     # [N] probability, [N] bool (p >= threshold)

Both networks read an observation dict through `ObsEncoder`, one encoder per key chosen by the key's kind
(`ENCODERS`): state vectors now, camera images once an image encoder is registered (the VLA issue), and
an optional instruction per row (`spec.instruction`; state-only models have none and ignore it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from policies.base import SpecMismatch

KIND = "reward_model"
CHECKPOINT_DIR = "reward_model"  # inside a robot-rl-train-reward run directory


@dataclasses.dataclass
class RewardSpec:
    """What a reward model reads."""

    task: str
    obs_dims: dict[str, int]  # observation keys and their sizes
    encoders: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> ENCODERS name ("state")
    instruction: bool = False  # reads a language instruction per row (needs a language encoder)

    def __post_init__(self):
        self.obs_dims = {k: int(v) for k, v in self.obs_dims.items()}
        self.encoders = {k: self.encoders.get(k, "state") for k in self.obs_dims}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RewardSpec":
        return cls(**d)

    def problems(self, task: str, obs_dims: dict[str, int]) -> list[str]:
        out = []
        if task != self.task:
            out.append(f"task: reward model {self.task!r}, {{other}} {task!r}")
        for k, d in self.obs_dims.items():
            if k not in obs_dims:
                out.append(f"observation {k!r}: the reward model reads it, {{other}} has only {sorted(obs_dims)}")
            elif int(obs_dims[k]) != d:
                out.append(f"observation {k!r}: reward model expects dim {d}, {{other}} gives {obs_dims[k]}")
        return out

    def check(self, task: str, obs_dims: dict[str, int], what: str) -> None:
        """Raise SpecMismatch naming every difference from a task + observation spec (`what`: 'env', ...)."""
        problems = [p.format(other=what) for p in self.problems(task, obs_dims)]
        if problems:
            raise SpecMismatch(f"reward model does not fit the {what}: " + "; ".join(problems) +
                               f". Train one for this task with robot-rl-train-reward task={task}")

    def check_env(self, env) -> None:
        self.check(env.cfg.task, dict(env.obs_dims), "env")


class StateEncoder(nn.Module):
    """A low-dim state key: normalized by the training data's mean / std (saved with the weights)."""

    def __init__(self, dim: int):
        super().__init__()
        self.out_dim = dim
        self.register_buffer("center", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    def set_stats(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64)
        self.center.copy_(torch.as_tensor(x.mean(0), dtype=torch.float32))
        self.scale.copy_(torch.as_tensor(np.maximum(x.std(0), 1e-3), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.center) / self.scale


ENCODERS = {"state": StateEncoder}  # an image encoder (uint8 [H, W, 3] -> features) registers here


class ObsEncoder(nn.Module):
    """{key: [B, ...]} (+ instruction) -> features [B, out_dim]: one encoder per key, concatenated in key order."""

    def __init__(self, spec: RewardSpec):
        super().__init__()
        if spec.instruction:
            raise ValueError("no language encoder is available yet: reward models are built with instruction=false")
        unknown = {k: e for k, e in spec.encoders.items() if e not in ENCODERS}
        if unknown:
            raise ValueError(f"unknown encoder(s) {unknown}; known: {sorted(ENCODERS)}")
        self.keys = tuple(sorted(spec.obs_dims))
        self.enc = nn.ModuleDict({k: ENCODERS[spec.encoders[k]](spec.obs_dims[k]) for k in self.keys})
        self.out_dim = sum(e.out_dim for e in self.enc.values())

    def forward(self, obs: dict[str, torch.Tensor], instruction: Sequence[str] | None = None) -> torch.Tensor:
        return torch.cat([self.enc[k](obs[k]) for k in self.keys], dim=-1)


class ScoreNet(nn.Module):
    """Observation dict -> one logit per row: encoder, MLP with LayerNorm + SiLU."""

    def __init__(self, spec: RewardSpec, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        self.encoder = ObsEncoder(spec)
        layers, d = [], self.encoder.out_dim
        for h in hidden:
            layers += [nn.Linear(d, h), nn.LayerNorm(h), nn.SiLU()]
            d = h
        layers.append(nn.Linear(d, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, obs: dict[str, torch.Tensor], instruction: Sequence[str] | None = None) -> torch.Tensor:
        return self.mlp(self.encoder(obs, instruction)).squeeze(-1)


class RewardModel:
    """Progress model + success classifier + threshold, for one task and observation spec."""

    def __init__(self, spec: RewardSpec, progress_net: ScoreNet, success_net: ScoreNet, threshold: float = 0.5,
                 hidden: Sequence[int] = (256, 256), info: dict | None = None):
        self.spec, self.progress_net, self.success_net = spec, progress_net, success_net
        self.threshold = float(threshold)
        self.hidden = tuple(int(h) for h in hidden)
        self.info = dict(info or {})  # training summary kept in the checkpoint (data, metrics)

    @classmethod
    def build(cls, spec: RewardSpec, hidden: Sequence[int] = (256, 256)) -> "RewardModel":
        return cls(spec, ScoreNet(spec, hidden), ScoreNet(spec, hidden), 0.5, hidden)

    # ---- inference (numpy in, numpy out) -------------------------------------------------------------
    def _tensors(self, obs: dict) -> dict[str, torch.Tensor]:
        missing = [k for k in self.spec.obs_dims if k not in obs]
        if missing:
            raise KeyError(f"reward model reads observation key(s) {missing}; got {sorted(obs)}")
        return {k: torch.as_tensor(np.asarray(obs[k]), dtype=torch.float32) for k in self.spec.obs_dims}

    @torch.no_grad()
    def progress(self, obs: dict, instruction: Sequence[str] | None = None) -> np.ndarray:
        """Phi(obs) in [0, 1], [N] float32, for obs {key: [N, dim]}."""
        self.progress_net.eval()
        return torch.sigmoid(self.progress_net(self._tensors(obs), instruction)).numpy().astype(np.float32)

    @torch.no_grad()
    def success_prob(self, obs: dict, instruction: Sequence[str] | None = None) -> np.ndarray:
        """Classifier probability that obs is a success state, [N] float32."""
        self.success_net.eval()
        return torch.sigmoid(self.success_net(self._tensors(obs), instruction)).numpy().astype(np.float32)

    def success(self, obs: dict, instruction: Sequence[str] | None = None) -> np.ndarray:
        """success_prob >= the calibrated threshold, [N] bool."""
        return self.success_prob(obs, instruction) >= self.threshold

    # ---- checkpoints ---------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"kind": KIND, "spec": self.spec.to_dict(), "threshold": self.threshold, "hidden": list(self.hidden),
                "info": self.info}

    def save(self, path: str | Path) -> Path:
        """Write model.safetensors + config.json atomically to the directory `path`."""
        from robot_rl import checkpoint

        tensors = {f"progress.{k}": v for k, v in self.progress_net.state_dict().items()}
        tensors.update({f"success.{k}": v for k, v in self.success_net.state_dict().items()})
        return checkpoint.save(path, tensors, self.config())


def load_reward_model(path: str | Path) -> RewardModel:
    """A reward model from its checkpoint directory or from the robot-rl-train-reward run directory holding it."""
    from robot_rl import checkpoint

    path = Path(path)
    if (path / CHECKPOINT_DIR / checkpoint.CONFIG).is_file():
        path = path / CHECKPOINT_DIR
    tensors, cfg = checkpoint.load(path)
    if cfg.get("kind") != KIND:
        raise checkpoint.CheckpointError(
            f"{path / checkpoint.CONFIG} is a {cfg.get('kind')!r} checkpoint, not a reward model; pass the run "
            "directory of robot-rl-train-reward (or its reward_model/)")
    try:
        spec = RewardSpec.from_dict(cfg["spec"])
        hidden = [int(h) for h in cfg["hidden"]]
        threshold = float(cfg["threshold"])
        model = RewardModel(spec, ScoreNet(spec, hidden), ScoreNet(spec, hidden), threshold, hidden, cfg.get("info"))
        for name, net in (("progress", model.progress_net), ("success", model.success_net)):
            head = f"{name}."
            net.load_state_dict({k[len(head):]: v for k, v in tensors.items() if k.startswith(head)})
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise checkpoint.CheckpointError(f"reward model checkpoint {path} is malformed ({e})") from None
    return model
