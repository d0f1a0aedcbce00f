"""Scripted policies of gymnasium envs, given to robot-rl-collect / robot-rl-eval as expert.path (they live in the
tests, not the library: a user brings their own the same way)."""

from __future__ import annotations

import numpy as np


def mountain_car(obs: dict) -> np.ndarray:
    """MountainCarContinuous-v0: push the way the car already rolls (pumps energy until it reaches the flag)."""
    velocity = obs["state"][:, 1]
    return np.where(velocity >= 0.0, 1.0, -1.0)[:, None]
