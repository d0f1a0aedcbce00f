"""Critic ensemble: N Q-heads over (observation, base action, executed action), all heads in one batched pass.

The heads' weights are stacked, so a forward pass is one matmul for the first layer (every head reads the
same input: weights [in, N * hidden]) and one batched matmul (`baddbmm`, weights [N, hidden, hidden]) per
later layer, instead of a Python loop over N small networks. Each hidden layer is Linear -> LayerNorm ->
ReLU (LayerNorm keeps Q-values of out-of-distribution actions from blowing up, the usual high-UTD fix).

TD targets use the minimum over a few (2) randomly chosen heads (REDQ); `forward(x, heads=idx)` evaluates
only those heads, so the target pass costs 2 heads, not N.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class EnsembleCritic(nn.Module):
    def __init__(self, in_dim: int, num_heads: int = 10, hidden: tuple[int, ...] = (256, 256), layer_norm: bool = True):
        super().__init__()
        if num_heads < 2:
            raise ValueError(f"num_heads={num_heads} must be >= 2 (an ensemble)")
        if not hidden:
            raise ValueError("hidden must name at least one layer width")
        self.in_dim, self.num_heads, self.hidden, self.layer_norm = in_dim, num_heads, tuple(hidden), layer_norm
        n, widths = num_heads, (*hidden, 1)
        # weights[0]: [in, N * h0] (shared input); weights[i > 0]: [N, h_{i-1}, h_i]; biases [N, 1, h_i]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        fan_in = in_dim
        for i, width in enumerate(widths):
            bound = 1.0 / math.sqrt(fan_in)  # nn.Linear's default init, independently per head
            shape = (in_dim, n * width) if i == 0 else (n, fan_in, width)
            self.weights.append(nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(n, 1, width).uniform_(-bound, bound)))
            fan_in = width
        # Output layer at zero: every head starts at Q = 0, so the min-over-heads target is not biased by
        # random initial outputs (with sparse rewards that bias takes ~1 / (1 - gamma) updates to wash out).
        nn.init.zeros_(self.weights[-1])
        nn.init.zeros_(self.biases[-1])
        self.ln_weight = nn.ParameterList([nn.Parameter(torch.ones(n, 1, h)) for h in hidden]) if layer_norm else None
        self.ln_bias = nn.ParameterList([nn.Parameter(torch.zeros(n, 1, h)) for h in hidden]) if layer_norm else None

    def forward(self, x: torch.Tensor, heads: torch.Tensor | None = None) -> torch.Tensor:
        """Q-values [n_heads, B] of inputs x [B, in_dim]; `heads` (long [k]) selects a subset of heads."""
        n = self.num_heads if heads is None else len(heads)

        def pick(p):
            return p if heads is None else p[heads]

        w0 = self.weights[0]
        if heads is not None:
            w0 = w0.view(self.in_dim, self.num_heads, -1)[:, heads].reshape(self.in_dim, -1)
        h = (x @ w0).view(x.shape[0], n, -1).transpose(0, 1)  # [n, B, h0]
        h = h + pick(self.biases[0])
        for i in range(len(self.hidden)):
            if i > 0:
                h = torch.baddbmm(pick(self.biases[i]), h, pick(self.weights[i]))
            if self.layer_norm:
                h = F.layer_norm(h, h.shape[-1:])
                h = torch.addcmul(pick(self.ln_bias[i]), h, pick(self.ln_weight[i]))
            h = F.relu(h)
        last = len(self.hidden)
        return torch.baddbmm(pick(self.biases[last]), h, pick(self.weights[last])).squeeze(-1)

    def head(self, i: int) -> nn.Sequential:
        """Head i as an ordinary nn.Sequential with copies of its weights (for checks and inspection)."""
        layers: list[nn.Module] = []
        fan_in = self.in_dim
        for j, width in enumerate((*self.hidden, 1)):
            lin = nn.Linear(fan_in, width)
            w = self.weights[j].view(self.in_dim, self.num_heads, -1)[:, i] if j == 0 else self.weights[j][i]
            with torch.no_grad():
                lin.weight.copy_(w.T)
                lin.bias.copy_(self.biases[j][i, 0])
            layers.append(lin)
            if j < len(self.hidden):
                if self.layer_norm:
                    ln = nn.LayerNorm(width)
                    with torch.no_grad():
                        ln.weight.copy_(self.ln_weight[j][i, 0])
                        ln.bias.copy_(self.ln_bias[j][i, 0])
                    layers.append(ln)
                layers.append(nn.ReLU())
            fan_in = width
        return nn.Sequential(*layers)


def random_heads(num_heads: int, k: int = 2, generator: torch.Generator | None = None) -> torch.Tensor:
    """k distinct head indices drawn uniformly (long [k])."""
    return torch.randperm(num_heads, generator=generator)[:k]
