"""A torch Dataset over a SequenceSampler: windows as dicts of tensors, optionally normalized.

    ds = WindowDataset(SequenceSampler(store, obs_horizon=2, action_horizon=16), normalize="minmax")
    for batch in ds.loader(batch_size=256):   # dict: obs/proprio [256, 2, 20], action [256, 16, 4], ...
        ...

`ds[i]` is one window (no batch dim); `ds[[i, j, ...]]` is a batch gathered in one vectorized call, which
is what `loader()` uses (a BatchSampler with batch_size=None, so torch does not collate window by window).
A plain `DataLoader(ds, batch_size=B)` works too, one window at a time. Normalization applies to
float keys with per-step ndim <= 1 (stats from the store, computed once); images and bool/int keys
are returned as stored.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from robot_rl.data.sampler import SequenceSampler
from robot_rl.data.stats import NORMALIZATIONS, normalize as normalize_array


class WindowDataset(Dataset):
    def __init__(self, sampler: SequenceSampler, normalize: str | None = None):
        if normalize is not None and normalize not in NORMALIZATIONS:
            raise ValueError(f"normalize={normalize!r}; valid: None, {', '.join(map(repr, NORMALIZATIONS))}")
        self.sampler = sampler
        self.normalize = normalize
        self.stats = {}
        if normalize is not None:
            specs = sampler.store.keys
            keys = [k for k in sampler.obs_keys + sampler.action_keys
                    if specs[k].dtype.kind == "f" and len(specs[k].shape) <= 1]
            self.stats = sampler.store.stats(keys) if keys else {}

    def __len__(self) -> int:
        return len(self.sampler)

    def __getitem__(self, index) -> dict[str, torch.Tensor]:
        single = np.ndim(index) == 0
        if isinstance(index, torch.Tensor):
            index = index.numpy()
        batch = self.sampler.windows(np.atleast_1d(index))
        for k, st in self.stats.items():
            batch[k] = normalize_array(batch[k], st, self.normalize)
        return {k: torch.from_numpy(np.asarray(v[0]) if single else v) for k, v in batch.items()}

    def loader(self, batch_size: int, shuffle: bool = True, drop_last: bool = True, seed: int = 0,
               num_workers: int = 0) -> DataLoader:
        """Batches of `batch_size` windows, each gathered in one vectorized call."""
        order = RandomSampler(self, generator=torch.Generator().manual_seed(seed)) if shuffle else SequentialSampler(self)
        return DataLoader(self, sampler=BatchSampler(order, batch_size, drop_last), batch_size=None,
                          num_workers=num_workers)
