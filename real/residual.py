"""The residual on top of the base policy, applied synchronously in the control loop.

The base policy's chunks come from the inference worker (slow, asynchronous); the residual is a small
correction computed in the loop itself, on the freshest observation, for every action the node executes
(each policy step; every tick in between executes that step's target). As in ResFiT, it sees the
observation and the base action and returns a delta in the normalized action space:

    residual(obs {key: [1, dim]}, base_action [1, A]) -> delta [1, A];  action = clip(base + scale * delta, -1, 1)

Configured as data: `residual: {_target_: package.module.Factory, ...kwargs}` (hydra.utils.instantiate),
`residual_scale` in [0, 1] dials it in during a rollout on hardware. An exception from the residual
latches a safe stop, like one from the base policy.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from policies.residual import compose

Residual = Callable[[dict, np.ndarray], np.ndarray]


def load_residual(cfg: Any) -> Residual | None:
    """The residual callable described by a `{_target_: ...}` node, or None for null."""
    if cfg is None:
        return None
    from hydra.utils import instantiate

    res = instantiate(cfg)
    if not callable(res):
        raise ValueError(f"residual {cfg.get('_target_')!r} built a {type(res).__name__}, which is not callable")
    return res


def apply_residual(residual: Residual | None, scale: float, obs: dict, base: np.ndarray) -> np.ndarray:
    """base [A] + scale * residual(obs, base) [A], clipped to [-1, 1]."""
    if residual is None or scale == 0:
        return np.clip(base, -1.0, 1.0)
    delta = np.asarray(residual(obs, base[None].astype(np.float32)), dtype=np.float64).reshape(-1)
    if delta.shape != base.shape:
        raise ValueError(f"residual returned {delta.size} values, expected {base.size}")
    return compose(base, delta, scale)
