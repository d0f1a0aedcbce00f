"""The BasePolicy interface: everything downstream (residual RL, evaluation, deployment) sees only this.

    policy.reset(env_ids)                       forget per-env state (new episodes)
    policy.act(obs_history) -> [B, H, A]        obs_history: {key: [B, obs_horizon, dim]}, most recent last;
                                                image keys {"images/<camera>": uint8 [B, obs_horizon, H, W, 3]};
                                                with spec.instruction, "instruction": str array [B];
                                                returns the next H = spec.action_horizon actions, normalized [-1, 1]
    policy.spec                                 what it reads and emits (checked against the env)
    policy.features(obs_history) -> [B, F]      optional (feature_dim > 0): its frozen encoding of the inputs
    policy.save(path) / load_policy(path)       safetensors weights + JSON config, no pickle

`PolicyRunner` (policies/runner.py) turns this chunked interface into one action per env step.
"""

from __future__ import annotations

import abc
import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from robot_rl.sim.actions import PREV_ACTIONS


class SpecMismatch(ValueError):
    """A policy does not fit an env or a dataset; the message names what differs."""


INSTRUCTION = "instruction"  # the obs_history key of the per-row instruction (policies with spec.instruction)
MAX_INSTRUCTION_CHARS = 1000  # longer strings are refused before any text encoder sees them


def image_key(name: str) -> str:
    """'front' or 'images/front' -> 'images/front' (the observation key of a camera)."""
    return name if name.startswith("images/") else f"images/{name}"


def env_image_shapes(env) -> dict[str, tuple[int, int, int]]:
    """{"images/<camera>": (H, W, 3)} of an env; {} for an env without cameras (or without the attribute)."""
    return {image_key(k): tuple(int(x) for x in v) for k, v in (getattr(env, "image_shapes", None) or {}).items()}


def check_instructions(instruction, n: int) -> np.ndarray:
    """`instruction` (n strings, or one for every row) as a str object array [n]; ValueError naming what is wrong.

    Empty / whitespace-only strings and strings over MAX_INSTRUCTION_CHARS are refused; the text encoder
    adds its own token limit (policies/encoders.py)."""
    if instruction is None:
        raise ValueError(f"this policy reads a language instruction: pass instruction=[{n} string(s)], one per env "
                         "(e.g. env.instruction)")
    items = [instruction] * n if isinstance(instruction, str) else list(instruction)  # one string: every row
    if len(items) != n:
        raise ValueError(f"instruction has {len(items)} entries, expected {n} (one per env / row)")
    out = np.empty(n, dtype=object)
    for i, s in enumerate(items):
        if isinstance(s, np.str_):
            s = str(s)
        if not isinstance(s, str):
            raise ValueError(f"instruction[{i}]={s!r} must be a string")
        if not s.strip():
            raise ValueError(f"instruction[{i}] is empty; give the task in words (1 to {MAX_INSTRUCTION_CHARS} "
                             "characters)")
        if len(s) > MAX_INSTRUCTION_CHARS:
            raise ValueError(f"instruction[{i}] has {len(s)} characters, over the limit of {MAX_INSTRUCTION_CHARS}")
        out[i] = s
    return out


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
    # camera observations it reads, "images/<camera>" -> [H, W, 3] (uint8 frames); older checkpoints have none
    image_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    instruction: bool = False  # reads a language instruction per env (obs_history["instruction"])
    robot: str | None = None  # the robot it was trained on (env.robot; None: an env without one, older checkpoints)

    def __post_init__(self):
        self.obs_dims = {k: int(v) for k, v in self.obs_dims.items()}
        self.image_shapes = {image_key(k): [int(x) for x in v] for k, v in (self.image_shapes or {}).items()}
        self.instruction = bool(self.instruction)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "PolicySpec":
        return cls(**d)

    @classmethod
    def of_env(cls, env, **fields) -> "PolicySpec":
        """The spec of a policy that acts in `env` (its task, vector observations, actions and rate, read through the
        env interface, sim/interface.py), one observation and one action per call; `fields` override any of them."""
        return cls(**{"task": env.task_name, "obs_dims": dict(env.obs_dims), "action_dim": env.action_dim,
                      "action_space": env.action_space.kind, "control_hz": env.control_hz, "robot": env.robot,
                      **fields})

    def check_env(self, env) -> None:
        """Raise SpecMismatch naming every difference between this spec and a BatchedEnv."""
        problems = []
        if self.robot is not None and env.robot is not None and env.robot != self.robot:
            problems.append(f"robot: policy {self.robot!r}, env {env.robot!r} (set env.robot={self.robot})")
        if env.task_name != self.task:
            problems.append(f"task: policy {self.task!r}, env {env.task_name!r}")
        if env.action_space.kind != self.action_space:
            problems.append(f"action_space: policy {self.action_space!r}, env {env.action_space.kind!r}")
        if env.action_dim != self.action_dim:
            problems.append(f"action_dim: policy {self.action_dim}, env {env.action_dim}")
        env_dims = env.obs_dims
        for k, d in self.obs_dims.items():
            fix = (f" (the policy was trained with env.action_history={d // self.action_dim}: set it)"
                   if k == PREV_ACTIONS and self.action_dim and d % self.action_dim == 0 else "")
            if k not in env_dims:
                problems.append(f"observation {k!r}: the policy reads it, the env has only {sorted(env_dims)}{fix}")
            elif env_dims[k] != d:
                problems.append(f"observation {k!r}: policy expects dim {d}, env gives {env_dims[k]}{fix}")
        problems += self.image_problems(env_image_shapes(env))
        if self.instruction and not hasattr(env, "instruction"):
            problems.append("instruction: the policy reads a language instruction, the env gives none (env.instruction)")
        if abs(env.control_hz - self.control_hz) > 1e-9:
            problems.append(f"control_hz: policy {self.control_hz}, env {env.control_hz}")
        if problems:
            raise SpecMismatch("policy does not fit the env: " + "; ".join(problems))

    def image_problems(self, shapes: dict[str, tuple], where: str = "env") -> list[str]:
        """Differences between the cameras this spec reads and `shapes` ({"images/<camera>": (H, W, 3)})."""
        out = []
        for k, want in self.image_shapes.items():
            have = shapes.get(k)
            if have is None:
                cams = sorted(c[len("images/"):] for c in shapes)
                need = sorted(c[len("images/"):] for c in self.image_shapes)
                out.append(f"observation {k!r}: the policy reads camera {k[len('images/'):]!r}, the {where} has "
                           f"cameras {cams} (set env.cameras=[{','.join(need)}])")
            elif tuple(have) != tuple(want):
                out.append(f"policy expects {k} {_size(want)}, {where} gives {_size(have)}")
        return out


