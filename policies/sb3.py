"""A stable-baselines3 model seen through the BasePolicy interface (the SB3 SAC baseline's evaluations).

    policy = SB3Policy(model, env)          # model trained on sim.gym_adapter's env of the same task
    evaluate_policy(eval_env, policy, 200, seed=1000)

One deterministic action per call (obs_horizon = action_horizon = 1), from the env's vector observations; not
saveable through BasePolicy (the model is SB3's own zip file), like the scripted experts.
"""

from __future__ import annotations

import numpy as np

from robot_rl.policies.base import BasePolicy, PolicySpec


class SB3Policy(BasePolicy):
    def __init__(self, model, env):
        self.model = model
        self.spec = PolicySpec.of_env(env)

    def act(self, obs_history: dict[str, np.ndarray]) -> np.ndarray:
        obs = {k: obs_history[k][:, -1] for k in self.spec.obs_dims}  # the keys the model was trained on
        action, _ = self.model.predict(obs, deterministic=True)
        return np.asarray(action, np.float32).reshape(len(action), 1, self.spec.action_dim)
