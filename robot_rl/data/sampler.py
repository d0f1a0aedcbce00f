"""Sequence sampling: observation / action windows around every step of every episode, edge-padded.

A window is anchored at step t of an episode of length L:
  obs keys:    steps t - obs_horizon + 1 ... t         (before the first step: the first step repeated)
  action keys: steps t ... t + action_horizon - 1      (after the last step: the last step repeated)
so there is one window per step. `obs_is_pad` [B, obs_horizon] / `action_is_pad` [B, action_horizon]
mark repeated entries (e.g. to mask the loss on padded actions).

Sampling a batch is index arithmetic on precomputed per-window tables (anchor step, episode start,
episode last step) and one fancy-index gather per key. mode="memory" loads the selected keys of the
selected episodes once (small and low-dim stores); mode="lazy" reads the rows a batch needs from zarr (one orthogonal selection
per key and batch, so only the touched chunks are decoded) for stores larger than memory.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from robot_rl.data.episode_store import EpisodeStore
from robot_rl.data.errors import StoreError
from robot_rl.data.integrity import contiguous_runs

MODES = ("memory", "lazy")


class SequenceSampler:
    """Windows of obs_horizon / action_horizon steps over the committed episodes of a store."""

    def __init__(
        self,
        store: EpisodeStore,
        obs_keys: Sequence[str] | None = None,
        action_keys: Sequence[str] = ("action",),
        obs_horizon: int = 2,
        action_horizon: int = 16,
        mode: str = "memory",
        episodes: Sequence[int] | None = None,
    ):
        specs = store.keys
        obs_keys = sorted(k for k in specs if k.startswith("obs/")) if obs_keys is None else list(obs_keys)
        action_keys = list(action_keys)
        for name, v in (("obs_horizon", obs_horizon), ("action_horizon", action_horizon)):
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name}={v!r} must be a whole number >= 1")
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; valid: 'memory' (load keys once) or 'lazy' (read from zarr per batch)")
        if not obs_keys and not action_keys:
            raise ValueError("select at least one key: obs_keys and action_keys are both empty")
        for k in obs_keys + action_keys:
            if k not in specs:
                raise KeyError(f"no key {k!r} in episode store {store.path}; keys: {sorted(specs)}")
        both = sorted(set(obs_keys) & set(action_keys))
        if both:
            raise ValueError(f"key(s) {both} are in both obs_keys and action_keys; a key belongs to one window")
        if store.n_episodes == 0:
            raise StoreError(f"episode store {store.path} has no committed episodes to sample from")

        ends = store.episode_ends
        starts = np.concatenate([[0], ends[:-1]])
        # None: every intact episode (a store opened with skip_damaged=True leaves its damaged ones out)
        eps = store.good_episodes if episodes is None else np.asarray(episodes, dtype=np.int64).reshape(-1)
        bad = eps[(eps < 0) | (eps >= store.n_episodes)]
        if bad.size:
            raise IndexError(f"episode {int(bad[0])} out of range: episode store {store.path} has {store.n_episodes} episodes")
        if episodes is None and eps.size == 0:
            raise StoreError(f"episode store {store.path}: all {store.n_episodes} episodes are damaged; nothing to sample")
        if eps.size == 0:
            raise ValueError("episodes=[] selects no episode; pass None for all")
        damaged = sorted(set(eps.tolist()) & set(store.damaged_episodes))
        if damaged:
            raise StoreError(f"episode store {store.path}: episodes {damaged[:8]} are damaged; select from store.good_episodes")
        lengths = ends[eps] - starts[eps]
        self.store, self.mode = store, mode
        self.obs_keys, self.action_keys = obs_keys, action_keys
        self.obs_horizon, self.action_horizon = int(obs_horizon), int(action_horizon)
        self._obs_offsets = np.arange(-self.obs_horizon + 1, 1)
        self._action_offsets = np.arange(self.action_horizon)
        self.episode = np.repeat(eps, lengths)  # per window: its episode
        if mode == "memory":
            # Rows of the selected episodes, concatenated in selection order (one read per contiguous run).
            runs = contiguous_runs(starts[eps], ends[eps])
            self._data = {k: _concat([store.read(k, a, b) for a, b in runs]) for k in obs_keys + action_keys}
            ep_first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            ep_end = np.cumsum(lengths)
        else:
            self._data = {k: store.array(k) for k in obs_keys + action_keys}
            ep_first, ep_end = starts[eps], ends[eps]
        # Per-window tables in row coordinates of self._data: anchor row, first and last row of its episode.
        self._first = np.repeat(ep_first, lengths).astype(np.int64)
        self._last = np.repeat(ep_end - 1, lengths).astype(np.int64)
        self._anchor = self._first + _ranks(lengths)
        # Global step (row of the store) of every window's anchor, for per-step weights (e.g. interventions).
        self.anchor_step = np.repeat(starts[eps], lengths) + _ranks(lengths)

    def __len__(self) -> int:
        return len(self._anchor)

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """`batch_size` windows drawn uniformly (with replacement) over all windows."""
        return self.windows(rng.integers(0, len(self._anchor), size=batch_size))

    def windows(self, index) -> dict[str, np.ndarray]:
        """Windows by index in [0, len): obs keys [B, obs_horizon, ...], action keys [B, action_horizon, ...],
        plus obs_is_pad, action_is_pad (bool), episode and step (anchor step within its episode)."""
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self._anchor)):
            raise IndexError(f"window index out of range [0, {len(self._anchor)})")
        g, first, last = self._anchor[idx], self._first[idx], self._last[idx]
        obs_rows = g[:, None] + self._obs_offsets
        act_rows = g[:, None] + self._action_offsets
        out = {
            "obs_is_pad": obs_rows < first[:, None],
            "action_is_pad": act_rows > last[:, None],
            "episode": self.episode[idx],
            "step": g - first,
        }
        obs_rows = np.maximum(obs_rows, first[:, None])
        act_rows = np.minimum(act_rows, last[:, None])
        for keys, rows in ((self.obs_keys, obs_rows), (self.action_keys, act_rows)):
            for k in keys:
                out[k] = self._gather(k, rows)
        return out

    def _gather(self, key: str, rows: np.ndarray) -> np.ndarray:
        src = self._data[key]
        if self.mode == "memory":
            return src[rows]
        # lazy: read each needed row once (sorted, so zarr decodes each touched chunk once), then expand.
        uniq, inverse = np.unique(rows, return_inverse=True)
        block = np.asarray(src.get_orthogonal_selection((uniq,)))
        return block[inverse.reshape(rows.shape)]


class MixtureSampler:
    """Windows of several SequenceSamplers (e.g. demos and interventions in two stores), drawn with per-window
    weights: window j of the concatenation is drawn with probability weights[j] / sum(weights)."""

    def __init__(self, samplers: Sequence[SequenceSampler], weights: Sequence[np.ndarray]):
        if not samplers:
            raise ValueError("MixtureSampler needs at least one sampler")
        first = samplers[0]
        for s in samplers[1:]:
            if (s.obs_keys, s.action_keys, s.obs_horizon, s.action_horizon) != (
                    first.obs_keys, first.action_keys, first.obs_horizon, first.action_horizon):
                raise ValueError("samplers of a mixture must share keys and horizons")
        w = [np.asarray(x, dtype=np.float64).reshape(-1) for x in weights]
        if len(w) != len(samplers) or any(len(x) != len(s) for x, s in zip(w, samplers)):
            raise ValueError("one weight per window of each sampler is needed")
        weight = np.concatenate(w)
        if np.any(weight < 0) or not np.all(np.isfinite(weight)) or weight.sum() <= 0:
            raise ValueError("window weights must be finite, >= 0 and not all 0")
        self.samplers = list(samplers)
        self.obs_keys, self.action_keys = first.obs_keys, first.action_keys
        self.obs_horizon, self.action_horizon = first.obs_horizon, first.action_horizon
        self.offsets = np.concatenate([[0], np.cumsum([len(s) for s in samplers])])
        self.weight = weight
        self._cdf = np.cumsum(weight)

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """`batch_size` windows drawn (with replacement) in proportion to their weights."""
        u = rng.random(batch_size) * self._cdf[-1]
        idx = np.minimum(np.searchsorted(self._cdf, u, side="right"), len(self) - 1)
        return self.windows(idx)

    def windows(self, index) -> dict[str, np.ndarray]:
        """Windows by global index (sampler i's windows are [offsets[i], offsets[i+1])), plus `source`: i."""
        idx = np.asarray(index, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"window index out of range [0, {len(self)})")
        which = np.searchsorted(self.offsets, idx, side="right") - 1
        out: dict[str, np.ndarray] = {}
        for i in np.unique(which).tolist():
            pos = np.nonzero(which == i)[0]
            part = self.samplers[i].windows(idx[pos] - self.offsets[i])
            part["source"] = np.full(len(pos), i, dtype=np.int64)
            for k, v in part.items():
                if k not in out:
                    out[k] = np.empty((len(idx), *v.shape[1:]), dtype=v.dtype)
                out[k][pos] = v
        return out


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """[0, 1, .., l0-1, 0, 1, .., l1-1, ...] for episode lengths l0, l1, ..."""
    total = int(lengths.sum())
    return np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)
