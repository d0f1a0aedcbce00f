"""The reward model: a progress model Phi(obs[, instruction]) -> [0, 1] and a success classifier with its
calibrated threshold, saved together as one checkpoint (safetensors + JSON, robot_rl.common.checkpoint).

    model = load_reward_model("runs/train_reward/<run>")     # a run directory or its reward_model/
    model.spec.check_env(env)                                # SpecMismatch naming every difference
    phi = model.progress(obs)                                # obs: {key: [N, dim]} -> [N] in [0, 1]
    p, hit = model.success_prob(obs), model.success(obs)     # [N] probability, [N] bool (p >= threshold)

Both networks read an observation dict through `ObsEncoder`, one encoder per key chosen by the key's kind
(`ENCODERS`): state vectors (`state`), camera frames "images/<camera>" (`image`: the VLA's ResNet image
encoder, policies/encoders.py, one per camera, narrower by default and reading frames average-pooled by
`downsample`: frames through the ResNet are the training cost on CPU), and an optional instruction per row
(`spec.instruction`: the frozen sentence encoder's embedding, projected; state-only models have none and
ignore it). Models that read frames take them as uint8 and run inference in chunks of `IMAGE_CHUNK` rows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from robot_rl.policies.base import SpecMismatch, env_image_shapes, image_key

KIND = "reward_model"
CHECKPOINT_DIR = "reward_model"  # inside a robot-rl-train-reward run directory


@dataclasses.dataclass
class RewardSpec:
    """What a reward model reads."""

    task: str
    obs_dims: dict[str, int]  # vector observation keys and their sizes
    encoders: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> ENCODERS name ("state", "image")
    instruction: bool = False  # reads a language instruction per row (the frozen sentence encoder, extra `vla`)
    image_shapes: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # "images/<camera>" -> [H, W, 3]

    def __post_init__(self):
        self.obs_dims = {k: int(v) for k, v in self.obs_dims.items()}
        self.image_shapes = {image_key(k): [int(x) for x in v] for k, v in (self.image_shapes or {}).items()}
        self.encoders = {**{k: self.encoders.get(k, "state") for k in self.obs_dims},
                         **{k: self.encoders.get(k, "image") for k in self.image_shapes}}
        self.instruction = bool(self.instruction)

    @property
    def inputs(self) -> dict:
        """Every key it reads -> its size (int) or frame shape ([H, W, 3])."""
        return {**self.obs_dims, **self.image_shapes}

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RewardSpec":
        return cls(**d)

    def problems(self, task: str, obs_dims: dict[str, int], image_shapes: dict | None = None) -> list[str]:
        out = []
        if task != self.task:
            out.append(f"task: reward model {self.task!r}, {{other}} {task!r}")
        for k, d in self.obs_dims.items():
            if k not in obs_dims:
                out.append(f"observation {k!r}: the reward model reads it, {{other}} has only {sorted(obs_dims)}")
            elif int(obs_dims[k]) != d:
                out.append(f"observation {k!r}: reward model expects dim {d}, {{other}} gives {obs_dims[k]}")
        shapes = {image_key(k): tuple(v) for k, v in (image_shapes or {}).items()}
        need = ",".join(c[len("images/"):] for c in sorted(self.image_shapes))
        for k, want in self.image_shapes.items():
            if k not in shapes:
                out.append(f"observation {k!r}: the reward model reads this camera, {{other}} has cameras "
                           f"{sorted(c[len('images/'):] for c in shapes)} (set env.cameras=[{need}])")
            elif tuple(shapes[k]) != tuple(want):
                out.append(f"reward model expects {k} {want[0]}x{want[1]}, {{other}} gives {shapes[k][0]}x{shapes[k][1]}")
        return out

    def check(self, task: str, obs_dims: dict[str, int], what: str, image_shapes: dict | None = None) -> None:
        """Raise SpecMismatch naming every difference from a task + observation spec (`what`: 'env', ...)."""
        problems = [p.format(other=what) for p in self.problems(task, obs_dims, image_shapes)]
        if problems:
            raise SpecMismatch(f"reward model does not fit the {what}: " + "; ".join(problems) +
                               f". Train one for this task with robot-rl-train-reward task={task}")

    def check_env(self, env) -> None:
        self.check(env.task_name, dict(env.obs_dims), "env", env_image_shapes(env))
        if self.instruction and not hasattr(env, "instruction"):
            raise SpecMismatch("reward model does not fit the env: it reads a language instruction, the env gives "
                               "none (env.instruction)")


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


IMAGE_ENCODER = {  # defaults of the reward models' camera encoder (saved in each checkpoint's config)
    "channels": [16, 32, 64, 64],  # ResNet stage widths (the VLA's default is [32, 64, 128, 128]: ~4x the cost)
    "groups": 8,  # GroupNorm groups
    "grid": 3,  # grid x grid tokens per frame
    "token_dim": 32,  # features per token: a frame gives grid^2 * token_dim features
    "shift": 4,  # training augmentation: random shift by up to this many pixels of the stored frame (0: off)
    "downsample": 2,  # frames are average-pooled by this factor first (96x96 -> 48x48: ~4x cheaper)
}
IMAGE_CHUNK = 256  # rows per inference pass of a model that reads frames (bounds memory; state-only: one pass)


class ImageFeatures(nn.Module):
    """A camera key: uint8 frames [B, H, W, 3] -> the flattened grid tokens of the shared ResNet image encoder
    (policies/encoders.py), [B, grid^2 * token_dim]; pixels are normalized inside, so no data statistics.
    In training mode the frames are randomly shifted (DrQ-style, `shift` pixels) before pooling."""

    def __init__(self, shape: Sequence[int], channels: Sequence[int] = tuple(IMAGE_ENCODER["channels"]),
                 groups: int = IMAGE_ENCODER["groups"], grid: int = IMAGE_ENCODER["grid"],
                 token_dim: int = IMAGE_ENCODER["token_dim"], shift: int = IMAGE_ENCODER["shift"],
                 downsample: int = IMAGE_ENCODER["downsample"]):
        super().__init__()
        from robot_rl.policies.encoders import ImageEncoder, ImageEncoderConfig

        self.shape = tuple(int(x) for x in shape)
        if len(self.shape) != 3 or self.shape[2] != 3:
            raise ValueError(f"image encoder: frames must be [H, W, 3], got {list(self.shape)}")
        if not (isinstance(downsample, int) and downsample >= 1 and min(self.shape[:2]) // downsample >= 8):
            raise ValueError(f"image_encoder.downsample={downsample!r} must be a whole number >= 1 that leaves "
                             f">= 8 pixels of the {self.shape[0]}x{self.shape[1]} frames")
        if not (isinstance(token_dim, int) and token_dim >= 1):
            raise ValueError(f"image_encoder.token_dim={token_dim!r} must be a whole number >= 1")
        self.shift, self.downsample = int(shift), int(downsample)
        self.net = ImageEncoder(ImageEncoderConfig(channels=tuple(channels), groups=groups, grid=grid, shift=shift),
                                token_dim)
        self.out_dim = self.net.grid ** 2 * token_dim

    def set_stats(self, x: np.ndarray) -> None:
        """Nothing to fit: pixels are normalized by the encoder itself."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from robot_rl.policies.encoders import ImageEncoder, random_shift

        x = ImageEncoder.to_float(x) if x.dtype == torch.uint8 else x  # [B, 3, H, W] in [0, 1]
        if self.training and self.shift > 0:
            x = random_shift(x, self.shift)
        if self.downsample > 1:
            x = torch.nn.functional.avg_pool2d(x, self.downsample)
        return self.net(x).flatten(1)


