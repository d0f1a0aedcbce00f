"""Chunk blending: turns asynchronously arriving action chunks into one action per policy step.

A chunk requested with the observations of policy step s holds actions for steps s, s+1, ..., s+H-1.
It arrives some steps later (inference latency); its actions for steps already past are dropped.

  none               open loop, as the sim runner: each step takes the newest chunk that covers it. The next
                     chunk is requested `lead_steps` + measured latency steps before the queue runs out; with
                     lead_steps 0 and inference faster than a policy step, that is at the step the queue runs
                     out, from that step's observation, as in sim (its first action lands inference-latency late).
  temporal_ensemble  ACT (Zhao et al. 2023): a chunk is requested every step; a step's action is the average
                     of every chunk's prediction for it, weighted exp(-k * i) with i = 0 for the oldest.
  crossfade          real-time-chunking style (Black et al. 2025, without inpainting guidance): actions
                     executed while a chunk was computed stay as they were; from its arrival the new chunk
                     takes over linearly over `crossfade_steps` steps, so consecutive actions do not jump.

With one-step chunks (H = 1, e.g. the scripted expert) all modes request every step and return its action.
"""

from __future__ import annotations

import numpy as np

from robot_rl.real.config import Blending


class ChunkBlender:
    def __init__(self, cfg: Blending, action_horizon: int):
        self.cfg = cfg
        self.horizon = int(action_horizon)
        self.chunks: list[tuple[int, np.ndarray]] = []  # (start step, [H, A]), oldest first
        self.plan: dict[int, np.ndarray] = {}  # crossfade: resolved action per step
        self.latency_steps = 0.0  # running estimate of request -> result, in policy steps

    def reset(self) -> None:
        self.chunks.clear()
        self.plan.clear()

    def covered_until(self) -> int:
        """First step no chunk covers (-1 with no chunk)."""
        return max((s + len(c) for s, c in self.chunks), default=-1)

    def wants_request(self, step: int) -> bool:
        """Whether to request a new chunk with this step's observations (none in flight assumed)."""
        if self.cfg.mode == "temporal_ensemble" or self.horizon == 1:
            return True
        # rounded, not ceil: one chunk that arrived a step late must not make every later request a step early
        # (from an older observation) for the rest of the episode
        lead = self.cfg.lead_steps + int(self.latency_steps + 0.5)
        if self.cfg.mode == "crossfade":
            lead += self.cfg.crossfade_steps
        return self.covered_until() - step <= lead

    def add(self, chunk: np.ndarray, start: int, now_step: int) -> None:
        """A chunk [H, A] computed from the observations of step `start`, arriving during step `now_step`."""
        chunk = np.asarray(chunk, dtype=np.float64)
        lag = max(now_step - start, 0)
        self.latency_steps = lag if not self.chunks else 0.8 * self.latency_steps + 0.2 * lag
        if self.cfg.mode == "crossfade":
            n = self.cfg.crossfade_steps
            for i in range(len(chunk)):
                t = start + i
                if t < now_step:
                    continue
                old = self.plan.get(t)
                w = min(1.0, (t - now_step + 1) / (n + 1)) if old is not None else 1.0
                self.plan[t] = chunk[i] if old is None else (1 - w) * old + w * chunk[i]
        self.chunks.append((start, chunk))
        # keep only chunks that still cover the present or the future
        self.chunks = [(s, c) for s, c in self.chunks if s + len(c) > now_step]
        for t in [t for t in self.plan if t < now_step]:
            del self.plan[t]

    def action(self, step: int) -> np.ndarray | None:
        """The action [A] for `step`, or None when no chunk covers it yet."""
        if self.cfg.mode == "crossfade":
            return self.plan.get(step)
        preds = [c[step - s] for s, c in self.chunks if s <= step < s + len(c)]
        if not preds:
            return None
        if self.cfg.mode == "none":
            return preds[-1]
        w = np.exp(-self.cfg.ensemble_k * np.arange(len(preds)))
        return (w[:, None] * np.stack(preds)).sum(0) / w.sum()
