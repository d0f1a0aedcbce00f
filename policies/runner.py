"""Executing chunked policies one step at a time: the observation history and the chunk queue.

Every loop that runs a BasePolicy (evaluation, the residual's base in sim rollouts, robot actors, the deploy
node) keeps the same two things per env:
  ObsHistory  the last `obs_horizon` observations; a new episode fills the history with its first
              observation, as the training windows are edge-padded; camera frames stay uint8.
  ChunkQueue  the current action chunk, executed open-loop; the policy is queried only for the envs whose
              queue ran out, in one batched call (no policy: zero actions).
PolicyRunner joins the two over a batched env. A policy that reads an instruction (spec.instruction) gets the
queried envs' instructions as obs_history["instruction"] (str array [B]); they come from act(obs, instruction)
or, when the runner was built with `env=`, from env.instruction (so loops that only call act(obs), like
sim.experts.run_episodes, work unchanged). On a robot the base's chunks come from the inference worker
(real/blending.py's ChunkBlender replaces the queue there); the history is this one.
"""

from __future__ import annotations

import numpy as np

from robot_rl.policies.base import INSTRUCTION, BasePolicy, check_instructions


class ObsHistory:
    """Per-env observation history {key: [N, horizon, dim]} (camera keys: uint8 [N, horizon, H, W, 3])."""

    def __init__(self, obs_dims: dict[str, int], horizon: int, num_envs: int, image_shapes: dict | None = None):
        self.data = {k: np.zeros((num_envs, horizon, d), np.float32) for k, d in obs_dims.items()}
        for k, shape in (image_shapes or {}).items():
            self.data[k] = np.zeros((num_envs, horizon, *shape), np.uint8)
        self.fresh = np.ones(num_envs, bool)  # history to be refilled from the next observation

    def reset(self, env_ids=None) -> None:
        """New episodes start for `env_ids` (all when None): their next observation fills the history."""
        if env_ids is None:
            self.fresh[:] = True
        else:
            self.fresh[env_ids] = True

    def push(self, obs: dict[str, np.ndarray], env_ids=None) -> None:
        """Append the observations of env_ids (all when None); obs arrays are [N, ...] over all envs."""
        ids = slice(None) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        fresh = self.fresh[ids]
        for k, h in self.data.items():
            rows = h[ids]
            rows[:, :-1] = rows[:, 1:]
            rows[:, -1] = obs[k][ids]
            rows[fresh] = obs[k][ids][fresh][:, None]
            h[ids] = rows
        self.fresh[ids] = False


class ChunkQueue:
    """One action per env per step from the policy's chunks, executed open-loop from a per-env queue."""

    def __init__(self, policy: BasePolicy | None, num_envs: int, action_dim: int):
        self.policy, self.num_envs = policy, num_envs
        horizon = policy.spec.action_horizon if policy is not None else 1
        self.chunk = np.zeros((num_envs, horizon, action_dim), np.float32)
        self.left = np.zeros(num_envs, np.int64)  # actions of the chunk not yet executed

    def reset(self, env_ids=None) -> None:
        """Drop the queued actions of env_ids (all when None) and reset the policy for them."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        self.left[ids] = 0
        if self.policy is not None and len(ids):
            self.policy.reset(ids)

    def next(self, history: dict[str, np.ndarray], env_ids=None) -> np.ndarray:
        """Actions [len(env_ids), A] for env_ids (all when None), advancing their queues.
        history: {key: [num_envs, obs_horizon, ...]} of all envs (and "instruction": [num_envs] for policies that
        read one); the queried envs' rows are passed on."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        if self.policy is None:
            return np.zeros((len(ids), self.chunk.shape[2]), np.float32)
        need = ids[self.left[ids] == 0]
        if len(need):
            chunk = self.policy.act({k: h[need] for k, h in history.items()})
            self.chunk[need] = chunk
            self.left[need] = chunk.shape[1]
        step = self.chunk.shape[1] - self.left[ids]
        self.left[ids] -= 1
        return self.chunk[ids, step].copy()


class PolicyRunner:
    """A chunked BasePolicy driven one env step at a time over a batched env."""

    def __init__(self, policy: BasePolicy, num_envs: int, env=None):
        spec = policy.spec
        self.policy, self.num_envs, self.env = policy, num_envs, env
        self.obs_history = ObsHistory(spec.obs_dims, spec.obs_horizon, num_envs, spec.image_shapes)
        self.history = self.obs_history.data
        self.queue = ChunkQueue(policy, num_envs, spec.action_dim)

    def reset(self, env_ids=None) -> None:
        """New episodes start for `env_ids` (all when None): drop their history and queued actions."""
        self.obs_history.reset(env_ids)
        self.queue.reset(env_ids)

    def act(self, obs: dict[str, np.ndarray], instruction=None) -> np.ndarray:
        """Action [N, A] for the current observations (the env's obs of this step).

        instruction: N strings (each env's current episode instruction), needed when the policy reads one;
        None takes them from the runner's env, if it was given one."""
        query = self.history
        if self.policy.spec.instruction:
            if instruction is None and self.env is not None:
                instruction = getattr(self.env, "instruction", None)
            query = {**self.history, INSTRUCTION: check_instructions(instruction, self.num_envs)}
        missing = [k for k in self.history if k not in obs]
        if missing:
            raise KeyError(f"the policy reads observation key(s) {missing}; the observation has {sorted(obs)}")
        self.obs_history.push(obs)
        return self.queue.next(query)