ENCODERS = {"state": StateEncoder, "image": ImageFeatures}  # name -> class(size or frame shape, **options)
LANGUAGE_DIM = 64  # the instruction embedding is projected to this many features
TEXT_SCALE_FLOOR = 0.02  # lowest scale of the centred instruction embeddings (ObsEncoder.set_text_stats)


def image_encoder_options(options: dict | None) -> dict:
    """IMAGE_ENCODER with `options` over it, checked: ValueError naming an unknown key or a bad value."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(IMAGE_ENCODER))
    if unknown:
        raise ValueError(f"unknown image_encoder key(s) {unknown}; valid: {', '.join(sorted(IMAGE_ENCODER))}")
    out = {**IMAGE_ENCODER, **options}

    def whole(v, lo: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    for k in ("groups", "grid", "token_dim", "downsample", "shift"):
        if not whole(out[k], 0 if k == "shift" else 1):
            raise ValueError(f"image_encoder.{k}={out[k]!r} must be a whole number >= {0 if k == 'shift' else 1}")
    ch = out["channels"]
    if not (isinstance(ch, (list, tuple)) and ch and all(whole(c, 1) and c % out["groups"] == 0 for c in ch)):
        raise ValueError(f"image_encoder.channels={ch!r} must be a list of widths >= 1, each divisible by "
                         f"image_encoder.groups={out['groups']}")
    out["channels"] = [int(c) for c in ch]
    return out


class ObsEncoder(nn.Module):
    """{key: [B, ...]} (+ instruction) -> features [B, out_dim]: one encoder per key, concatenated in key order,
    then the projected instruction embedding (spec.instruction)."""

    def __init__(self, spec: RewardSpec, image_encoder: dict | None = None):
        super().__init__()
        unknown = {k: e for k, e in spec.encoders.items() if e not in ENCODERS}
        if unknown:
            raise ValueError(f"unknown encoder(s) {unknown}; known: {sorted(ENCODERS)}")
        inputs = spec.inputs
        if not inputs and not spec.instruction:
            raise ValueError("a reward model must read something: observation keys, cameras or the instruction")
        options = {"image": image_encoder_options(image_encoder)}  # encoder name -> keyword arguments
        self.keys = tuple(sorted(inputs))
        self.enc = nn.ModuleDict({k: ENCODERS[spec.encoders[k]](inputs[k], **options.get(spec.encoders[k], {}))
                                  for k in self.keys})
        self.out_dim = sum(e.out_dim for e in self.enc.values())
        self.text = None
        if spec.instruction:
            from robot_rl.policies.encoders import TEXT_DIM, sentence_encoder

            self.text = sentence_encoder()  # frozen and shared, not a submodule: never trained or saved
            # embeddings centred on the training instructions' mean and scaled by their RMS spread (one scale for
            # every dimension: the geometry is kept): instructions differ in a small part of a unit vector, which
            # the projection would otherwise have to learn to amplify
            self.register_buffer("text_center", torch.zeros(TEXT_DIM))
            self.register_buffer("text_scale", torch.ones(()))
            self.language = nn.Linear(TEXT_DIM, LANGUAGE_DIM)
            self.out_dim += LANGUAGE_DIM

    def forward(self, obs: dict[str, torch.Tensor], instruction: Sequence[str] | None = None) -> torch.Tensor:
        parts = [self.enc[k](obs[k]) for k in self.keys]
        if self.text is not None:
            from robot_rl.policies.base import check_instructions
            from robot_rl.policies.encoders import as_strings

            n = len(parts[0]) if parts else len(instruction)
            if instruction is not None and not isinstance(instruction, str):  # one string: every row
                instruction = as_strings(instruction)
            text = check_instructions(instruction, n)
            parts.append(self.language((self.text.encode(list(text)) - self.text_center) / self.text_scale))
        return torch.cat(parts, dim=-1)

    def set_text_stats(self, instruction: Sequence[str]) -> None:
        """Centre and scale of the instruction embeddings from the training rows' instructions [n] (repeats weigh)."""
        if self.text is None:
            return
        from robot_rl.policies.encoders import as_strings

        uniq, counts = np.unique(np.asarray(as_strings(instruction), dtype=str), return_counts=True)
        emb = self.text.encode(list(uniq)).double()
        w = torch.as_tensor(counts / counts.sum(), dtype=torch.float64)[:, None]
        center = (w * emb).sum(0)
        spread = float(torch.sqrt((w * (emb - center) ** 2).sum(0).mean()))
        self.text_center.copy_(center.float())
        # floor: about one colour word's change (0.015-0.034 per dimension over color_lift's instructions), so a
        # model trained on one instruction does not blow an unseen paraphrase up
        self.text_scale.fill_(max(spread, TEXT_SCALE_FLOOR))


