"""External base policies: a LeRobot policy (loaded from a local directory) seen as a BasePolicy.

    policy = LeRobotPolicy.from_pretrained("path/to/pretrained_model", env,
                                           state_keys=["proprio"], cameras={"front": "observation.images.top"})
    policy.save("runs/lerobot_base")          # kind "lerobot": a reference to the directory + the key mapping
    robot-rl-eval policy=runs/lerobot_base    # ... then evaluation, residual RL and deployment use it unchanged

Observation mapping (ours -> LeRobot's):
    state_keys (vector keys, concatenated in the given order) -> "observation.state" float [B, D]
    "images/<camera>" uint8 [B, H, W, 3]                      -> cameras[<camera>] float [B, 3, H, W] in [0, 1]
    the instruction (spec.instruction)                        -> "task": list[str]
The LeRobot policy's own pre/post-processors (normalization, saved next to its weights) run around
`predict_action_chunk`; its actions must be in our env's action space (trained on our data, or mapped by the
caller). Only the current observation is passed (obs_horizon 1): LeRobot policies that stack several
observations keep them in internal queues, which do not fit per-env chunked querying, and are refused.

LeRobot is an optional extra (`pip install 'robot_rl[lerobot]'`); nothing here imports it until a policy is loaded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from robot_rl.policies.base import INSTRUCTION, BasePolicy, PolicySpec, SpecMismatch, check_instructions, env_image_shapes, image_key
from robot_rl.data.lerobot_keys import IMAGE_PREFIX, STATE, camera_name, image_feature  # the names LeRobot datasets use too

LEROBOT_EXTRA = "pip install 'robot_rl[lerobot]'"


@dataclasses.dataclass
class LeRobotMapping:
    """How our observations become a LeRobot batch."""

    path: str  # the local LeRobot pretrained-model directory (config.json + model.safetensors + processors)
    state_keys: tuple[str, ...] = ()  # our vector keys, concatenated into observation.state
    cameras: dict[str, str] = dataclasses.field(default_factory=dict)  # our camera name -> their image key
    instruction: bool = False  # pass the episode instruction as "task"
    action_horizon: int | None = None  # actions executed per chunk (None: their n_action_steps, else chunk length)
    device: str = "cpu"

    def __post_init__(self):
        self.state_keys = tuple(self.state_keys)
        self.cameras = {camera_name(c): image_feature(v) for c, v in dict(self.cameras).items()}


def import_lerobot():
    """(PreTrainedConfig, get_policy_class, make_pre_post_processors or None) from the installed lerobot."""
    try:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class
    except ImportError as e:
        raise ImportError(f"LeRobot base policies need the lerobot extra ({e.name} is not installed): "
                          f"{LEROBOT_EXTRA}") from None
    try:
        from lerobot.policies.factory import make_pre_post_processors
    except ImportError:  # versions before the processor pipelines normalized inside the policy
        make_pre_post_processors = None
    return PreTrainedConfig, get_policy_class, make_pre_post_processors


def load_lerobot(path: str | Path, device: str = "cpu"):
    """(policy, preprocessor, postprocessor) of a local LeRobot pretrained-model directory (never a hub id)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a LeRobot pretrained-model directory (no config.json); pass the "
                                "local directory that PreTrainedPolicy.save_pretrained wrote")
    PreTrainedConfig, get_policy_class, make_processors = import_lerobot()
    config = PreTrainedConfig.from_pretrained(str(path))
    policy = get_policy_class(config.type).from_pretrained(str(path))
    policy.to(device)
    policy.eval()
    pre = post = None
    if make_processors is not None:
        overrides = {"device_processor": {"device": str(device)}}
        pre, post = make_processors(policy.config, pretrained_path=str(path), preprocessor_overrides=overrides,
                                    postprocessor_overrides=overrides)
    return policy, pre, post


def _feature_shape(feature) -> tuple[int, ...]:
    shape = getattr(feature, "shape", None)
    if shape is None and isinstance(feature, dict):
        shape = feature.get("shape")
    return tuple(int(x) for x in shape)


