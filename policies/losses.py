"""Training losses shared by the BC policies (diffusion, VLA)."""

from __future__ import annotations

import torch


def weighted_mse(pred: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    """MSE of action chunks [B, H, A]; with `weight` [B, H] a weighted mean over action steps (a step of weight 0,
    e.g. the policy's own action inside a human correction window, teaches nothing)."""
    if weight is None:
        return torch.nn.functional.mse_loss(pred, target)
    per_step = ((pred - target) ** 2).mean(-1)
    weight = weight.to(per_step)
    return (per_step * weight).sum() / weight.sum().clamp_min(1e-8)