class ScoreNet(nn.Module):
    """Observation dict -> one logit per row: encoder, MLP with LayerNorm + SiLU."""

    def __init__(self, spec: RewardSpec, hidden: Sequence[int] = (256, 256), image_encoder: dict | None = None):
        super().__init__()
        self.encoder = ObsEncoder(spec, image_encoder)
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
                 hidden: Sequence[int] = (256, 256), info: dict | None = None, image_encoder: dict | None = None):
        self.spec, self.progress_net, self.success_net = spec, progress_net, success_net
        self.threshold = float(threshold)
        self.hidden = tuple(int(h) for h in hidden)
        self.info = dict(info or {})  # training summary kept in the checkpoint (data, metrics)
        self.image_encoder = image_encoder_options(image_encoder)  # camera encoder options (models with cameras)

    @classmethod
    def build(cls, spec: RewardSpec, hidden: Sequence[int] = (256, 256),
              image_encoder: dict | None = None) -> "RewardModel":
        """Both networks, untrained; `image_encoder`: IMAGE_ENCODER keys to change (models that read cameras)."""
        return cls(spec, ScoreNet(spec, hidden, image_encoder), ScoreNet(spec, hidden, image_encoder), 0.5, hidden,
                   image_encoder=image_encoder)

    @property
    def reads_frames(self) -> bool:
        return bool(self.spec.image_shapes)

    # ---- inference (numpy in, numpy out) -------------------------------------------------------------
    def _tensors(self, obs: dict) -> dict[str, torch.Tensor]:
        missing = [k for k in self.spec.inputs if k not in obs]
        if missing:
            raise KeyError(f"reward model reads observation key(s) {missing}; got {sorted(obs)}")
        out = {k: torch.as_tensor(np.asarray(obs[k]), dtype=torch.float32) for k in self.spec.obs_dims}
        out.update({k: torch.as_tensor(np.asarray(obs[k], dtype=np.uint8)) for k in self.spec.image_shapes})
        return out

    @torch.no_grad()
    def _score(self, net: ScoreNet, obs: dict, instruction) -> np.ndarray:
        """sigmoid(net(obs, instruction)) [N] float32; models that read frames go in chunks of IMAGE_CHUNK rows."""
        net.eval()
        first = next((k for k in self.spec.inputs if k in obs), None)  # a missing key: _tensors names it
        n = len(obs[first]) if first is not None else None
        if not self.reads_frames or n is None or n <= IMAGE_CHUNK:
            return torch.sigmoid(net(self._tensors(obs), instruction)).numpy().astype(np.float32)
        per_row = instruction is not None and not isinstance(instruction, str)  # else None or one for every row
        if per_row:
            instruction = np.asarray(list(instruction), dtype=object)
            if len(instruction) != n:
                raise ValueError(f"instruction has {len(instruction)} entries, expected {n} (one per row)")
        out = []
        for i in range(0, n, IMAGE_CHUNK):
            part = {k: obs[k][i:i + IMAGE_CHUNK] for k in self.spec.inputs}
            text = instruction[i:i + IMAGE_CHUNK] if per_row else instruction
            out.append(torch.sigmoid(net(self._tensors(part), text)).numpy())
        return np.concatenate(out).astype(np.float32)

    def progress(self, obs: dict, instruction: Sequence[str] | None = None) -> np.ndarray:
        """Phi(obs) in [0, 1], [N] float32, for obs {key: [N, dim] | uint8 [N, H, W, 3]} (+ N instructions)."""
        return self._score(self.progress_net, obs, instruction)

    def success_prob(self, obs: dict, instruction: Sequence[str] | None = None) -> np.ndarray:
        """Classifier probability that obs is a success state, [N] float32."""
        return self._score(self.success_net, obs, instruction)

    def success(self, obs: dict, instruction: Sequence[str] | None = None) -> np.ndarray:
        """success_prob >= the calibrated threshold, [N] bool."""
        return self.success_prob(obs, instruction) >= self.threshold

    # ---- checkpoints ---------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        out = {"kind": KIND, "spec": self.spec.to_dict(), "threshold": self.threshold, "hidden": list(self.hidden),
               "info": self.info}
        if self.reads_frames:
            out["image_encoder"] = self.image_encoder
        return out

    def save(self, path: str | Path) -> Path:
        """Write model.safetensors + config.json atomically to the directory `path`."""
        from robot_rl.common import checkpoint

        tensors = {f"progress.{k}": v for k, v in self.progress_net.state_dict().items()}
        tensors.update({f"success.{k}": v for k, v in self.success_net.state_dict().items()})
        return checkpoint.save(path, tensors, self.config())


