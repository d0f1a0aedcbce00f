"""The scripted sim experts seen through the BasePolicy interface (`robot-rl-eval policy=expert`)."""

from __future__ import annotations

import numpy as np

from robot_rl.policies.base import BasePolicy, PolicySpec


class ExpertPolicy(BasePolicy):
    """One action per call (obs_horizon = action_horizon = 1); not saveable, it is code, not weights."""

    def __init__(self, env, noise: float = 0.0, seed: int = 0, path: str | None = None):
        from robot_rl.sim.experts import make_expert

        self.expert = make_expert(env, noise=noise, seed=seed, path=path)
        self.spec = PolicySpec.of_env(env)

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """A new episode for env_ids: the expert forgets their estimates (sim/experts/__init__.py Expert.reset)."""
        self.expert.reset(env_ids)

    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        return self.expert.act({k: v[:, -1] for k, v in obs_history.items()})[:, None, :]
