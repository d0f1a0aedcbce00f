"""Per-key affine normalization inside the policy, saved with its weights: x_n = (x - center) / scale.

The numbers come from the episode store's statistics (robot_rl.data.stats: `minmax` maps [min, max] onto
[-1, 1], `meanstd` to zero mean / unit std, constant dimensions are only centred), so training data and
the deployed policy normalize identically. The policy keeps them as tensors on its device.
"""

from __future__ import annotations

import torch

from robot_rl.data.stats import NORMALIZATIONS, KeyStats, affine


class Normalizer:
    def __init__(self, center: dict[str, torch.Tensor], scale: dict[str, torch.Tensor]):
        self.center, self.scale = center, scale

    @classmethod
    def from_stats(cls, stats: dict[str, KeyStats], modes: dict[str, str]) -> "Normalizer":
        """One affine map per key of `modes` (key -> minmax | meanstd) from that key's statistics."""
        center, scale = {}, {}
        for key, mode in modes.items():
            if mode not in NORMALIZATIONS:
                raise ValueError(f"normalization {mode!r} for {key!r}; valid: {', '.join(NORMALIZATIONS)}")
            c, s = affine(stats[key], mode)
            center[key], scale[key] = torch.as_tensor(c), torch.as_tensor(s)
        return cls(center, scale)

    def normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        return (x - self.center[key]) / self.scale[key]

    def unnormalize(self, key: str, y: torch.Tensor) -> torch.Tensor:
        return y * self.scale[key] + self.center[key]

    def to(self, device) -> "Normalizer":
        return Normalizer({k: v.to(device) for k, v in self.center.items()},
                          {k: v.to(device) for k, v in self.scale.items()})

    def state_tensors(self, prefix: str = "normalizer") -> dict[str, torch.Tensor]:
        out = {f"{prefix}.center.{k}": v for k, v in self.center.items()}
        out.update({f"{prefix}.scale.{k}": v for k, v in self.scale.items()})
        return out

    @classmethod
    def from_tensors(cls, tensors: dict, prefix: str = "normalizer") -> "Normalizer":
        def part(name):
            head = f"{prefix}.{name}."
            return {k[len(head):]: v for k, v in tensors.items() if k.startswith(head)}

        center, scale = part("center"), part("scale")
        if not center or set(center) != set(scale):
            raise ValueError(f"normalizer tensors under {prefix!r} are incomplete (center {sorted(center)}, "
                             f"scale {sorted(scale)})")
        return cls(center, scale)
