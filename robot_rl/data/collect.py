"""Batched collection: roll a policy (e.g. a scripted expert) in a batched env, commit every finished episode.

Which episodes are kept: the first `episodes` episodes to *start* (env 0..N-1 first, then in order of
restart), as in sim.experts.run_episodes. Keeping the first ones to *finish* would over-sample short
(successful) episodes. Each env's episode is committed to the store in the step it ends, so an
interrupted collection keeps everything recorded up to then.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from robot_rl.data.episode_store import Episode, EpisodeStore
from robot_rl.data.recorder import EpisodeRecorder, step_schema


def policy_metadata(path, policy) -> dict:
    """Collect metadata of a BasePolicy's rollouts: its path as given and its weights hash
    (BasePolicy.weights_sha256), by which robot_rl.reward.episodes.rollout_policies tells whose failures a reward model
    saw, wherever the checkpoint was copied to."""
    return {"policy": str(path), "policy_sha256": policy.weights_sha256()}


def collect(
    env,
    policy,
    store: EpisodeStore,
    episodes: int,
    seed: int = 0,
    source: str = "expert",
    metadata: dict | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Run `policy.act(obs) -> action [N, A]` in `env` until `episodes` episodes are committed to `store`.

    A policy with `reset(env_ids)` (e.g. a PolicyRunner around a BasePolicy) is told when envs start new
    episodes (all at the start), as in sim.experts.run_episodes.

    Per-episode attributes: task, the episode's instruction (`env.instruction` at its start), success (any
    step succeeded), source, seed (the env seed) and metadata + {env_index, env_episode}. Image observations
    (env.cameras) are stored like the others, as obs/images/<camera>. Returns counts and rates."""
    if episodes < 1:
        raise ValueError(f"episodes={episodes} must be >= 1")
    n = env.num_envs
    obs = env.reset(seed)
    instruction = list(env.instruction)  # each env's current episode's; after an auto-reset, the next one's
    store.check_compatible(step_schema(obs, env.action_dim))  # before any simulation time is spent
    reset = getattr(policy, "reset", None)
    if reset is not None:
        reset(None)
    recorder = EpisodeRecorder(n)
    recording = np.arange(n) < episodes  # the env's current episode is one of the first `episodes`
    started = int(recording.sum())
    env_episode = np.zeros(n, dtype=np.int64)
    successes, lengths, env_steps = [], [], 0
    while len(successes) < episodes:
        action = policy.act(obs)
        next_obs, reward, done, info = env.step(action)
        env_steps += n
        batch = []
        for i, steps in recorder.add(obs, action, reward, done, info).items():
            if recording[i]:
                k = int(env_episode[i])
                batch.append(Episode(
                    steps=steps, task=env.task.name, source=source, success=bool(steps["success"].any()),
                    instruction=instruction[i], seed=int(seed),
                    metadata={**(metadata or {}), "env_index": i, "env_episode": k},
                ))
            env_episode[i] += 1
            recording[i] = started < episodes
            started += int(recording[i])
        if np.any(done):
            instruction = list(env.instruction)
            if reset is not None:
                reset(np.nonzero(done)[0])
        if batch:
            store.append(batch)
            successes += [ep.success for ep in batch]
            lengths += [ep.length for ep in batch]
            if progress is not None:
                progress(len(batch))
        obs = next_obs
    return {
        "episodes": len(successes),
        "steps": int(sum(lengths)),
        "success_rate": float(np.mean(successes)),
        "mean_length": float(np.mean(lengths)),
        "env_steps": env_steps,  # includes steps of envs whose episode was not kept
        "store_episodes": store.n_episodes,
        "store_steps": store.n_steps,
    }