class LeRobotPolicy(BasePolicy):
    kind = "lerobot"

    def __init__(self, model, mapping: LeRobotMapping, spec: PolicySpec, preprocessor=None, postprocessor=None):
        """`model`: a loaded LeRobot PreTrainedPolicy (config with input_features, predict_action_chunk)."""
        self.model, self.mapping, self.spec = model, mapping, spec
        self.pre, self.post = preprocessor, postprocessor
        check_mapping(model.config, mapping, spec)

    @classmethod
    def from_pretrained(cls, path: str | Path, env, state_keys: Sequence[str] | None = None,
                        cameras: dict[str, str] | None = None, instruction: bool | None = None,
                        action_horizon: int | None = None, device: str = "cpu", loaded=None) -> "LeRobotPolicy":
        """Wrap the LeRobot policy in the directory `path` for `env` (its task, actions and cameras).

        state_keys default to every vector key of the env (sorted), cameras to the LeRobot image keys whose
        suffix names an env camera, instruction to whether the env gives one. `loaded`: an already loaded
        (policy, preprocessor, postprocessor), instead of loading `path`."""
        model, pre, post = loaded if loaded is not None else load_lerobot(path, device)
        theirs = dict(model.config.input_features)
        if state_keys is None:
            state_keys = sorted(env.obs_dims) if STATE in theirs else ()
        if cameras is None:
            env_cams = {k[len("images/"):] for k in env_image_shapes(env)}
            cameras = {k[len(IMAGE_PREFIX):]: k for k in theirs if k.startswith(IMAGE_PREFIX)
                       and k[len(IMAGE_PREFIX):] in env_cams}
        if instruction is None:
            instruction = hasattr(env, "instruction")
        mapping = LeRobotMapping(str(Path(path).resolve()), tuple(state_keys), dict(cameras), bool(instruction),
                                 action_horizon, device)
        shapes = env_image_shapes(env)
        spec = PolicySpec.of_env(
            env, obs_dims={k: int(env.obs_dims[k]) for k in mapping.state_keys},
            action_horizon=resolve_action_horizon(model.config, action_horizon),
            image_shapes={image_key(c): list(shapes.get(image_key(c), ())) for c in mapping.cameras},
            instruction=mapping.instruction,
        )
        return cls(model, mapping, spec, pre, post)

    def reset(self, env_ids=None) -> None:
        """LeRobot's reset empties its internal queues; per-env state is not kept (act uses the chunk API)."""
        if env_ids is None and hasattr(self.model, "reset"):
            self.model.reset()

    def batch(self, obs_history: dict[str, np.ndarray]) -> dict[str, Any]:
        """The LeRobot batch for the newest observation of obs_history (see the module docstring)."""
        import torch

        out: dict[str, Any] = {}
        device = self.mapping.device
        if self.mapping.state_keys:
            state = np.concatenate([np.asarray(obs_history[k], np.float32)[:, -1] for k in self.mapping.state_keys], -1)
            out[STATE] = torch.as_tensor(state, device=device)
        for cam, theirs in self.mapping.cameras.items():
            frames = np.asarray(obs_history[image_key(cam)])[:, -1]  # uint8 [B, H, W, 3]
            out[theirs] = torch.as_tensor(frames, device=device).permute(0, 3, 1, 2).float().div_(255.0)
        if self.mapping.instruction:
            b = len(next(iter(out.values()))) if out else len(obs_history[INSTRUCTION])
            out["task"] = [str(t) for t in check_instructions(obs_history.get(INSTRUCTION), b)]
        return out

    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        batch = self.batch(obs_history)
        if self.pre is not None:
            batch = self.pre(batch)
        with torch.inference_mode():
            chunk = self.model.predict_action_chunk(batch)
        if self.post is not None:
            chunk = self.post(chunk)
        chunk = chunk.detach().float().cpu().numpy()
        if chunk.ndim == 2:  # a policy without chunks: one action per call
            chunk = chunk[:, None]
        if chunk.shape[2] != self.spec.action_dim:
            raise SpecMismatch(f"the LeRobot policy returned actions of dim {chunk.shape[2]}, the env takes "
                               f"{self.spec.action_dim}")
        return np.clip(chunk[:, : self.spec.action_horizon], -1.0, 1.0).astype(np.float32)

    # ---- persistence: a reference to the LeRobot directory, not a copy of its weights --------------------
    def config(self) -> dict[str, Any]:
        m = dataclasses.asdict(self.mapping)
        m["state_keys"] = list(m["state_keys"])
        return m

    @classmethod
    def from_checkpoint(cls, tensors: dict, config: dict, spec: PolicySpec, device: str) -> "LeRobotPolicy":
        from robot_rl.common.checkpoint import CheckpointError

        mapping = LeRobotMapping(**{**config, "device": device})
        try:
            model, pre, post = load_lerobot(mapping.path, device)
        except (ImportError, FileNotFoundError) as e:
            raise CheckpointError(f"this checkpoint wraps the LeRobot policy {mapping.path}, which cannot be loaded: "
                                  f"{e}") from None
        return cls(model, mapping, spec, pre, post)


