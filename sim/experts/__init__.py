"""Scripted experts: batched feedback controllers over observations, one per task.

They read only the observation dict (so observation noise affects them as it would a policy) and emit
ee_delta actions. `noise` is the std of Gaussian noise added to every action entry (then clipped): the
sub-optimality knob for collecting imperfect demonstrations. noise=0 is the reference expert.
"""

from __future__ import annotations

import numpy as np

from sim.env import BatchedEnv


class Expert:
    def __init__(self, env: BatchedEnv, noise: float = 0.0, seed: int = 0):
        if env.cfg.action_space != "ee_delta":
            raise ValueError(
                f"scripted experts emit ee_delta actions; the env uses action_space={env.cfg.action_space!r}. "
                "Make the env with action_space=ee_delta"
            )
        if noise < 0:
            raise ValueError(f"expert noise={noise} must be >= 0")
        self.env = env
        self.noise = float(noise)
        self.max_delta = env.cfg.max_ee_delta
        self.max_yaw = env.cfg.max_yaw_delta
        self.use_yaw = env.action_space.use_yaw
        self.tcfg = env.task.cfg
        self.rng = np.random.default_rng(seed)

    def act(self, obs: dict) -> np.ndarray:
        a = self.clean_action(obs)
        if self.noise > 0:
            a = a + self.noise * self.rng.standard_normal(a.shape).astype(np.float32)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    def clean_action(self, obs: dict) -> np.ndarray:
        raise NotImplementedError

    # helpers -------------------------------------------------------------------------------------
    def move(self, delta: np.ndarray) -> np.ndarray:
        """ee_delta translation part for a desired displacement (m), saturated at a full step."""
        return np.clip(delta / self.max_delta, -1.0, 1.0)

    def pack(self, move, grip, dyaw=None) -> np.ndarray:
        parts = [move]
        if self.use_yaw:
            parts.append((np.zeros(len(move)) if dyaw is None else np.clip(dyaw / self.max_yaw, -1, 1))[:, None])
        parts.append(np.asarray(grip, dtype=np.float64)[:, None])
        return np.concatenate(parts, axis=1).astype(np.float32)


def ee_pos(obs):
    return obs["proprio"][:, 15:18].astype(np.float64)


def gripper_width(obs):
    return obs["proprio"][:, 14].astype(np.float64)


def ee_yaw(obs):
    return np.arctan2(obs["proprio"][:, 19], obs["proprio"][:, 18]).astype(np.float64)


def _registry() -> dict:
    # Imported lazily: each task's expert lives in its own module next to the others.
    from sim.experts.color_lift import ColorLiftExpert
    from sim.experts.lift import LiftExpert
    from sim.experts.peg_insert import PegInsertExpert
    from sim.experts.push import PushExpert

    return {"color_lift": ColorLiftExpert, "lift": LiftExpert, "peg_insert": PegInsertExpert, "push": PushExpert}


def make_expert(env: BatchedEnv, noise: float = 0.0, seed: int = 0) -> Expert:
    try:
        cls = _registry()[env.task.name]
    except KeyError:
        raise ValueError(
            f"no scripted expert for task {env.task.name!r}; experts exist for {sorted(_registry())}"
        ) from None
    return cls(env, noise=noise, seed=seed)


def run_episodes(env: BatchedEnv, policy, episodes: int, seed: int = 0, progress=None, on_step=None) -> dict:
    """Roll `policy.act(obs) -> [N, A]` until `episodes` episodes finished; success rate, returns, lengths.

    A policy with `reset(env_ids)` is told when envs start new episodes (all at the start). `on_step(obs,
    done)` is called after the reset (done all False) and after every step, e.g. to render frames.
    """
    obs = env.reset(seed)
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(None)
    if on_step is not None:
        on_step(obs, np.zeros(env.num_envs, dtype=bool))
    succ, rets, lens, ids, goals = [], [], [], [], []
    goal_of = list(env.goals) if hasattr(env, "goals") else [None] * env.num_envs  # goal of each env's episode
    ever = np.zeros(env.num_envs, dtype=bool)
    episode_of = np.zeros(env.num_envs, dtype=np.int64)  # per env: index of its current episode
    # Count only the first `episodes` episodes to start, so the sample is not biased toward short
    # (successful) episodes that finish early and restart.
    total_started = env.num_envs
    slots = np.arange(env.num_envs) < episodes
    while len(succ) < episodes:
        obs, r, done, info = env.step(policy.act(obs))
        ever |= info["success"]
        for i in np.nonzero(done)[0]:
            if slots[i]:
                succ.append(bool(ever[i]))
                rets.append(float(info["episode_return"][i]))
                lens.append(int(info["episode_length"][i]))
                ids.append((int(i), int(episode_of[i])))
                goals.append(goal_of[i])
                if progress is not None:
                    progress(1)
            ever[i] = False
            episode_of[i] += 1
            slots[i] = total_started < episodes
            total_started += 1
        if done.any() and hasattr(env, "goals"):  # auto-reset: the new episodes' goals
            now = env.goals
            for i in np.nonzero(done)[0]:
                goal_of[i] = now[i]
        if done.any() and reset is not None:
            reset(np.nonzero(done)[0])
        if on_step is not None:
            on_step(obs, done)
    return {
        "episodes": len(succ),
        "success_rate": float(np.mean(succ)),
        "mean_return": float(np.mean(rets)),
        "mean_length": float(np.mean(lens)),
        "successes": succ,
        "episode_ids": ids,  # (env index, episode index of that env): with the seed, identifies the episode
        "goals": goals,  # per episode: its goal (Task.goal; None for single-goal tasks)
    }