def load_reward_model(path: str | Path) -> RewardModel:
    """A reward model from its checkpoint directory or from the robot-rl-train-reward run directory holding it."""
    from robot_rl.common import checkpoint

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
        image = cfg.get("image_encoder")
        model = RewardModel(spec, ScoreNet(spec, hidden, image), ScoreNet(spec, hidden, image), threshold, hidden,
                            cfg.get("info"), image)
        for name, net in (("progress", model.progress_net), ("success", model.success_net)):
            head = f"{name}."
            net.load_state_dict({k[len(head):]: v for k, v in tensors.items() if k.startswith(head)})
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise checkpoint.CheckpointError(f"reward model checkpoint {path} is malformed ({e})") from None
    return model


def rollout_mismatch(model: RewardModel, base_sha256: str | None, base_path: str | None = None) -> str | None:
    """A warning (None: nothing to say) when the reward model's policy rollouts, its failed examples, hold none of
    the base policy a residual run refines (`base_sha256`: its BasePolicy.weights_sha256(), which the run's resume
    fingerprint already holds): both networks then judge states of how this base fails that they never saw. The
    model's info["rollout_policies"] (robot-rl-train-reward, from the stores' collect metadata) is matched by
    weights hash, so a copied or moved checkpoint still counts; models or stores from before the hash was
    recorded give no warning."""
    recorded = [r for r in model.info.get("rollout_policies") or [] if r.get("sha256")]
    if not recorded or base_sha256 is None or any(r["sha256"] == base_sha256 for r in recorded):
        return None
    seen = ", ".join(f"{r.get('policy')} ({r.get('episodes')} episodes)" for r in recorded)
    where = base_path or "BASE"
    return (f"the reward model's policy rollouts come from {seen}, none from the base this run refines ({where}), "
            "so its progress model and classifier never saw how this base fails. Record them with "
            f"robot-rl-collect task={model.spec.task} policy={where} "
            "episodes=200 out=ROLLOUTS (an existing store is appended to) and retrain robot-rl-train-reward with "
            "rollouts=ROLLOUTS")
