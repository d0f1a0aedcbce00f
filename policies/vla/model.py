"""The VLA network: a transformer trunk over camera, language and proprio tokens, and a flow-matching action head.

    trunk tokens  [image tokens: obs_horizon x cameras x n_tokens (grid^2 cells or 1 keypoint token) | language: 1 |
                  proprio: obs_horizon]
                  + learned position embeddings -> TransformerEncoder (pre-norm) -> memory [B, N, d_model]
    action head   noisy chunk x_t [B, pred_horizon, A] -> tokens (+ position + flow-time embedding)
                  -> TransformerDecoder cross-attending to the memory -> velocity [B, pred_horizon, A]

The flow time enters only the head, so the trunk runs once per act() and its memory is reused by all
integration steps (the costly part, the image encoder and trunk, is not repeated K times).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robot_rl.policies.encoders import TEXT_DIM, ImageEncoder, random_shift


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding [B, dim] of flow times t [B] in [0, 1]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half)
    args = (t.float() * 1000.0)[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)


class VLANet(nn.Module):
    def __init__(self, cfg, cameras: tuple[str, ...], proprio_dim: int, action_dim: int, text: bool):
        super().__init__()
        d = cfg.d_model
        self.cfg, self.cameras, self.text = cfg, tuple(cameras), bool(text)
        # shared by all cameras and frames; FiLM-conditioned on the sentence embedding when image_encoder.film
        self.image_encoder = ImageEncoder(cfg.image_encoder, d, TEXT_DIM if text else 0)
        self.proprio = nn.Sequential(nn.Linear(proprio_dim, d), nn.SiLU(), nn.Linear(d, d)) if proprio_dim else None
        self.language = nn.Linear(TEXT_DIM, d) if text else None
        n_img = cfg.obs_horizon * len(self.cameras) * self.image_encoder.n_tokens
        self.n_tokens = n_img + (1 if text else 0) + (cfg.obs_horizon if proprio_dim else 0)
        self.pos = nn.Parameter(torch.randn(1, self.n_tokens, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, cfg.heads, cfg.mlp_ratio * d, cfg.dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.trunk = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.trunk_norm = nn.LayerNorm(d)
        # action head
        self.action_in = nn.Linear(action_dim, d)
        self.action_pos = nn.Parameter(torch.randn(1, cfg.pred_horizon, d) * 0.02)
        self.time = nn.Sequential(nn.Linear(d, d), nn.SiLU(), nn.Linear(d, d))
        head = nn.TransformerDecoderLayer(d, cfg.heads, cfg.mlp_ratio * d, cfg.dropout, activation="gelu",
                                          batch_first=True, norm_first=True)
        self.head = nn.TransformerDecoder(head, cfg.head_layers)
        self.action_out = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, action_dim))

    def encode(self, images: dict[str, torch.Tensor], proprio: torch.Tensor | None, text: torch.Tensor | None,
               augment: bool = False, generator: torch.Generator | None = None) -> torch.Tensor:
        """Trunk memory [B, N, d_model] from frames {camera key: uint8 [B, To, H, W, 3]}, normalized proprio
        [B, To, P] and sentence embeddings [B, TEXT_DIM] (augment: random shifts of the frames)."""
        tokens = []
        for k in self.cameras:
            f = images[k]
            b, to = f.shape[:2]
            x = ImageEncoder.to_float(f.reshape(b * to, *f.shape[2:]))
            if augment:
                x = random_shift(x, self.cfg.image_encoder.shift, generator)
            cond = text.repeat_interleave(to, dim=0) if self.image_encoder.film is not None else None
            tokens.append(self.image_encoder(x, cond).reshape(b, -1, self.cfg.d_model))  # [B, To * n_tokens, d]
        if self.language is not None:
            tokens.append(self.language(text)[:, None])
        if self.proprio is not None:
            tokens.append(self.proprio(proprio))
        x = torch.cat(tokens, dim=1) + self.pos
        return self.trunk_norm(self.trunk(x))

    def velocity(self, x: torch.Tensor, t: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """Flow velocity [B, pred_horizon, A] at noisy chunk x [B, pred_horizon, A], times t [B]."""
        h = self.action_in(x) + self.action_pos + self.time(time_embedding(t, self.cfg.d_model))[:, None]
        return self.action_out(self.head(h, memory))