def resolve_action_horizon(config, action_horizon: int | None) -> int:
    """Actions executed per chunk: ours if given, else LeRobot's n_action_steps, else its chunk length, else 1."""
    if action_horizon is not None:
        return int(action_horizon)
    for name in ("n_action_steps", "chunk_size", "horizon"):
        v = getattr(config, name, None)
        if isinstance(v, int) and v >= 1:
            return v
    return 1


def check_mapping(config, mapping: LeRobotMapping, spec: PolicySpec) -> None:
    """SpecMismatch naming every LeRobot input our mapping does not feed, or feeds with the wrong size."""
    theirs = {k: _feature_shape(f) for k, f in dict(config.input_features).items()}
    problems = []
    n_obs = getattr(config, "n_obs_steps", 1)
    if n_obs not in (None, 1):
        problems.append(f"it stacks n_obs_steps={n_obs} observations in internal queues; only n_obs_steps=1 "
                        "policies can be queried per env")
    if STATE in theirs:
        dim = sum(spec.obs_dims[k] for k in mapping.state_keys)
        if not mapping.state_keys:
            problems.append(f"it reads {STATE} {list(theirs[STATE])}: map vector keys to it (state_keys)")
        elif theirs[STATE] != (dim,):
            problems.append(f"{STATE}: it expects {list(theirs[STATE])}, state_keys {list(mapping.state_keys)} give "
                            f"[{dim}]")
    elif mapping.state_keys:
        problems.append(f"state_keys {list(mapping.state_keys)} are mapped, but it reads no {STATE}")
    fed = {v: c for c, v in mapping.cameras.items()}
    for k, shape in theirs.items():
        if not k.startswith(IMAGE_PREFIX):
            continue
        if k not in fed:
            problems.append(f"it reads {k}: map one of our cameras to it (cameras={{<camera>: {k!r}}})")
            continue
        ours = spec.image_shapes.get(image_key(fed[k]))
        if ours and tuple(shape) != (3, ours[0], ours[1]):
            problems.append(f"{k}: it expects {shape[1]}x{shape[2]}, images/{fed[k]} is {ours[0]}x{ours[1]}")
    extra = [v for v in fed if v not in theirs]
    if extra:
        problems.append(f"cameras map to {extra}, which it does not read (it reads {sorted(theirs)})")
    action = getattr(config, "output_features", {}).get("action") if hasattr(config, "output_features") else None
    if action is not None and _feature_shape(action) != (spec.action_dim,):
        problems.append(f"action: it emits {list(_feature_shape(action))}, the env takes [{spec.action_dim}]")
    if problems:
        raise SpecMismatch(f"LeRobot policy {mapping.path} does not fit: " + "; ".join(problems))
