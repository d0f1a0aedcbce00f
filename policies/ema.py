"""Exponential moving average of a model's weights, with the warm-up schedule of diffusion_policy.

decay(step) = min(max_decay, 1 - (1 + step / inv_gamma) ** -power): early averages follow the weights
closely, later ones average over many steps. Evaluation and deployment use the EMA weights.

Kept instead of diffusers' EMAModel, whose use_ema_warmup schedule is this one (same decays and weights, checked over
3,000 updates): EMAModel keeps the average as loose tensors, while our policies act with, trace and checkpoint
(`ema.*`) the averaged *module* and copy its buffers, and importing diffusers.training_utils costs ~3 s (it imports
transformers when installed) on every policy load, the deploy node's included.
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


class EMAWeights:
    """Persistence of a policy trained with an EMA copy (`self.net`, `self.ema`, `self.normalizer`): the EMA weights
    and the normalizer are the policy (state_tensors); the raw network's weights ride along only for resuming."""

    def state_tensors(self) -> dict:
        out = {f"ema.{k}": v for k, v in self.ema.model.state_dict().items()}
        out.update(self.normalizer.state_tensors())
        return out

    def training_tensors(self) -> dict:
        """Weights being trained (for resume), besides the EMA weights in state_tensors()."""
        return {f"net.{k}": v for k, v in self.net.state_dict().items()}

    def load_training_tensors(self, tensors: dict) -> None:
        self.net.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("net.")})

    def load_ema_tensors(self, tensors: dict) -> None:
        """A checkpoint's EMA weights into both networks; SpecMismatch when they do not fit the config."""
        from robot_rl.policies.base import SpecMismatch

        ema = {k[4:]: v for k, v in tensors.items() if k.startswith("ema.")}
        try:
            self.ema.model.load_state_dict(ema)
        except RuntimeError as e:
            raise SpecMismatch(f"checkpoint weights do not fit its config: {str(e).splitlines()[0]}") from None
        self.net.load_state_dict(ema)
