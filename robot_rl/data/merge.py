"""Merge episode stores: append every committed episode of the inputs, in order, to one output store."""

from __future__ import annotations

import json
from typing import Callable, Sequence

import numpy as np

from robot_rl.data.episode_store import EPISODE_ATTRS, Episode, EpisodeStore
from robot_rl.data.errors import StoreError


def check_mergeable(inputs: Sequence[EpisodeStore], out: EpisodeStore | None = None) -> None:
    """Raise StoreError naming the store and key unless all stores share one schema (empty ones excepted)."""
    stores = ([out] if out is not None else []) + list(inputs)
    ref = next((s for s in stores if s.keys), None)
    for s in stores:
        if s.keys and s is not ref:
            try:
                ref.check_compatible(s.keys)
            except StoreError as e:
                raise StoreError(f"cannot merge {s.path} with {ref.path}: {e}") from None


def merge_stores(out: EpisodeStore, inputs: Sequence[EpisodeStore], max_steps: int = 4096,
                 progress: Callable[[int], None] | None = None) -> int:
    """Append all committed episodes of `inputs` to `out` (commits of <= max_steps steps); returns the count.

    An input opened with skip_damaged=True gives its intact episodes only (a repaired copy of a damaged store)."""
    check_mergeable(inputs, out)
    copied = 0
    for src in inputs:
        ends = src.episode_ends
        starts = np.concatenate([[0], ends[:-1]])
        attrs = {n: src.episode_attr(n) for n in EPISODE_ATTRS}
        good = src.good_episodes
        i = 0
        while i < len(good):
            j = i + 1  # a block of consecutive whole episodes, at most max_steps steps (at least one episode)
            while j < len(good) and good[j] == good[j - 1] + 1 and ends[good[j]] - starts[good[i]] <= max_steps:
                j += 1
            sel = good[i:j]
            batch = _read_block(src, int(starts[sel[0]]), ends[sel], {n: a[sel] for n, a in attrs.items()})
            out.append(batch)
            copied += len(batch)
            if progress is not None:
                progress(len(batch))
            i = j
    return copied


def _read_block(src: EpisodeStore, start: int, ends: np.ndarray, attrs: dict) -> list[Episode]:
    """The episodes ending at `ends` (consecutive, first one starting at `start`), each key read once."""
    data = {k: src.read(k, start, int(ends[-1])) for k in src.keys}
    bounds = np.concatenate([[start], ends]) - start
    return [
        Episode(
            steps={k: v[bounds[e]:bounds[e + 1]] for k, v in data.items()},
            task=str(attrs["task"][e]), source=str(attrs["source"][e]), success=bool(attrs["success"][e]),
            instruction=str(attrs["instruction"][e]), seed=int(attrs["seed"][e]),
            metadata=json.loads(str(attrs["metadata"][e])),
        )
        for e in range(len(ends))
    ]