def _size(shape) -> str:
    """(96, 96, 3) -> '96x96' (the channel count too when it is not 3)."""
    s = f"{shape[0]}x{shape[1]}"
    return s if len(shape) == 3 and shape[2] == 3 else f"{s} ({'x'.join(str(x) for x in shape)})"


class BasePolicy(abc.ABC):
    """A (possibly chunked, possibly stateful) policy over batched observation histories."""

    kind: ClassVar[str] = ""  # registry name, stored in the checkpoint's config.json
    spec: PolicySpec

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Forget per-env state for `env_ids` (all when None). Stateless policies need not override."""

    @abc.abstractmethod
    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        """Action chunk [B, spec.action_horizon, spec.action_dim] (float32, in [-1, 1])."""

    feature_dim: int = 0  # width of features(); 0: the policy offers none

    def features(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        """What the policy makes of its inputs, [B, feature_dim] float32 (same obs_history as act): the frozen
        encoding a residual actor and its critics can read besides the state (residual.base_features), so
        they see what only the cameras and the instruction tell (e.g. which cube is the named one)."""
        raise NotImplementedError(f"{type(self).__name__} offers no features (feature_dim 0)")

    def act_and_features(self, obs_history: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(act(obs_history), features(obs_history)); a policy whose features are a step of act() overrides this
        to compute them once."""
        return self.act(obs_history), self.features(obs_history)

    def config(self) -> dict[str, Any]:
        """JSON-able constructor arguments (besides the spec) for save()."""
        return {}

    def state_tensors(self) -> dict:
        """Tensors to save (weights, normalization)."""
        return {}

    def weights_sha256(self) -> str | None:
        """SHA-256 over the saved tensors (names and bytes, name order): identifies the policy whatever path it is
        loaded from (a resume check, the rollouts a reward model was trained on); None without a registry kind."""
        if not self.kind:
            return None
        import hashlib

        h = hashlib.sha256()
        for k, v in sorted(self.state_tensors().items()):
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def save(self, path: str | Path) -> Path:
        """Write safetensors weights + JSON config atomically to the directory `path`."""
        from robot_rl.common import checkpoint

        if not self.kind:
            raise TypeError(f"{type(self).__name__} cannot be saved (no registry kind)")
        cfg = {"kind": self.kind, "spec": self.spec.to_dict(), "config": self.config()}
        return checkpoint.save(path, self.state_tensors(), cfg)

    @classmethod
    def from_checkpoint(cls, tensors: dict, config: dict, spec: PolicySpec, device: str) -> "BasePolicy":
        raise NotImplementedError(f"{cls.__name__} cannot be loaded from a checkpoint")
