"""Vision-language-action policy: cameras + instruction + proprio -> action chunks by flow matching.

Training (rectified flow): for a normalized action chunk x1 [B, pred_horizon, A], noise x0 ~ N(0, I) and
t ~ U(0, 1), the head regresses the velocity x1 - x0 at x_t = (1 - t) x0 + t x1. Acting integrates
dx/dt = v(x, t) from noise with `flow_steps` Euler steps; the trunk (image encoder, language and proprio
tokens, transformer) runs once per call and its memory serves every step (policies/vla/model.py).
Vector observations and actions are normalized as in the diffusion policy (policies/normalizer.py, saved
with the weights); frames stay uint8 until the network; the sentence encoder is frozen and shared
(policies/encoders.py). `act` returns the first `action_horizon` actions, EMA weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import torch

from robot_rl.policies.base import INSTRUCTION, BasePolicy, PolicySpec, SpecMismatch, check_instructions, image_key
from robot_rl.policies.ema import EMA, EMAWeights
from robot_rl.policies.losses import weighted_mse
from robot_rl.policies.encoders import TEXT_ENCODER, ImageEncoderConfig, as_strings, load_pretrained, sentence_encoder
from robot_rl.policies.normalizer import Normalizer
from robot_rl.policies.vla.model import VLANet
from robot_rl.common.config import from_mapping
from robot_rl.data.stats import NORMALIZATIONS


@dataclasses.dataclass
class VLAConfig:
    """Every tunable number of the VLA policy, sized to train on a CPU: ~0.15 s per batch of 32 on one core; on
    color_lift (600 demos, batch_size=32 lr=5e-4) 0.72 success after 14,000 steps. On a GPU, wider channels
    ([32, 64, 128]), more layers and obs_horizon 2 are affordable. Needs the `vla` extra for the frozen sentence
    encoder when instruction is true, and a store recorded with its cameras (robot-rl-collect ...
    env.cameras=[front,wrist]); evaluating in sim needs the same cameras on the env."""

    kind: ClassVar[str] = "vla"

    cameras: tuple[str, ...] = ("front", "wrist")  # camera observations it reads (images/<camera>); sizes from data
    instruction: bool = True  # condition on the episode's language instruction
    # vector observation keys it reads (e.g. ["proprio"]: where objects are comes from the cameras); None = every
    # vector key of the env (object poses included, where the sim or a pose estimator gives them)
    state_keys: tuple[str, ...] | None = None
    obs_horizon: int = 1  # observations (frames and proprio) per call
    pred_horizon: int = 16  # actions predicted per call, from the current step on
    action_horizon: int = 8  # actions executed per call (open loop)
    d_model: int = 128  # token width of trunk and head
    layers: int = 2  # trunk transformer layers
    heads: int = 4  # attention heads (d_model divisible by it)
    head_layers: int = 1  # action-head transformer layers (each: self-attention, cross-attention to the trunk, MLP)
    mlp_ratio: int = 4  # MLP width / d_model
    dropout: float = 0.0
    flow_steps: int = 10  # Euler integration steps at inference
    # the camera encoder: a small ResNet whose last stage becomes one keypoint token per frame, FiLM-conditioned
    # on the instruction (ImageEncoderConfig documents each key)
    image_encoder: ImageEncoderConfig = dataclasses.field(default_factory=lambda: ImageEncoderConfig(
        channels=(16, 32, 64), pool="keypoints", film=True))
    obs_norm: str = "minmax"  # minmax | meanstd, for vector observations
    ema_power: float = 0.75
    seed: int = 0  # sampling noise / augmentation generator seed
    jit: bool = True  # act through frozen TorchScript graphs of the EMA trunk and head (faster on CPU at batch 1)
    device: str = "cpu"

    def __post_init__(self):
        if isinstance(self.image_encoder, dict):
            self.image_encoder = from_mapping(ImageEncoderConfig, self.image_encoder, "policy.image_encoder")
        self.cameras = tuple(str(c)[len("images/"):] if str(c).startswith("images/") else str(c)
                             for c in self.cameras)

    def validate(self) -> None:
        for name in ("obs_horizon", "pred_horizon", "d_model", "layers", "heads", "head_layers", "mlp_ratio",
                     "flow_steps"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"policy.{name}={v!r} must be a whole number >= 1")
        if not (1 <= self.action_horizon <= self.pred_horizon):
            raise ValueError(f"policy.action_horizon={self.action_horizon} must be in [1, pred_horizon={self.pred_horizon}]")
        if self.d_model % self.heads:
            raise ValueError(f"policy.d_model={self.d_model} must be divisible by policy.heads={self.heads}")
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"policy.cameras={list(self.cameras)} names a camera twice")
        if self.state_keys is not None and not all(isinstance(k, str) and k for k in self.state_keys):
            raise ValueError(f"policy.state_keys={list(self.state_keys)} must be observation key names, e.g. [proprio]")
        if not self.cameras and not self.instruction:
            raise ValueError("policy.cameras=[] and policy.instruction=false: a VLA needs vision or language "
                             "(train the diffusion policy for state-only control)")
        if not (0.0 <= self.dropout < 1.0):
            raise ValueError(f"policy.dropout={self.dropout} must be in [0, 1)")
        if self.obs_norm not in NORMALIZATIONS:
            raise ValueError(f"policy.obs_norm={self.obs_norm!r}; valid: {', '.join(NORMALIZATIONS)}")

    @property
    def image_keys(self) -> list[str]:
        return [image_key(c) for c in self.cameras]



class VLAPolicy(EMAWeights, BasePolicy):
    kind = "vla"

    def __init__(self, spec: PolicySpec, cfg: VLAConfig, normalizer: Normalizer):
        cfg.validate()
        if spec.obs_horizon != cfg.obs_horizon or spec.action_horizon != cfg.action_horizon:
            raise ValueError("spec and config disagree on obs_horizon / action_horizon")
        if sorted(spec.image_shapes) != sorted(cfg.image_keys):
            raise ValueError(f"spec cameras {sorted(spec.image_shapes)} differ from policy.cameras {cfg.image_keys}")
        if spec.instruction != cfg.instruction:
            raise ValueError("spec and config disagree on instruction")
        self.spec, self.cfg = spec, cfg
        self.device = torch.device(cfg.device)
        self.obs_keys = tuple(sorted(spec.obs_dims))
        self.image_keys = tuple(sorted(spec.image_shapes))
        missing = [k for k in (*self.obs_keys, "action") if k not in normalizer.center]
        if missing:
            raise SpecMismatch(f"normalizer has no statistics for {missing}")
        self.normalizer = normalizer.to(self.device)
        self.net = VLANet(cfg, self.image_keys, sum(spec.obs_dims.values()), spec.action_dim, cfg.instruction).to(self.device)
        self.ema = EMA(self.net, power=cfg.ema_power)
        self.generator = torch.Generator(self.device).manual_seed(cfg.seed)
        self.aug_generator = torch.Generator().manual_seed(cfg.seed + 1)  # training augmentation (CPU indices)
        self.text = sentence_encoder() if cfg.instruction else None
        self._traced: tuple | None = None
        self._ema_params = list(self.ema.model.parameters())

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_stats(cls, spec_fields: dict, cfg: VLAConfig, stats: dict) -> "VLAPolicy":
        """A fresh policy from episode-store statistics (KeyStats of "obs/<key>" and "action"); spec_fields
        must hold image_shapes for cfg.cameras. Loads cfg.image_encoder.pretrained when set."""
        spec = PolicySpec(**{**spec_fields, "instruction": cfg.instruction}, obs_horizon=cfg.obs_horizon,
                          action_horizon=cfg.action_horizon)
        needed = [f"obs/{k}" for k in spec.obs_dims] + ["action"]
        missing = [k for k in needed if k not in stats]
        if missing:
            raise SpecMismatch(f"the dataset lacks key(s) the policy needs: {missing}")
        modes = {k: cfg.obs_norm for k in spec.obs_dims}
        modes["action"] = "minmax"
        named = {k: stats[f"obs/{k}"] for k in spec.obs_dims}
        named["action"] = stats["action"]
        policy = cls(spec, cfg, Normalizer.from_stats(named, modes))
        if cfg.image_encoder.pretrained:
            load_pretrained(policy.net.image_encoder, cfg.image_encoder.pretrained)
            policy.ema.model.load_state_dict(policy.net.state_dict())
        return policy

    # ---- inputs -------------------------------------------------------------------------------------
    def _inputs(self, obs: dict) -> tuple[dict, torch.Tensor | None, torch.Tensor | None]:
        """(frames {key: uint8 [B, To, H, W, 3]}, normalized proprio [B, To, P] or None, text [B, 384] or None)."""
        images = {k: torch.as_tensor(obs[k], device=self.device) for k in self.image_keys}  # uint8, no copy on CPU
        proprio = None
        if self.obs_keys:
            proprio = torch.cat([self.normalizer.normalize(k, torch.as_tensor(obs[k], dtype=torch.float32,
                                                                               device=self.device))
                                 for k in self.obs_keys], dim=-1)
        text = None
        if self.text is not None:
            if INSTRUCTION not in obs:
                raise ValueError("this policy reads a language instruction: obs_history needs 'instruction' "
                                 "(a str array [B]; PolicyRunner.act(obs, instruction) passes it)")
            text = self.text.encode(as_strings(obs[INSTRUCTION])).to(self.device)
        return images, proprio, text

    def _check(self, obs_history: dict) -> int:
        """Batch size of a well-formed obs_history; ValueError naming the first bad key."""
        to = self.cfg.obs_horizon
        missing = [k for k in (*self.obs_keys, *self.image_keys) if k not in obs_history]
        if missing:
            raise ValueError(f"obs_history lacks {missing}; the policy reads {[*self.obs_keys, *self.image_keys]}")
        b = None
        for k in self.obs_keys:
            v = np.asarray(obs_history[k])
            if v.ndim != 3 or v.shape[1] != to or v.shape[2] != self.spec.obs_dims[k]:
                raise ValueError(f"obs_history[{k!r}] has shape {v.shape}, expected [B, {to}, {self.spec.obs_dims[k]}]")
            b = v.shape[0]
        for k in self.image_keys:
            v = np.asarray(obs_history[k])
            want = (to, *self.spec.image_shapes[k])
            if v.dtype != np.uint8 or v.ndim != 5 or tuple(v.shape[1:]) != want:
                raise ValueError(f"obs_history[{k!r}] is {v.dtype} {v.shape}, expected uint8 [B, {', '.join(map(str, want))}]"
                                 f" (policy expects {k} {want[1]}x{want[2]})")
            b = v.shape[0]
        if self.spec.instruction:
            check_instructions(obs_history.get(INSTRUCTION), b if b is not None else len(obs_history.get(INSTRUCTION, [])))
        return b

    # ---- training -----------------------------------------------------------------------------------
    def loss(self, obs: dict, action: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """Flow-matching MSE for a batch: obs {key: [B, To, d] | uint8 [B, To, H, W, 3], "instruction": [B]},
        action [B, pred_horizon, A]; frames are randomly shifted (policy.image_encoder.shift)."""
        images, proprio, text = self._inputs(obs)
        memory = self.net.encode(images, proprio, text, augment=True, generator=self.aug_generator)
        x1 = self.normalizer.normalize("action", action.to(self.device))
        x0 = torch.randn_like(x1)
        t = torch.rand(x1.shape[0], device=x1.device)
        xt = (1 - t)[:, None, None] * x0 + t[:, None, None] * x1
        return weighted_mse(self.net.velocity(xt, t, memory), x1 - x0, weight)

    # ---- inference ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def predict_sequence(self, obs: dict) -> torch.Tensor:
        """Action sequence [B, pred_horizon, A] (unnormalized) with the EMA weights: trunk once, then
        `flow_steps` Euler steps of the head from Gaussian noise."""
        return self._sample(*self._memory(obs))

    def _sample(self, memory: torch.Tensor, velocity) -> torch.Tensor:
        """Unnormalized action sequence [B, pred_horizon, A] from the trunk memory."""
        b = memory.shape[0]
        x = torch.randn((b, self.cfg.pred_horizon, self.spec.action_dim), generator=self.generator, device=self.device)
        k = self.cfg.flow_steps
        for i in range(k):
            t = torch.full((b,), i / k, device=self.device)
            x = x + velocity(x, t, memory) / k
        return self.normalizer.unnormalize("action", x.clamp(-1.0, 1.0))

    def _memory(self, obs: dict):
        """(trunk memory [B, N, d_model] of the EMA network, its velocity function)."""
        images, proprio, text = self._inputs(obs)
        args = _encoder_args(self.image_keys, images, proprio, text)
        encode, velocity = self._inference_fns(args)
        return encode(*(a for a in args if a is not None)), velocity

    @property
    def feature_dim(self) -> int:
        return self.net.n_tokens * self.cfg.d_model

    @torch.inference_mode()
    def features(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        """The trunk memory, flattened: [B, n_tokens * d_model] (image keypoint / grid tokens, the instruction's
        token and the proprio tokens after the trunk; 4 x 128 = 512 for configs/bc/policy/vla.yaml)."""
        self._check(obs_history)
        memory, _ = self._memory(obs_history)
        return memory.reshape(memory.shape[0], -1).float().cpu().numpy()

    @torch.inference_mode()
    def act_and_features(self, obs_history: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """act() and features() from one pass of the image encoder and trunk."""
        self._check(obs_history)
        memory, velocity = self._memory(obs_history)
        chunk = self._sample(memory, velocity)[:, : self.cfg.action_horizon].clamp(-1.0, 1.0)
        return chunk.cpu().numpy().astype(np.float32), memory.reshape(memory.shape[0], -1).float().cpu().numpy()

    def _inference_fns(self, args: tuple):
        """(encode(*args) -> memory, velocity(x, t, memory)) of the EMA network; with cfg.jit frozen TorchScript
        graphs, rebuilt whenever the EMA weights changed (their version counters move on every update or load).

        At batch 1 the network is hundreds of small ops and Python + dispatch overhead is a large part of their
        cost: tracing measured 1.9 -> 0.9 ms per head step and 21 -> 15 ms for image encoder + trunk (loaded
        machine). TorchScript is deprecated, hence the warning filter; `jit: false` keeps the eager path."""
        version = sum(p._version for p in self._ema_params)
        if self._traced is None or self._traced[0] != version:
            enc = _Encode(self.ema.model, self.image_keys, proprio=args[len(self.image_keys)] is not None,
                          text=args[-1] is not None).eval()
            vel = _Velocity(self.ema.model).eval()
            if self.cfg.jit:
                import warnings

                example = tuple(a for a in args if a is not None)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    memory = enc(*example)
                    x = torch.zeros((1, self.cfg.pred_horizon, self.spec.action_dim), device=self.device)
                    t = torch.zeros(1, device=self.device)
                    fns = (torch.jit.freeze(torch.jit.trace(enc, example)),
                           torch.jit.freeze(torch.jit.trace(vel, (x, t, memory[:1]))))
            else:
                fns = (enc, vel)
            self._traced = (version, fns)
        return self._traced[1]

    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        self._check(obs_history)
        chunk = self.predict_sequence(obs_history)[:, : self.cfg.action_horizon]
        return chunk.clamp(-1.0, 1.0).cpu().numpy().astype(np.float32)

    # ---- persistence --------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        out = dataclasses.asdict(self.cfg)
        out["image_encoder"]["channels"] = list(self.cfg.image_encoder.channels)
        out["cameras"] = list(self.cfg.cameras)
        out["text_encoder"] = TEXT_ENCODER if self.cfg.instruction else None
        return out

    @classmethod
    def from_checkpoint(cls, tensors: dict, config: dict, spec: PolicySpec, device: str) -> "VLAPolicy":
        config = dict(config)
        text_encoder = config.pop("text_encoder", None)
        if text_encoder not in (None, TEXT_ENCODER):
            raise SpecMismatch(f"checkpoint uses text encoder {text_encoder!r}; this version provides {TEXT_ENCODER!r}")
        cfg = from_mapping(VLAConfig, {**config, "device": device}, "policy")  # checkpoints before `jit` get the default
        cfg.image_encoder.pretrained = None  # the weights below replace it; the file need not exist here
        try:
            policy = cls(spec, cfg, Normalizer.from_tensors(tensors))
        except ImportError as e:  # the sentence encoder of the vla extra
            from robot_rl.common.checkpoint import CheckpointError

            raise CheckpointError(f"this VLA checkpoint reads instructions: {e}") from None
        policy.load_ema_tensors(tensors)
        return policy


def _encoder_args(image_keys, images: dict, proprio, text) -> tuple:
    """The trunk's inputs as a flat tuple (frames in key order, proprio, text; absent inputs are None, and are left
    out when calling _Encode)."""
    return (*(images[k] for k in image_keys), proprio, text)


class _Encode(torch.nn.Module):
    """Positional-argument view of VLANet.encode (for tracing): frames in key order, [proprio], [text]."""

    def __init__(self, net, image_keys, proprio: bool, text: bool):
        super().__init__()
        self.net, self.image_keys, self.has_proprio, self.has_text = net, tuple(image_keys), proprio, text

    def forward(self, *args):
        args = list(args)
        images = {k: args.pop(0) for k in self.image_keys}
        proprio = args.pop(0) if self.has_proprio else None
        text = args.pop(0) if self.has_text else None
        return self.net.encode(images, proprio, text)


class _Velocity(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, t, memory):
        return self.net.velocity(x, t, memory)
