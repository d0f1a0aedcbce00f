"""Diffusion policy (Chi et al. 2023), state-based: DDPM training, DDIM sampling, EMA weights.

The network sees the last `obs_horizon` observations (normalized, flattened) as a FiLM condition and
denoises the `pred_horizon` actions from the current step on (the episode store's training windows);
`act` returns the first `action_horizon` of them, which the runner executes open-loop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import torch

from robot_rl.policies.base import BasePolicy, PolicySpec, SpecMismatch
from robot_rl.policies.diffusion.unet import ConditionalUnet1D
from robot_rl.policies.ema import EMA, EMAWeights
from robot_rl.policies.losses import weighted_mse
from robot_rl.policies.normalizer import Normalizer
from robot_rl.common.config import from_mapping
from robot_rl.data.stats import NORMALIZATIONS

BETA_SCHEDULES = ("squaredcos_cap_v2", "linear", "scaled_linear")


@dataclasses.dataclass
class DiffusionConfig:
    """Every tunable number of the diffusion policy."""

    kind: ClassVar[str] = "diffusion"  # the policy class it configures (policies.REGISTRY)
    obs_horizon: int = 2  # observations the policy conditions on
    pred_horizon: int = 16  # actions denoised per call, from the current step on
    action_horizon: int = 8  # actions executed per call (open loop)
    dims: tuple[int, ...] = (32, 64, 128)  # U-Net channels per level (pred_horizon % 2^(levels-1) == 0)
    step_embed_dim: int = 32  # diffusion-timestep embedding size
    kernel: int = 5  # temporal conv kernel
    groups: int = 8  # GroupNorm groups
    train_steps: int = 100  # DDPM noise levels in training
    inference_steps: int = 10  # DDIM steps at inference
    # Scale of the initial noise DDIM starts from: 1 samples the demonstrations' action distribution, their noise
    # included; 0 is deterministic (the denoiser's path from zero noise, near the most likely chunk). Measured
    # (docs/results/bc.md): peg_insert 0.06 / 0.27 / 0.41 at 1 / 0.5 / 0; lift 0.19 / 0.29 / 0.06.
    temperature: float = 1.0
    beta_schedule: str = "squaredcos_cap_v2"
    obs_norm: str = "minmax"  # minmax | meanstd
    ema_power: float = 0.75
    seed: int = 0  # sampling noise generator seed
    jit: bool = True  # run inference through a frozen TorchScript graph of the EMA network (2x faster on CPU)
    device: str = "cpu"

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        if not (1 <= self.obs_horizon):
            raise ValueError(f"policy.obs_horizon={self.obs_horizon} must be >= 1")
        if not (1 <= self.action_horizon <= self.pred_horizon):
            raise ValueError(
                f"policy.action_horizon={self.action_horizon} must be in [1, pred_horizon={self.pred_horizon}]"
            )
        levels = len(self.dims)
        if levels < 1 or self.pred_horizon % (2 ** (levels - 1)):
            raise ValueError(
                f"policy.pred_horizon={self.pred_horizon} must be divisible by 2^(len(dims)-1)={2 ** (levels - 1)}"
            )
        if any(d % self.groups for d in self.dims):
            raise ValueError(f"policy.dims={list(self.dims)} must all be divisible by policy.groups={self.groups}")
        if not (1 <= self.inference_steps <= self.train_steps):
            raise ValueError(f"policy.inference_steps={self.inference_steps} must be in [1, train_steps={self.train_steps}]")
        if isinstance(self.temperature, bool) or not (isinstance(self.temperature, (int, float))
                                                      and 0.0 <= self.temperature <= 1.0):
            raise ValueError(f"policy.temperature={self.temperature!r} must be in [0, 1] (0: deterministic sampling)")
        if self.obs_norm not in NORMALIZATIONS:
            raise ValueError(f"policy.obs_norm={self.obs_norm!r}; valid: {', '.join(NORMALIZATIONS)}")
        if self.beta_schedule not in BETA_SCHEDULES:
            raise ValueError(f"policy.beta_schedule={self.beta_schedule!r}; valid: {', '.join(BETA_SCHEDULES)}")



class DiffusionPolicy(EMAWeights, BasePolicy):
    kind = "diffusion"

    def __init__(self, spec: PolicySpec, cfg: DiffusionConfig, normalizer: Normalizer):
        from diffusers import DDIMScheduler, DDPMScheduler

        cfg.validate()
        if spec.obs_horizon != cfg.obs_horizon or spec.action_horizon != cfg.action_horizon:
            raise ValueError("spec and config disagree on obs_horizon / action_horizon")
        self.spec, self.cfg = spec, cfg
        self.device = torch.device(cfg.device)
        self.obs_keys = tuple(sorted(spec.obs_dims))
        missing = [k for k in (*self.obs_keys, "action") if k not in normalizer.center]
        if missing:
            raise SpecMismatch(f"normalizer has no statistics for {missing}")
        self.normalizer = normalizer.to(self.device)
        cond_dim = cfg.obs_horizon * sum(spec.obs_dims.values())
        self.net = ConditionalUnet1D(
            spec.action_dim, cond_dim, tuple(cfg.dims), cfg.step_embed_dim, cfg.kernel, cfg.groups
        ).to(self.device)
        self.ema = EMA(self.net, power=cfg.ema_power)
        sched = dict(num_train_timesteps=cfg.train_steps, beta_schedule=cfg.beta_schedule, clip_sample=True,
                     prediction_type="epsilon")
        self.train_scheduler = DDPMScheduler(**sched)
        self.sampler = DDIMScheduler(**sched, set_alpha_to_one=True)
        self.sampler.set_timesteps(cfg.inference_steps)
        self._ddim = ddim_coefficients(self.sampler, self.device)
        self.generator = torch.Generator(self.device).manual_seed(cfg.seed)
        self._traced: tuple | None = None
        self._ema_params = list(self.ema.model.parameters())

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_stats(cls, spec_fields: dict, cfg: DiffusionConfig, stats: dict) -> "DiffusionPolicy":
        """A fresh policy from episode-store statistics (KeyStats of "obs/<key>" and "action")."""
        spec = PolicySpec(**spec_fields, obs_horizon=cfg.obs_horizon, action_horizon=cfg.action_horizon)
        needed = [f"obs/{k}" for k in spec.obs_dims] + ["action"]
        missing = [k for k in needed if k not in stats]
        if missing:
            raise SpecMismatch(f"the dataset lacks key(s) the policy needs: {missing}")
        modes = {k: cfg.obs_norm for k in spec.obs_dims}
        modes["action"] = "minmax"
        named = {k: stats[f"obs/{k}"] for k in spec.obs_dims}
        named["action"] = stats["action"]
        return cls(spec, cfg, Normalizer.from_stats(named, modes))

    # ---- training -----------------------------------------------------------------------------------
    def _cond(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        parts = [self.normalizer.normalize(k, obs[k]) for k in self.obs_keys]  # [B, To, d]
        return torch.cat(parts, dim=-1).flatten(1)

    def loss(self, obs: dict[str, torch.Tensor], action: torch.Tensor,
             weight: torch.Tensor | None = None) -> torch.Tensor:
        """DDPM epsilon-prediction MSE for a batch: obs {key: [B, To, d]}, action [B, pred_horizon, A];
        `weight` [B, pred_horizon]: per action step (e.g. 0 on the policy's own steps in a correction window)."""
        cond = self._cond(obs)
        x0 = self.normalizer.normalize("action", action)
        noise = torch.randn_like(x0)
        t = torch.randint(0, self.cfg.train_steps, (x0.shape[0],), device=x0.device)
        noisy = self.train_scheduler.add_noise(x0, noise, t)
        return weighted_mse(self.net(noisy, t, cond), noise, weight)

    # ---- inference ----------------------------------------------------------------------------------
    @torch.inference_mode()
    def predict_sequence(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Denoised action sequence [B, pred_horizon, A] (unnormalized) with the EMA weights.

        Inference mode, not just no_grad: it skips version counting on every op, 0.4 ms of a 1.9 ms network
        call at batch 1 (measured)."""
        cond = self._cond(obs)
        b = cond.shape[0]
        x = torch.randn((b, self.cfg.pred_horizon, self.spec.action_dim), generator=self.generator,
                        device=self.device) * self.cfg.temperature
        net, step_films = self._inference_net()
        film_cond = self.ema.model.film_of_condition(cond)  # the observation part is the same for every step
        for step_film, (_, c_x, c_eps, c_prev, c_dir) in zip(step_films, self._ddim):
            eps = net(x, film_cond + step_film)
            x0 = (c_x * x - c_eps * eps).clamp_(-1.0, 1.0)
            x = c_prev * x0 + c_dir * eps
        return self.normalizer.unnormalize("action", x)

    def _inference_net(self):
        """The EMA denoiser as (x, film) -> eps, and the timestep part of the FiLM vector of each DDIM step;
        with cfg.jit the denoiser is a frozen TorchScript graph. Both are rebuilt whenever the EMA weights
        changed (their version counters move on every in-place update or load).

        Why TorchScript: at batch 1 the network is ~300 tiny ops, and Python + dispatch overhead is most of
        its cost; a frozen graph halves it (measured 3.3 -> 1.45 ms per call). torch.compile gave no gain
        here (8.0 vs 9.0 ms) for 30-70 s of compilation. TorchScript is deprecated, hence the warning filter;
        `jit: false` keeps the eager path.
        """
        version = sum(p._version for p in self._ema_params)
        if self._traced is None or self._traced[0] != version:
            model = self.ema.model
            step_films = [model.film_of_step(t) for t, *_ in self._ddim]
            if self.cfg.jit:
                import warnings

                x = torch.zeros((1, self.cfg.pred_horizon, self.spec.action_dim), device=self.device)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    net = torch.jit.freeze(torch.jit.trace(_Denoiser(model).eval(), (x, step_films[0])))
            else:
                net = model.denoise
            self._traced = (version, (net, step_films))
        return self._traced[1]

    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        obs = {}
        for k in self.obs_keys:
            v = torch.as_tensor(np.asarray(obs_history[k], dtype=np.float32), device=self.device)
            if v.dim() != 3 or v.shape[1] != self.cfg.obs_horizon or v.shape[2] != self.spec.obs_dims[k]:
                raise ValueError(
                    f"obs_history[{k!r}] has shape {tuple(v.shape)}, expected [B, {self.cfg.obs_horizon}, "
                    f"{self.spec.obs_dims[k]}]"
                )
            obs[k] = v
        chunk = self.predict_sequence(obs)[:, : self.cfg.action_horizon]
        return chunk.clamp(-1.0, 1.0).cpu().numpy().astype(np.float32)

    # ---- persistence --------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return dataclasses.asdict(self.cfg)

    @classmethod
    def from_checkpoint(cls, tensors: dict, config: dict, spec: PolicySpec, device: str) -> "DiffusionPolicy":
        cfg = from_mapping(DiffusionConfig, {**config, "device": device}, "policy")
        policy = cls(spec, cfg, Normalizer.from_tensors(tensors))
        policy.load_ema_tensors(tensors)
        return policy


class _Denoiser(torch.nn.Module):
    """Positional-argument view of the U-Net for tracing."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, film):
        return self.net.denoise(x, film)


def ddim_coefficients(sampler, device) -> list[tuple]:
    """Per inference step (t, 1/sqrt(a_t), sqrt(1-a_t)/sqrt(a_t), sqrt(a_prev), sqrt(1-a_prev)) of a configured
    diffusers DDIMScheduler (eta = 0, epsilon prediction, clipped x0): the update `DDIMScheduler.step`
    computes, without its per-call Python overhead (~0.6 ms a step, as much as the network at batch 1)."""
    ac = sampler.alphas_cumprod.double()
    stride = sampler.config.num_train_timesteps // sampler.num_inference_steps
    out = []
    for t in sampler.timesteps.tolist():
        a_t = ac[t]
        prev = t - stride
        a_prev = ac[prev] if prev >= 0 else sampler.final_alpha_cumprod.double()
        coef = (1.0 / a_t.sqrt(), (1.0 - a_t).sqrt() / a_t.sqrt(), a_prev.sqrt(), (1.0 - a_prev).sqrt())
        out.append((torch.tensor(t, device=device), *(float(c) for c in coef)))
    return out
