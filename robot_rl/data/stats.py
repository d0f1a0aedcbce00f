"""Per-key normalization statistics (min, max, mean, std) and the two normalizations built on them.

Statistics are element-wise over the per-step shape (an action of dim 4 has 4 means) and computed in
one streaming pass (blockwise, Chan's parallel mean/variance update in float64), so a store larger than
memory is fine. The episode store saves them in `meta/stats` (see episode_store.py).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

NORMALIZATIONS = ("minmax", "meanstd")
# A dimension whose range / std is below this is treated as constant: it is centred, not scaled.
EPS = 1e-6


@dataclasses.dataclass
class KeyStats:
    """Element-wise statistics of one key over all committed steps; arrays have the per-step shape."""

    min: np.ndarray
    max: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    count: int

    def to_json(self) -> dict:
        return {f: (getattr(self, f).tolist() if f != "count" else self.count) for f in ("min", "max", "mean", "std", "count")}

    @classmethod
    def from_json(cls, d: dict) -> "KeyStats":
        return cls(**{f: np.asarray(d[f], dtype=np.float64) for f in ("min", "max", "mean", "std")}, count=int(d["count"]))


def compute_stats(read: Callable[[int, int], np.ndarray], n_steps: int, block_steps: int = 65536) -> KeyStats:
    """Stats of rows [0, n_steps) of an array given `read(start, stop) -> rows`, one block at a time."""
    if n_steps < 1:
        raise ValueError("statistics need at least one step")
    count, mean, m2, lo, hi = 0, None, None, None, None
    for start in range(0, n_steps, block_steps):
        x = np.asarray(read(start, min(start + block_steps, n_steps)), dtype=np.float64)
        n_b = len(x)
        mean_b = x.mean(axis=0)
        m2_b = ((x - mean_b) ** 2).sum(axis=0)
        if count == 0:
            mean, m2, lo, hi = mean_b, m2_b, x.min(axis=0), x.max(axis=0)
        else:
            delta, total = mean_b - mean, count + n_b
            mean = mean + delta * (n_b / total)
            m2 = m2 + m2_b + delta**2 * (count * n_b / total)
            lo, hi = np.minimum(lo, x.min(axis=0)), np.maximum(hi, x.max(axis=0))
        count += n_b
    return KeyStats(min=lo, max=hi, mean=mean, std=np.sqrt(m2 / count), count=count)


def affine(stats: KeyStats, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """(center, scale) with normalized = (x - center) / scale; constant dimensions get scale 1."""
    if mode == "minmax":  # [min, max] -> [-1, 1]
        center, half = (stats.max + stats.min) / 2, (stats.max - stats.min) / 2
    elif mode == "meanstd":  # zero mean, unit std
        center, half = stats.mean, stats.std
    else:
        raise ValueError(f"unknown normalization {mode!r}; valid: {', '.join(NORMALIZATIONS)}")
    return center.astype(np.float32), np.where(half < EPS, 1.0, half).astype(np.float32)


def normalize(x: np.ndarray, stats: KeyStats, mode: str) -> np.ndarray:
    """x [..., *per_step_shape] -> float32, minmax to [-1, 1] or meanstd to zero mean / unit std."""
    center, scale = affine(stats, mode)
    return ((np.asarray(x, dtype=np.float32) - center) / scale).astype(np.float32)


def unnormalize(y: np.ndarray, stats: KeyStats, mode: str) -> np.ndarray:
    """Inverse of `normalize` (e.g. a policy's normalized action back to env units), float32."""
    center, scale = affine(stats, mode)
    return (np.asarray(y, dtype=np.float32) * scale + center).astype(np.float32)
