"""PolicyRunner: drives a chunked BasePolicy one env step at a time over a batched env.

Per env it keeps the last `obs_horizon` observations (a new episode fills the history with its first
observation, as the training windows are edge-padded; camera frames stay uint8) and a queue of the current
action chunk, executed open-loop; the policy is queried only for the envs whose queue ran out, in one
batched call. A policy that reads an instruction (spec.instruction) gets the queried envs' instructions as
obs_history["instruction"] (str array [B]); they come from act(obs, instruction) or, when the runner was
built with `env=`, from env.instruction (so loops that only call act(obs), like sim.experts.run_episodes,
work unchanged).
"""

from __future__ import annotations

import numpy as np

from policies.base import INSTRUCTION, BasePolicy, check_instructions


class PolicyRunner:
    def __init__(self, policy: BasePolicy, num_envs: int, env=None):
        spec = policy.spec
        self.policy, self.num_envs, self.env = policy, num_envs, env
        self.history = {k: np.zeros((num_envs, spec.obs_horizon, d), np.float32) for k, d in spec.obs_dims.items()}
        for k, shape in spec.image_shapes.items():
            self.history[k] = np.zeros((num_envs, spec.obs_horizon, *shape), np.uint8)
        self.chunk = np.zeros((num_envs, spec.action_horizon, spec.action_dim), np.float32)
        self.left = np.zeros(num_envs, np.int64)  # actions of the chunk not yet executed
        self.fresh = np.ones(num_envs, bool)  # history to be refilled from the next observation

    def reset(self, env_ids=None) -> None:
        """New episodes start for `env_ids` (all when None): drop their history and queued actions."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids)
        self.fresh[ids] = True
        self.left[ids] = 0
        self.policy.reset(ids)

    def act(self, obs: dict[str, np.ndarray], instruction=None) -> np.ndarray:
        """Action [N, A] for the current observations (the env's obs of this step).

        instruction: N strings (each env's current episode instruction), needed when the policy reads one;
        None takes them from the runner's env, if it was given one."""
        needs_text = self.policy.spec.instruction
        if needs_text:
            if instruction is None and self.env is not None:
                instruction = getattr(self.env, "instruction", None)
            instruction = check_instructions(instruction, self.num_envs)
        missing = [k for k in self.history if k not in obs]
        if missing:
            raise KeyError(f"the policy reads observation key(s) {missing}; the observation has {sorted(obs)}")
        fresh = self.fresh
        for k, h in self.history.items():
            h[:, :-1] = h[:, 1:]
            h[:, -1] = obs[k]
            if fresh.any():
                h[fresh] = obs[k][fresh][:, None]
        fresh[:] = False
        need = self.left == 0
        if need.any():
            idx = np.nonzero(need)[0]
            query = {k: h[idx] for k, h in self.history.items()}
            if needs_text:
                query[INSTRUCTION] = instruction[idx]
            chunk = self.policy.act(query)
            self.chunk[idx] = chunk
            self.left[idx] = chunk.shape[1]
        step = self.chunk.shape[1] - self.left
        self.left -= 1
        return self.chunk[np.arange(self.num_envs), step]
