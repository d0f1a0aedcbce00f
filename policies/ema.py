"""Exponential moving average of a model's weights, with the warm-up schedule of diffusion_policy.

decay(step) = min(max_decay, 1 - (1 + step / inv_gamma) ** -power): early averages follow the weights
closely, later ones average over many steps. Evaluation and deployment use the EMA weights.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class EMA:
    def __init__(self, model: nn.Module, power: float = 0.75, inv_gamma: float = 1.0, max_decay: float = 0.9999):
        self.model = copy.deepcopy(model).eval().requires_grad_(False)
        self.power, self.inv_gamma, self.max_decay = power, inv_gamma, max_decay
        self.step = 0

    def decay(self) -> float:
        if self.step <= 0:
            return 0.0
        return min(self.max_decay, max(0.0, 1.0 - (1.0 + self.step / self.inv_gamma) ** -self.power))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        d = self.decay()
        ema_params = list(self.model.parameters())
        params = [p.detach() for p in model.parameters()]
        torch._foreach_lerp_(ema_params, params, 1.0 - d)
        for eb, b in zip(self.model.buffers(), model.buffers()):
            eb.copy_(b)
        self.step += 1
